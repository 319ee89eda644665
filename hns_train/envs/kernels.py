"""Compiled (numba) loops for the per-step work of `game.py`, bit-identical to the numpy rules.

At one world a step's arithmetic is a few hundred numbers, and the numpy form of the rules
(`rules.py`, `observations.py`, `stats.py`) pays one Python-level call per array operation, about
130 per step: twice the cost of the physics. These kernels do the same arithmetic in a handful
of calls. They are the fast form of those functions, not new rules: every operation keeps
numpy's order and rounding (sums in index order, float32 casts where numpy casts, the same
`max(norm, 1e-9)` guards, Python's float modulo for yaw wrapping, which is numpy's), and
`tests/envs/test_fast_path.py` checks the game against the reference functions and against
MuJoCo's own `mj_ray`. Trigonometry stays in numpy (the caller passes cos / sin), so no result
depends on which libm the compiled code links.

Shapes: W worlds, A agent slots, E = A + Ob entities (agents, then boxes and ramps), L lidar
rays, R = L + E rays per agent (the lidar fan, then one towards each entity centre). `worlds`
lists the worlds to compute (rows of packed ray results follow its order).

`after_physics` runs the kernels that follow the physics (poses to observations, with
`rays.cast` between) as one call for a one-thread game, whose dispatch and Python around it cost
about as much as the loops at one world.

Compiled on first use and cached next to this file (`cache=True`): the first import on a
machine costs a few seconds once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hns_train.envs import rays

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


@njit(**_OPTS)
def _max(a, b):
    return a if (a >= b or a != a) else b  # np.maximum: NaN propagates


@njit(**_OPTS)
def _min(a, b):
    return a if (a <= b or a != a) else b  # np.minimum


@njit(**_OPTS)
def prepare_actions(
    actions,
    nvec,
    noop,
    t,
    prep_steps,
    is_seeker,
    absent,
    levels,
    ctrl,
    ctrl_adr,
    sees_object,
    sq_reach,
    reach_sq,
    grabbed,
):
    """Range check, prep-phase / absent no-ops and controls, in place on `actions` (W, A, 5)
    int64; writes ctrl[w, ctrl_adr[3a + k]] = levels[action k of agent a]. Returns -1 (and
    changes nothing) when some action is outside [0, nvec): the caller then raises; else
    grab_work's answer for the step's lock and grab decisions."""
    W, A, D = actions.shape
    for w in range(W):
        for a in range(A):
            for k in range(D):
                v = actions[w, a, k]
                if v < 0 or v >= nvec[k]:
                    return -1
    for w in range(W):
        prep = t[w] < prep_steps
        for a in range(A):
            if (prep and is_seeker[a]) or absent[w, a]:
                for k in range(D):
                    actions[w, a, k] = noop[k]
            for k in range(3):
                ctrl[w, ctrl_adr[3 * a + k]] = levels[actions[w, a, k]]
    return grab_work(sees_object, sq_reach, reach_sq, grabbed)


@njit(**_OPTS)
def grab_work(sees_object, sq_reach, reach_sq, grabbed):
    """1 when (sees_object & (sq_reach <= reach_sq)).any() over (W, A, Ob) and (W, 1, Ob): some
    object may be eligible; else 2 when some agent holds an object (grabbed (W, A) >= 0); else 0."""
    W, A, Ob = sees_object.shape
    for w in range(W):
        for a in range(A):
            for o in range(Ob):
                if sees_object[w, a, o] and sq_reach[w, a, o] <= reach_sq[w, 0, o]:
                    return 1
    for w in range(W):
        for a in range(A):
            if grabbed[w, a] >= 0:
                return 2
    return 0


@njit(**_OPTS)
def yaw_angles(q, angles):
    """angles[0] = yaw (q[..., 3]) and angles[1] = 0.5 * yaw, (W, E) each, for one cos and one
    sin call over both."""
    W, E = angles.shape[1:]
    for w in range(W):
        for e in range(E):
            yaw = q[w, e, 3]
            angles[0, w, e] = yaw
            angles[1, w, e] = 0.5 * yaw


@njit(**_OPTS)
def kinematics(
    q,
    qd,
    body_pos,
    geom_xy_a,
    geom_xy_b,
    geom_z,
    cos2,
    sin2,
    xquat,
    pos,
    vel,
    front,
    rot,
    centre,
):
    """Entity poses from qpos (game._kinematics): pos = body_pos + q[:3]; velocities; agents'
    fronts (sin yaw, -cos yaw); the yaw quaternion (c, 0, 0, s) of the half angle and its
    rotation; main geom centres pos + R g. cos2 / sin2 (2, W, E): of the yaw, of half the yaw."""
    W, E = cos2.shape[1:]
    A = front.shape[1]
    for w in range(W):
        for e in range(E):
            for k in range(3):
                pos[w, e, k] = body_pos[w, e, k] + q[w, e, k]
            for k in range(4):
                vel[w, e, k] = qd[w, e, k]
            c = cos2[1, w, e]
            s = sin2[1, w, e]
            xquat[w, e, 0] = c
            xquat[w, e, 3] = s
            r0 = c * c - s * s
            r1 = (2.0 * c) * s
            rot[w, e, 0] = r0
            rot[w, e, 1] = r1
            rot[w, e, 2] = r0
            tx = r0 * geom_xy_a[w, e, 0]
            tx += r1 * geom_xy_b[w, e, 0]
            ty = r1 * geom_xy_a[w, e, 1]
            ty += r0 * geom_xy_b[w, e, 1]
            centre[w, e, 0] = pos[w, e, 0] + tx
            centre[w, e, 1] = pos[w, e, 1] + ty
            centre[w, e, 2] = pos[w, e, 2] + geom_z[w, e]
        for a in range(A):
            front[w, a, 0, 0] = sin2[0, w, a]
            front[w, a, 0, 1] = -cos2[0, w, a]


@njit(**_OPTS)
def aim_rays(worlds, centre, pos, front, cos_half_angle, L, sq_reach, ray_vec, ray_pnt, cone):
    """Vision rays of game._cast_rays: direction from each agent to each entity centre
    (normalised; straight up towards itself), the cone test on the unnormalised offsets
    (rules.cone_from_front), squared agent -> object centre distances, and every ray's origin."""
    A = front.shape[1]
    E = centre.shape[1]
    R = ray_vec.shape[2]
    for w in worlds:
        for a in range(A):
            ox = pos[w, a, 0]
            oy = pos[w, a, 1]
            oz = pos[w, a, 2]
            fx = front[w, a, 0, 0]
            fy = front[w, a, 0, 1]
            for e in range(E):
                dx = centre[w, e, 0] - ox
                dy = centre[w, e, 1] - oy
                dz = centre[w, e, 2] - oz
                norm2 = np.sqrt(dx * dx + dy * dy)
                cone[w, a, e] = (dx * fx + dy * fy) / _max(norm2, 1e-9) >= cos_half_angle
                sq = dx * dx + dy * dy
                sq += dz * dz
                if e >= A:
                    sq_reach[w, a, e - A] = sq
                n = _max(np.sqrt(sq), 1e-9)
                if e == a:
                    dx, dy, dz = 0.0, 0.0, 1.0
                else:
                    dx, dy, dz = dx / n, dy / n, dz / n
                ray_vec[w, a, L + e, 0] = dx
                ray_vec[w, a, L + e, 1] = dy
                ray_vec[w, a, L + e, 2] = dz
            for r in range(R):
                ray_pnt[w, a, r, 0] = ox
                ray_pnt[w, a, r, 1] = oy
                ray_pnt[w, a, r, 2] = oz


@njit(**_OPTS)
def read_rays(
    worlds,
    dist,
    geomid,
    L,
    lidar_range,
    agent_present,
    hit_body,
    target_body,
    cone,
    pair_ok,
    lidar,
    sees,
):
    """Lidar (range where nothing is hit, zero for absent agents) and who sees what: the ray
    towards an entity first hits a geom of that entity's body, inside the cone, both present.
    dist / geomid (len(worlds), A * R) in `worlds` order."""
    A = cone.shape[1]
    E = cone.shape[2]
    R = L + E
    nh = hit_body.shape[0]
    for i in range(worlds.shape[0]):
        w = worlds[i]
        for a in range(A):
            scale = 1.0 if agent_present[w, a] else 0.0
            base = a * R
            for k in range(L):
                d = dist[i, base + k] if geomid[i, base + k] >= 0 else lidar_range
                lidar[w, a, k] = _min(d, lidar_range) * scale
            for e in range(E):
                g = geomid[i, base + L + e]
                body = hit_body[g if g >= 0 else nh + g]
                sees[w, a, e] = body == target_body[e] and cone[w, a, e] and pair_ok[w, a, e]


LIFTED, PREP_END, TRUNCATED = 1, 2, 4  # flags returned by rewards_and_stats
BAD_STATE = 8  # after_physics: MuJoCo counted a new bad-state warning


@njit(**_OPTS)
def rewards_and_stats(
    t,
    prep_steps,
    horizon,
    lift_z,
    seeker_present,
    sees,
    seeker_sees_hider,
    sign_hidden,
    sign_seen,
    pos,
    oob_low,
    oob_high,
    oob_penalty,
    penalise_objects,
    object_present,
    agent_present,
    hider_mask,
    hider_count,
    seeker_mask,
    seeker_count,
    returns,
    play_steps,
    hidden_steps,
    reward,
    hiders_seen,
    truncated,
):
    """The end of a step: rules.rewards (with the per-episode masks of game.py), the running
    sums of stats.EpisodeStats.step (team returns, play and hidden steps), t += 1 and the
    truncation at the horizon. in_prep is t < prep_steps before the increment. Returns the
    flags LIFTED (a present seeker's centre is at least lift_z high: box surfing is possible),
    PREP_END (some world's preparation ended with this step) and TRUNCATED (some world's
    episode ended)."""
    W, A = reward.shape
    E = pos.shape[1]
    flags = 0
    for w in range(W):
        prep = t[w] < prep_steps
        seen = False
        for a in range(A):
            for b in range(A):
                if sees[w, a, b] and seeker_sees_hider[w, a, b]:
                    seen = True
        hiders_seen[w] = seen
        bad = False
        if penalise_objects:
            for e in range(A, E):
                x = pos[w, e, 0]
                y = pos[w, e, 1]
                out = x < oob_low or x > oob_high or y < oob_low or y > oob_high
                if out and object_present[w, e - A]:
                    bad = True
        h_sum = np.float32(0.0)
        s_sum = np.float32(0.0)
        for a in range(A):
            r = sign_seen[0, a] if seen else sign_hidden[0, a]
            x = pos[w, a, 0]
            y = pos[w, a, 1]
            if bad or x < oob_low or x > oob_high or y < oob_low or y > oob_high:
                r = oob_penalty
            if not agent_present[w, a] or prep:
                r = 0.0
            if seeker_present[w, a] and pos[w, a, 2] >= lift_z:
                flags |= LIFTED
            r32 = np.float32(r)
            reward[w, a] = r32
            h_sum += r32 * np.float32(hider_mask[w, a])
            s_sum += r32 * np.float32(seeker_mask[w, a])
        returns[w, 0] += np.float64(h_sum) / np.float64(hider_count[w])
        returns[w, 1] += np.float64(s_sum) / np.float64(seeker_count[w])
        if not prep:
            play_steps[w] += 1.0
            if not seen:
                hidden_steps[w] += 1.0
        t[w] += 1
        if t[w] == prep_steps:
            flags |= PREP_END
        truncated[w] = t[w] >= horizon
        if truncated[w]:
            flags |= TRUNCATED
    return flags


@njit(**_OPTS)
def observe(
    t,
    prep_steps,
    pos,
    yaw,
    vel,
    cos_yaw,
    sin_yaw,
    agent_present,
    is_hider,
    self_rows,
    other_rows,
    sees_flat,
    other_sees,
    box_live,
    ramp_live,
    sees,
    lidar,
    obs_self,
    obs_others,
    mask_aa,
    box_obs,
    mask_ab,
    ramp_obs,
    mask_ar,
    obs_lidar,
):
    """game._observe: observation_self (the contract's SelfColumns; rows of absent agents keep
    their zeros), other agents' rows and masks by the per-episode gather tables, object rows
    (ObjectColumns) where the object and the observer are present, visibility masks, lidar."""
    W, A = agent_present.shape
    E = pos.shape[1]
    nb = box_obs.shape[2]
    nr = ramp_obs.shape[2]
    two_pi = 2 * np.pi
    for w in range(W):
        prep = _min(1.0, t[w] / prep_steps) if prep_steps else 1.0
        for a in range(A):
            if not agent_present[w, a]:
                continue
            row = obs_self[w, a]
            for k in range(3):
                row[k] = pos[w, a, k]
            row[3] = (yaw[w, a] + np.pi) % two_pi - np.pi
            for k in range(4):
                row[4 + k] = vel[w, a, k]
            row[8] = 1.0 if is_hider[a] else 0.0
            row[9] = prep
    n_rows = self_rows.shape[0]
    n_sees = sees_flat.shape[0]
    for w in range(W):
        for a in range(A):
            for k in range(other_rows.shape[2]):
                src = _clip(other_rows[w, a, k], n_rows)
                for c in range(self_rows.shape[1]):
                    obs_others[w, a, k, c] = self_rows[src, c]
                mask_aa[w, a, k] = sees_flat[_clip(other_sees[w, a, k], n_sees)]
            for o in range(nb):
                if box_live[w, a, o, 0]:
                    _object_row(box_obs[w, a, o], pos, cos_yaw, sin_yaw, vel, w, A + o)
                mask_ab[w, a, o] = sees[w, a, A + o]
            for o in range(nr):
                if ramp_live[w, a, o, 0]:
                    _object_row(ramp_obs[w, a, o], pos, cos_yaw, sin_yaw, vel, w, A + nb + o)
                mask_ar[w, a, o] = sees[w, a, A + nb + o]
            for k in range(lidar.shape[2]):
                obs_lidar[w, a, k] = lidar[w, a, k]
    return E


@njit(**_OPTS)
def _clip(i, n):
    return 0 if i < 0 else (n - 1 if i >= n else i)  # np.take(mode="clip")


@njit(**_OPTS)
def _object_row(row, pos, cos_yaw, sin_yaw, vel, w, e):
    for k in range(3):
        row[k] = pos[w, e, k]
    row[3] = cos_yaw[w, e]
    row[4] = sin_yaw[w, e]
    for k in range(4):
        row[5 + k] = vel[w, e, k]


@njit(**_OPTS)
def decide_locks_and_grabs(
    agent_pos,
    object_pos,
    cos_yaw,
    sin_yaw,
    half,
    sees_object,
    grab_range,
    actions,
    team,
    lockable,
    no_team,
    locked,
    lock_team,
    lock_agent,
    grabbed,
    new_locked,
    new_team,
    new_agent,
    new_grabbed,
):
    """rules.obb_distance, the eligibility test (seen on the previous step and within
    grab_range of the oriented box), rules.update_locks and rules.choose_grabs in one pass.
    cos_yaw / sin_yaw (W, Ob) of the objects' yaw; actions (W, A, 5) with grab in column 3 and
    lock in column 4; lockable (W, Ob). Writes new_*; returns 1 when some lock changed plus 2
    when some grab did."""
    W, A, Ob = sees_object.shape
    dist = np.empty((A, Ob))
    eligible = np.empty((A, Ob), dtype=np.bool_)
    changed = 0
    for w in range(W):
        for a in range(A):
            for o in range(Ob):
                dx = agent_pos[w, a, 0] - object_pos[w, o, 0]
                dy = agent_pos[w, a, 1] - object_pos[w, o, 1]
                dz = agent_pos[w, a, 2] - object_pos[w, o, 2]
                c = cos_yaw[w, o]
                s = sin_yaw[w, o]
                ex = _max(abs(c * dx + s * dy) - half[w, o, 0], 0.0)
                ey = _max(abs(-s * dx + c * dy) - half[w, o, 1], 0.0)
                ez = _max(abs(dz) - half[w, o, 2], 0.0)
                sq = ex * ex + ey * ey
                sq += ez * ez
                d = np.sqrt(sq)
                dist[a, o] = d
                eligible[a, o] = sees_object[w, a, o] and d <= grab_range
        for o in range(Ob):
            unlock = False
            request = False
            locker = 0
            for a in range(A):
                can = eligible[a, o] and lockable[w, o]
                if can and actions[w, a, 4] == 1:
                    if not request:
                        locker = a
                    request = True
                if locked[w, o] and can and actions[w, a, 4] == 0 and team[a] == lock_team[w, o]:
                    unlock = True
            now = (locked[w, o] or request) and not unlock
            new_locked[w, o] = now
            if now and not locked[w, o]:
                new_team[w, o] = team[locker]
                new_agent[w, o] = locker
            elif now:
                new_team[w, o] = lock_team[w, o]
                new_agent[w, o] = lock_agent[w, o]
            else:
                new_team[w, o] = no_team
                new_agent[w, o] = -1
            if now != locked[w, o]:
                changed |= 1
        for a in range(A):
            best = -1
            best_d = np.inf
            for o in range(Ob):
                if eligible[a, o] and dist[a, o] < best_d:
                    best, best_d = o, dist[a, o]
            g = best if actions[w, a, 3] == 1 else -1
            new_grabbed[w, a] = g
            if g != grabbed[w, a]:
                changed |= 2
    return changed


@njit(**_OPTS)
def after_physics(
    # poses (kinematics)
    q,
    qd,
    body_pos,
    geom_xy_a,
    geom_xy_b,
    geom_z,
    cos2,
    sin2,
    angles,
    xquat,
    pos,
    vel,
    front,
    rot,
    centre,
    # rays (aim_rays, rays.cast, read_rays)
    worlds,
    cos_half_angle,
    L,
    sq_reach,
    ray_vec,
    ray_pnt,
    cone,
    functions,
    model_ptr,
    data_ptr,
    data_qpos,
    qpos,
    geom_xpos,
    geom_xmat,
    geom_type,
    geom_size,
    ray_ok,
    geom_body,
    agent_body,
    pair_ok,
    dist,
    geomid,
    lidar_range,
    hit_body,
    target_body,
    lidar,
    sees_flat,
    # rewards and statistics (rewards_and_stats)
    t,
    prep_steps,
    horizon,
    lift_z,
    seeker_present,
    seeker_sees_hider,
    sign_hidden,
    sign_seen,
    oob_low,
    oob_high,
    oob_penalty,
    penalise_objects,
    object_present,
    agent_present,
    hider_mask,
    hider_count,
    seeker_mask,
    seeker_count,
    returns,
    play_steps,
    hidden_steps,
    hiders_seen,
    # observations (observe)
    is_hider,
    self_rows,
    other_rows,
    other_sees,
    box_live,
    ramp_live,
    obs_self,
    obs_others,
    mask_aa,
    box_obs,
    mask_ab,
    ramp_obs,
    mask_ar,
    obs_lidar,
    # MuJoCo's bad-state warning counters (W, 3) and those already reported
    bad_counts,
    bad_seen,
    # this step's outputs
    reward,
    truncated,
):
    """A one-thread step after its physics and trigonometry, in one call: kinematics,
    aim_rays, rays.cast, read_rays, rewards_and_stats and observe, in game.step's order and
    with its arguments (sees is sees_flat without its trailing entry; the entity views of
    game.py are slices here). Returns rewards_and_stats' flags, and BAD_STATE where a bad-state
    counter differs from the reported one."""
    A = front.shape[1]
    W, E = cone.shape[0], cone.shape[2]
    sees = sees_flat[:-1].reshape((W, A, E))
    kinematics(
        q, qd, body_pos, geom_xy_a, geom_xy_b, geom_z, cos2, sin2, xquat, pos, vel, front, rot,
        centre,
    )  # fmt: skip
    agent_pos = pos[:, :A]
    aim_rays(
        worlds, centre, agent_pos, front, cos_half_angle, L, sq_reach, ray_vec, ray_pnt, cone
    )  # fmt: skip
    rays.cast(
        worlds, functions, model_ptr, data_ptr, data_qpos, qpos, geom_xpos, geom_xmat,
        geom_type, geom_size, ray_ok, geom_body, agent_body, agent_present, cone, pair_ok,
        ray_pnt, ray_vec, L, dist, geomid,
    )  # fmt: skip
    read_rays(
        worlds, dist, geomid, L, lidar_range, agent_present, hit_body, target_body, cone,
        pair_ok, lidar, sees,
    )  # fmt: skip
    flags = rewards_and_stats(
        t, prep_steps, horizon, lift_z, seeker_present, sees, seeker_sees_hider, sign_hidden,
        sign_seen, pos, oob_low, oob_high, oob_penalty, penalise_objects, object_present,
        agent_present, hider_mask, hider_count, seeker_mask, seeker_count, returns, play_steps,
        hidden_steps, reward, hiders_seen, truncated,
    )  # fmt: skip
    observe(
        t, prep_steps, pos, angles[0, :, :A], vel, cos2[0], sin2[0], agent_present, is_hider,
        self_rows, other_rows, sees_flat, other_sees, box_live, ramp_live, sees, lidar,
        obs_self, obs_others, mask_aa, box_obs, mask_ab, ramp_obs, mask_ar, obs_lidar,
    )  # fmt: skip
    for w in range(bad_counts.shape[0]):
        for k in range(bad_counts.shape[1]):
            if bad_counts[w, k] != bad_seen[w, k]:
                flags |= BAD_STATE
    return flags
