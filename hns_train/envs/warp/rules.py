"""The game's rules as torch tensor operations, for worlds whose state lives on a device.

Each function is the tensor form of the numpy function of the same name in `envs/rules.py`,
`envs/observations.py` or `envs/game.py` (that module's docstring states the rules); shapes are
the same, W worlds x A agent slots x O object slots. tests/envs/test_warp_rules.py checks each
against its numpy original on random inputs, so the two stay one rule.
"""

from __future__ import annotations

import math

import torch

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
    """New (locked, lock_team, lock_agent) after one step of lock actions (rules.update_locks)."""
    can = eligible & lockable[None, None, :]
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
    """(W, A) object each agent holds after this step, -1 for none (rules.choose_grabs: decided
    afresh every step, the closest eligible object, ties to the lower index)."""
    if dist.shape[2] == 0:
        return torch.full(grab_action.shape, -1, dtype=torch.int64, device=grab_action.device)
    cand = torch.where(eligible, dist, torch.full_like(dist, math.inf))
    best, closest = cand.min(dim=2)
    has = torch.isfinite(best)
    return torch.where((grab_action == 1) & has, closest, torch.full_like(closest, -1))


def wrap_yaw(yaw: torch.Tensor) -> torch.Tensor:
    """yaw wrapped to [-pi, pi) (observations.wrap_yaw)."""
    return torch.remainder(yaw + math.pi, 2 * math.pi) - math.pi


def lock_flags(lock_agent, lock_team, locked, team) -> torch.Tensor:
    """(W, A, O, 3) float: locked by me, by my team, at all (observations.lock_flags)."""
    A = team.shape[0]
    me = lock_agent[:, None, :] == torch.arange(A, device=team.device)[None, :, None]
    mine = lock_team[:, None, :] == team[None, :, None]
    anyone = locked[:, None, :].expand_as(me)
    return torch.stack([me, mine & anyone, anyone], dim=-1).to(torch.float32)


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
