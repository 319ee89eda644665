"""Compiled (numba) loops for the per-step work of `game.py`: the rules fused into a few calls.

At one world a step's arithmetic is a few hundred numbers, and the array form of the rules
(`warp/rules.py`, `stats.py`) pays one Python-level call per array operation, about 130
per step: twice the cost of the physics. These kernels do the same arithmetic in a handful of
calls. They are the fast form of those functions, not new rules: every operation keeps the
array form's order and rounding (sums in index order, float32 casts where it casts, the same
`max(norm, 1e-9)` guards, Python's float modulo for yaw wrapping), and
`tests/envs/test_fast_path.py` checks the game against those functions and against MuJoCo's
own `mj_ray`. Trigonometry stays in numpy (the caller passes cos / sin), so no result
depends on which libm the compiled code links.

Shapes: W worlds, A agent slots, E = A + Ob entities (agents, then boxes and ramps), L lidar
rays, R = L + E rays per agent (the lidar fan, then one towards each entity centre). `worlds`
lists the worlds to compute (rows of packed ray results follow its order).

The arrays they read and write are the game's buffers, passed as a few named bundles, each
listed once: `Poses` (entity poses), `rays.Scene` and `rays.Sight` (what the rays need and give),
`Rules` (rewards and running statistics) and `Views` (observations). The game builds them when
it builds its batch and, for the per-episode tables they hold, at every reset.

`after_physics` runs the kernels that follow the physics (poses to observations, with
`rays.cast` between) as one call for a one-thread game, whose dispatch and Python around it cost
about as much as the loops at one world.

Compiled on first use and cached next to this file (`cache=True`): the first import on a
machine costs a few seconds once.
"""

from __future__ import annotations

from typing import NamedTuple

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


class Poses(NamedTuple):
    """Entity poses read from the batch rows (`kinematics`); the game fills it once, when it
    builds its batch. Entities: agents, then boxes and ramps."""

    q: np.ndarray  # (W, E, 4) qpos x, y, z, yaw of each entity: a view of the batch rows
    qd: np.ndarray  # (W, E, 4) their qvel
    body_pos: np.ndarray  # (W, E, 3) each entity body's position in its world's model
    geom_xy_a: np.ndarray  # (W, E, 2) (g_x, g_x) of its main geom's offset g
    geom_xy_b: np.ndarray  # (W, E, 2) (-g_y, g_y)
    geom_z: np.ndarray  # (W, E) g_z
    angles: np.ndarray  # (2, W, E) yaw and half yaw (`yaw_angles`)
    cos2: np.ndarray  # (2, W, E) their cos and sin (numpy's, written by the caller)
    sin2: np.ndarray
    xquat: np.ndarray  # (W, E, 4) the yaw quaternion
    pos: np.ndarray  # (W, E, 3)
    vel: np.ndarray  # (W, E, 4)
    front: np.ndarray  # (W, A, 1, 2) agents' facing directions
    centre: np.ndarray  # (W, E, 3) main geom centres: what vision rays aim at


@njit(**_OPTS)
def yaw_angles(poses):
    """angles[0] = yaw (q[..., 3]) and angles[1] = 0.5 * yaw, (W, E) each, for one cos and one
    sin call over both."""
    q, angles = poses.q, poses.angles
    W, E = angles.shape[1:]
    for w in range(W):
        for e in range(E):
            yaw = q[w, e, 3]
            angles[0, w, e] = yaw
            angles[1, w, e] = 0.5 * yaw


@njit(**_OPTS)
def kinematics(p):
    """Entity poses from qpos (game._kinematics): pos = body_pos + q[:3]; velocities; agents'
    fronts (sin yaw, -cos yaw); the yaw quaternion (c, 0, 0, s) of the half angle; main geom
    centres pos + R g, R its rotation (cos = c^2 - s^2, sin = 2cs). `p`: Poses, its cos2 /
    sin2 written."""
    W, E = p.cos2.shape[1:]
    A = p.front.shape[1]
    for w in range(W):
        for e in range(E):
            for k in range(3):
                p.pos[w, e, k] = p.body_pos[w, e, k] + p.q[w, e, k]
            for k in range(4):
                p.vel[w, e, k] = p.qd[w, e, k]
            c = p.cos2[1, w, e]
            s = p.sin2[1, w, e]
            p.xquat[w, e, 0] = c
            p.xquat[w, e, 3] = s
            r0 = c * c - s * s
            r1 = (2.0 * c) * s
            tx = r0 * p.geom_xy_a[w, e, 0]
            tx += r1 * p.geom_xy_b[w, e, 0]
            ty = r1 * p.geom_xy_a[w, e, 1]
            ty += r0 * p.geom_xy_b[w, e, 1]
            p.centre[w, e, 0] = p.pos[w, e, 0] + tx
            p.centre[w, e, 1] = p.pos[w, e, 1] + ty
            p.centre[w, e, 2] = p.pos[w, e, 2] + p.geom_z[w, e]
        for a in range(A):
            p.front[w, a, 0, 0] = p.sin2[0, w, a]
            p.front[w, a, 0, 1] = -p.cos2[0, w, a]


@njit(**_OPTS)
def aim_rays(worlds, poses, sight):
    """Vision rays of game._cast_rays: direction from each agent to each entity centre
    (normalised; straight up towards itself), the cone test on the unnormalised offsets
    (warp/rules.cone_from_front), squared agent -> object centre distances, and every ray's origin.
    Writes sight's ray_vec (the sight lines), ray_pnt, cone and sq_reach."""
    L = sight.L
    A = poses.front.shape[1]
    E = poses.centre.shape[1]
    R = sight.ray_vec.shape[2]
    for w in worlds:
        for a in range(A):
            ox = poses.pos[w, a, 0]
            oy = poses.pos[w, a, 1]
            oz = poses.pos[w, a, 2]
            fx = poses.front[w, a, 0, 0]
            fy = poses.front[w, a, 0, 1]
            for e in range(E):
                dx = poses.centre[w, e, 0] - ox
                dy = poses.centre[w, e, 1] - oy
                dz = poses.centre[w, e, 2] - oz
                norm2 = np.sqrt(dx * dx + dy * dy)
                sight.cone[w, a, e] = (dx * fx + dy * fy) / _max(
                    norm2, 1e-9
                ) >= sight.cos_half_angle
                sq = dx * dx + dy * dy
                sq += dz * dz
                if e >= A:
                    sight.sq_reach[w, a, e - A] = sq
                n = _max(np.sqrt(sq), 1e-9)
                if e == a:
                    dx, dy, dz = 0.0, 0.0, 1.0
                else:
                    dx, dy, dz = dx / n, dy / n, dz / n
                sight.ray_vec[w, a, L + e, 0] = dx
                sight.ray_vec[w, a, L + e, 1] = dy
                sight.ray_vec[w, a, L + e, 2] = dz
            for r in range(R):
                sight.ray_pnt[w, a, r, 0] = ox
                sight.ray_pnt[w, a, r, 1] = oy
                sight.ray_pnt[w, a, r, 2] = oz


@njit(**_OPTS)
def read_rays(worlds, dist, geomid, sight):
    """Lidar (range where nothing is hit, zero for absent agents) and who sees what: the ray
    towards an entity first hits a geom of that entity's body, inside the cone, both present.
    dist / geomid (len(worlds), A * R) in `worlds` order (sight's own, or the batch's)."""
    L = sight.L
    A = sight.cone.shape[1]
    E = sight.cone.shape[2]
    R = L + E
    sees = _sees(sight)
    nh = sight.hit_body.shape[0]
    for i in range(worlds.shape[0]):
        w = worlds[i]
        for a in range(A):
            scale = 1.0 if sight.agent_present[w, a] else 0.0
            base = a * R
            for k in range(L):
                d = dist[i, base + k] if geomid[i, base + k] >= 0 else sight.lidar_range
                sight.lidar[w, a, k] = _min(d, sight.lidar_range) * scale
            for e in range(E):
                g = geomid[i, base + L + e]
                body = sight.hit_body[g if g >= 0 else nh + g]
                sees[w, a, e] = (
                    body == sight.target_body[e] and sight.cone[w, a, e] and sight.pair_ok[w, a, e]
                )


@njit(**_OPTS)
def _sees(sight):
    """(W, A, E) view of sight.sees_flat without its trailing entry."""
    W, A, E = sight.cone.shape
    return sight.sees_flat[:-1].reshape((W, A, E))


LIFTED, PREP_END, TRUNCATED = 1, 2, 4  # flags returned by rewards_and_stats


class Rules(NamedTuple):
    """What `rewards_and_stats` reads and sums: the clock, the rules' numbers, the episode
    tables built at reset and the running statistics (stats.EpisodeStats' arrays)."""

    t: np.ndarray  # (W,) env steps done this episode
    prep_steps: int
    horizon: int
    lift_z: float  # a seeker's centre this high is off the floor (box surfing)
    seeker_present: np.ndarray  # (W, A)
    seeker_sees_hider: np.ndarray  # (W, A, A) seeker a present, hider b present
    sign_hidden: np.ndarray  # (1, A) each agent's reward while no hider is seen
    sign_seen: np.ndarray  # (1, A) and while one is
    oob_low: float
    oob_high: float
    oob_penalty: float
    penalise_objects: bool  # objects out of bounds penalise every agent
    object_present: np.ndarray  # (W, Ob)
    agent_present: np.ndarray  # (W, A)
    hider_mask: np.ndarray  # (W, A) present hiders, (W,) their count (at least 1)
    hider_count: np.ndarray
    seeker_mask: np.ndarray  # (W, A) present seekers, (W,) their count (at least 1)
    seeker_count: np.ndarray
    returns: np.ndarray  # (W, 2) per-team returns
    play_steps: np.ndarray  # (W,)
    hidden_steps: np.ndarray  # (W,)
    hiders_seen: np.ndarray  # (W,) the latest step's


@njit(**_OPTS)
def rewards_and_stats(rules, sees, pos, reward, truncated):
    """The end of a step: warp/rules.rewards (with the per-episode masks of game.py), the
    running sums of stats.EpisodeStats.add_step (team returns, play and hidden steps), t += 1
    and the truncation at the horizon. in_prep is t < prep_steps before the increment. Returns the
    flags LIFTED (a present seeker's centre is at least lift_z high: box surfing is possible),
    PREP_END (some world's preparation ended with this step) and TRUNCATED (some world's
    episode ended)."""
    W, A = reward.shape
    E = pos.shape[1]
    lo = rules.oob_low
    hi = rules.oob_high
    flags = 0
    for w in range(W):
        prep = rules.t[w] < rules.prep_steps
        seen = False
        for a in range(A):
            for b in range(A):
                if sees[w, a, b] and rules.seeker_sees_hider[w, a, b]:
                    seen = True
        rules.hiders_seen[w] = seen
        bad = False
        if rules.penalise_objects:
            for e in range(A, E):
                x = pos[w, e, 0]
                y = pos[w, e, 1]
                out = x < lo or x > hi or y < lo or y > hi
                if out and rules.object_present[w, e - A]:
                    bad = True
        h_sum = np.float32(0.0)
        s_sum = np.float32(0.0)
        for a in range(A):
            r = rules.sign_seen[0, a] if seen else rules.sign_hidden[0, a]
            x = pos[w, a, 0]
            y = pos[w, a, 1]
            if bad or x < lo or x > hi or y < lo or y > hi:
                r = rules.oob_penalty
            if not rules.agent_present[w, a] or prep:
                r = 0.0
            if rules.seeker_present[w, a] and pos[w, a, 2] >= rules.lift_z:
                flags |= LIFTED
            r32 = np.float32(r)
            reward[w, a] = r32
            h_sum += r32 * np.float32(rules.hider_mask[w, a])
            s_sum += r32 * np.float32(rules.seeker_mask[w, a])
        rules.returns[w, 0] += np.float64(h_sum) / np.float64(rules.hider_count[w])
        rules.returns[w, 1] += np.float64(s_sum) / np.float64(rules.seeker_count[w])
        if not prep:
            rules.play_steps[w] += 1.0
            if not seen:
                rules.hidden_steps[w] += 1.0
        rules.t[w] += 1
        if rules.t[w] == rules.prep_steps:
            flags |= PREP_END
        truncated[w] = rules.t[w] >= rules.horizon
        if truncated[w]:
            flags |= TRUNCATED
    return flags


class Views(NamedTuple):
    """The observation buffers (`game.obs`' arrays and observation_self's rows) and the
    per-episode gather tables `observe` fills them by."""

    is_hider: np.ndarray  # (A,)
    self_rows: np.ndarray  # (W * A + 1, SELF_DIM) observation_self rows, a trailing zero row
    other_rows: np.ndarray  # (W, A, A - 1) row of each agent's k-th other (the zero row: none)
    other_sees: np.ndarray  # (W, A, A - 1) index into sight.sees_flat: i sees its k-th other
    box_live: np.ndarray  # (W, A, nb, 1) observer and box present
    ramp_live: np.ndarray  # (W, A, nr, 1)
    obs_self: np.ndarray  # the observation arrays (contract.py)
    obs_others: np.ndarray
    mask_aa: np.ndarray
    box_obs: np.ndarray
    mask_ab: np.ndarray
    ramp_obs: np.ndarray
    mask_ar: np.ndarray
    obs_lidar: np.ndarray


@njit(**_OPTS)
def observe(rules, poses, sight, views):
    """game._observe: observation_self (the contract's SelfColumns; rows of absent agents keep
    their zeros), other agents' rows and masks by the per-episode gather tables, object rows
    (ObjectColumns) where the object and the observer are present, visibility masks, lidar."""
    t = rules.t
    prep_steps = rules.prep_steps
    agent_present = rules.agent_present
    pos = poses.pos
    vel = poses.vel
    cos_yaw = poses.cos2[0]
    sin_yaw = poses.sin2[0]
    sees_flat = sight.sees_flat
    sees = _sees(sight)
    lidar = sight.lidar
    W, A = agent_present.shape
    E = pos.shape[1]
    nb = views.box_obs.shape[2]
    nr = views.ramp_obs.shape[2]
    two_pi = 2 * np.pi
    for w in range(W):
        prep = _min(1.0, t[w] / prep_steps) if prep_steps else 1.0
        for a in range(A):
            if not agent_present[w, a]:
                continue
            row = views.obs_self[w, a]
            for k in range(3):
                row[k] = pos[w, a, k]
            row[3] = (poses.angles[0, w, a] + np.pi) % two_pi - np.pi
            for k in range(4):
                row[4 + k] = vel[w, a, k]
            row[8] = 1.0 if views.is_hider[a] else 0.0
            row[9] = prep
    n_rows = views.self_rows.shape[0]
    n_sees = sees_flat.shape[0]
    for w in range(W):
        for a in range(A):
            for k in range(views.other_rows.shape[2]):
                src = _clip(views.other_rows[w, a, k], n_rows)
                for c in range(views.self_rows.shape[1]):
                    views.obs_others[w, a, k, c] = views.self_rows[src, c]
                views.mask_aa[w, a, k] = sees_flat[_clip(views.other_sees[w, a, k], n_sees)]
            for o in range(nb):
                if views.box_live[w, a, o, 0]:
                    _object_row(views.box_obs[w, a, o], pos, cos_yaw, sin_yaw, vel, w, A + o)
                views.mask_ab[w, a, o] = sees[w, a, A + o]
            for o in range(nr):
                if views.ramp_live[w, a, o, 0]:
                    _object_row(views.ramp_obs[w, a, o], pos, cos_yaw, sin_yaw, vel, w, A + nb + o)
                views.mask_ar[w, a, o] = sees[w, a, A + nb + o]
            for k in range(lidar.shape[2]):
                views.obs_lidar[w, a, k] = lidar[w, a, k]
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
    """warp/rules.obb_distance, the eligibility test (seen on the previous step and within
    grab_range of the oriented box), update_locks and choose_grabs of warp/rules.py in one pass.
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
def after_physics(worlds, poses, scene, sight, rules, views, reward, truncated):
    """A one-thread step after its physics and trigonometry, in one call: kinematics,
    aim_rays, rays.cast, read_rays, rewards_and_stats and observe, in game.step's order.
    Returns rewards_and_stats' flags."""
    kinematics(poses)
    aim_rays(worlds, poses, sight)
    rays.cast(worlds, scene, sight)
    read_rays(worlds, sight.dist, sight.geomid, sight)
    flags = rewards_and_stats(rules, _sees(sight), poses.pos, reward, truncated)
    observe(rules, poses, sight, views)
    return flags
