"""The game's rules as torch tensor operations: their one implementation as array code.

`envs/rules.py` states the rules; these functions are them, over W worlds x A agent slots x O
object slots (the shapes of each docstring), on any torch device. The Warp game runs them on its
device arrays; the C game runs the same rules fused into compiled loops (`envs/kernels.py`),
and tests/envs/test_fast_path.py checks those loops against these functions, called on CPU
tensors viewing the C game's state, step by step (lock and grab decisions, rewards, vision
cones, observations), so the two games stay one rule.
"""

from __future__ import annotations

import math

import torch

from hns_train.envs import observations as O
from hns_train.envs.config import GameConfig
from hns_train.envs.rules import NO_TEAM


def cone_from_front(d: torch.Tensor, front: torch.Tensor, cos_half_angle: float) -> torch.Tensor:
    """(W, A, T) bool: offsets d (W, A, T, >=2) inside the cone around fronts (W, A, 1, 2)."""
    d = d[..., :2]
    norm = torch.sqrt((d * d).sum(-1))
    cos = (d * front).sum(-1) / norm.clamp_min(1e-9)
    return cos >= cos_half_angle


def obb_distance(point, centre, yaw, half) -> torch.Tensor:
    """(W, A, O) distance from points (W, A, 3) to boxes centred at (W, O, 3) with yaw (W, O)
    and half sizes (W, O, 3)."""
    d = point[:, :, None, :] - centre[:, None, :, :]
    c, s = torch.cos(yaw)[:, None, :], torch.sin(yaw)[:, None, :]
    local = torch.stack(
        [c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1], d[..., 2]], -1
    )
    excess = (local.abs() - half[:, None, :, :]).clamp_min(0.0)
    return torch.linalg.vector_norm(excess, dim=-1)


def update_locks(locked, lock_team, lock_agent, eligible, lock_action, team, lockable):
    """New (locked, lock_team, lock_agent) after one step of lock actions (the team rule of
    rules.py). locked (W, O) bool, lock_team / lock_agent (W, O) int, eligible (W, A, O),
    lock_action (W, A) in {0, 1}, team (A,), lockable (O,) or per world (W, O)."""
    can = eligible & lockable.expand(locked.shape)[:, None, :]
    wants_lock = can & (lock_action[:, :, None] == 1)
    same_team = team[None, :, None] == lock_team[:, None, :]
    unlock = locked & (can & (lock_action[:, :, None] == 0) & same_team).any(dim=1)
    request = wants_lock.any(dim=1)
    new_locked = (locked | request) & ~unlock
    newly = new_locked & ~locked
    locker = wants_lock.to(torch.uint8).argmax(dim=1)  # first requesting agent
    new_team = torch.where(
        newly, team[locker], torch.where(new_locked, lock_team, torch.full_like(lock_team, NO_TEAM))
    )
    new_agent = torch.where(
        newly, locker, torch.where(new_locked, lock_agent, torch.full_like(lock_agent, -1))
    )
    return new_locked, new_team, new_agent


def choose_grabs(grab_action, eligible, dist) -> torch.Tensor:
    """(W, A) object each agent holds after this step, -1 for none (rules.py: decided afresh
    every step, the closest eligible object, ties to the lower index). grab_action (W, A) in
    {0, 1}; eligible, dist (W, A, O)."""
    if dist.shape[2] == 0:
        return torch.full(grab_action.shape, -1, dtype=torch.int64, device=grab_action.device)
    cand = torch.where(eligible, dist, torch.full_like(dist, math.inf))
    best, closest = cand.min(dim=2)
    has = torch.isfinite(best)
    return torch.where((grab_action == 1) & has, closest, torch.full_like(closest, -1))


def wrap_yaw(yaw: torch.Tensor) -> torch.Tensor:
    """yaw wrapped to [-pi, pi)."""
    return torch.remainder(yaw + math.pi, 2 * math.pi) - math.pi


def weld_data(agent_pos, agent_yaw, object_pos, object_yaw) -> torch.Tensor:
    """(W, A, O, 12) weld `eq_data` rows holding each object's current pose relative to each
    agent (game.weld_data for bodies that only turn about z): anchor 0, the object's body origin
    in the agent's body frame, relative yaw quaternion, torque scale 1, flag 0. Positions are
    body origins (W, A | O, 3), yaws (W, A | O)."""
    d = object_pos[:, None, :, :] - agent_pos[:, :, None, :]  # (W, A, O, 3)
    c, s = torch.cos(agent_yaw)[:, :, None], torch.sin(agent_yaw)[:, :, None]
    rel = torch.stack(
        [c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1], d[..., 2]], -1
    )
    half = 0.5 * (object_yaw[:, None, :] - agent_yaw[:, :, None])
    zero = torch.zeros_like(half)
    return torch.cat(
        [
            torch.zeros_like(rel),
            rel,
            torch.stack([torch.cos(half), zero, zero, torch.sin(half)], -1),
            torch.stack([torch.ones_like(half), zero], -1),
        ],
        dim=-1,
    )


def rewards(
    cfg: GameConfig,
    sees_agent,
    seeker_sees_hider,
    is_hider,
    agent_present,
    ent_xy,
    object_present,
    in_prep,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards (W, A) float32, hiders_seen (W,)) of a step (rules.py). sees_agent (W, A, A): row
    sees column; seeker_sees_hider (W, A, A): the pairs of a present seeker and a present hider;
    ent_xy (W, A + O, 2) agents then objects; in_prep (W,)."""
    A = is_hider.shape[0]
    seen = (sees_agent & seeker_sees_hider).any(dim=(1, 2))
    sign = torch.where(is_hider, 1.0, -1.0)[None, :]
    r = torch.where(seen[:, None], -sign, sign)
    out = ((ent_xy < cfg.oob_low) | (ent_xy > cfg.oob_high)).any(dim=-1)
    penalised = out[:, :A]
    if cfg.penalise_objects_oob and object_present.shape[1]:
        bad = (out[:, A:] & object_present).any(dim=1)
        penalised = penalised | bad[:, None]
    r = torch.where(penalised, cfg.oob_penalty, r)
    r = torch.where(agent_present & ~in_prep[:, None], r, 0.0)
    return r.to(torch.float32), seen


def observe(cfg: GameConfig, s, other_rows, other_sees) -> dict[str, torch.Tensor]:
    """The observation dictionary (contract.py's keys and columns, float32) of game state `s`:
    t (W,), is_hider / team (A,), agent_present (W, A), object_present (W, O), agent_pos (W, A,
    3), agent_yaw (W, A), agent_vel (W, A, 4), object_pos (W, O, 3), object_yaw_cos /
    object_yaw_sin (W, O), object_vel (W, O, 4), half (W, O, 3), sees (W, A, A + O), lidar
    (W, A, L), lock_agent / lock_team / locked (W, O); other_rows / other_sees from
    `observations.other_gathers`. Rows of absent entities and of absent agents are zero."""
    W, A = s.agent_present.shape
    nb = cfg.max_boxes
    live = s.agent_present[:, :, None]
    if cfg.prep_steps:
        prep = torch.clamp(s.t.to(torch.float32) / cfg.prep_steps, max=1.0)
    else:
        prep = torch.ones(W, device=live.device)
    vec = torch.cat(
        [
            s.agent_pos,
            wrap_yaw(s.agent_yaw)[..., None],
            s.agent_vel,
            s.is_hider[None, :, None].expand(W, A, 1).to(torch.float32),
            prep[:, None, None].expand(W, A, 1),
        ],
        dim=-1,
    )
    vec = torch.where(live, vec, 0.0)
    rows = torch.cat([vec.reshape(W * A, -1), vec.new_zeros(1, vec.shape[-1])])
    sees_flat = torch.cat([s.sees.reshape(-1), s.sees.new_zeros(1)])
    obj = torch.cat(
        [
            s.object_pos,
            s.object_yaw_cos[..., None],
            s.object_yaw_sin[..., None],
            s.object_vel,
        ],
        dim=-1,
    )
    present = s.object_present[:, None, :] & live
    flags = O.lock_flags(s.lock_agent, s.lock_team, s.locked, s.team).to(torch.float32)
    box = obj[:, None, :nb].expand(W, A, nb, obj.shape[-1])
    parts = [box]
    if cfg.box_size_obs:
        size = 2 * s.half[:, None, :nb]
        parts.append(size.expand(W, A, nb, 3))
    if cfg.boxes_lockable:
        parts.append(flags[:, :, :nb])
    box = torch.cat(parts, dim=-1)
    ramp = obj[:, None, nb:].expand(W, A, cfg.n_ramps, obj.shape[-1])
    parts = [ramp]
    if cfg.ramps_lockable and cfg.ramp_lock_obs:
        if cfg.box_size_obs:
            parts.append(ramp.new_zeros(W, A, cfg.n_ramps, 3))
        parts.append(flags[:, :, nb:])
    ramp = torch.cat(parts, dim=-1)
    seen = s.sees[:, :, A:] & present
    obs = {
        "observation_self": vec,
        "agent_qpos_qvel": rows[other_rows],
        "box_obs": torch.where(present[:, :, :nb, None], box, 0.0),
        "ramp_obs": torch.where(present[:, :, nb:, None], ramp, 0.0),
        "lidar": s.lidar,
        "mask_aa_obs": sees_flat[other_sees],
        "mask_ab_obs": seen[:, :, :nb],
        "mask_ar_obs": seen[:, :, nb:],
        "mask_aa_obs_spoof": other_rows < W * A,
        "mask_ab_obs_spoof": present[:, :, :nb],
        "mask_ar_obs_spoof": present[:, :, nb:],
    }
    out = {}
    for key, value in obs.items():
        value = value.to(torch.float32)
        shape = (W, A) + (1,) * (value.dim() - 2)
        out[key] = torch.where(live.reshape(shape), value, 0.0)
    return out
