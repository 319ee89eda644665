"""Per-agent observations (spec §5): gymnasium spaces and the reference assembly over a batch.

Keys, shapes, dtypes and column meanings are the contract's (`contract.py`), re-exported here.

All arrays are float32 with a leading (W, A) world x agent layout. Entity rows have fixed
maximum counts per preset; masks say which rows are visible (`mask_*_obs`: vision cone and line
of sight) or exist this episode (`mask_*_obs_spoof`, for the omniscient critic). Rows of absent
entities and of absent agents are zero.

Other agents appear in the order i-1, i-2, ... (mod the number of agents present).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from hns_train.envs.config import GameConfig
from hns_train.envs.contract import (  # noqa: F401  (re-exported: the layout lives in contract.py)
    LIDAR_KEY,
    MASK_KEYS,
    OBJECT_BASE_DIM,
    OBS_DTYPE,
    SELF_DIM,
    box_dim,
    is_mask_key,
    observation_shapes,
    ramp_dim,
)


def observation_space(cfg: GameConfig) -> spaces.Dict:
    def box(key, shape):
        if is_mask_key(key):
            return spaces.Box(0.0, 1.0, shape, OBS_DTYPE)
        if key == LIDAR_KEY:
            return spaces.Box(0.0, cfg.lidar_range, shape, OBS_DTYPE)
        return spaces.Box(-np.inf, np.inf, shape, OBS_DTYPE)

    return spaces.Dict({k: box(k, s) for k, s in observation_shapes(cfg).items()})


def others_table(agent_present: np.ndarray) -> np.ndarray:
    """(W, A, A-1) slot of each agent's k-th other agent (i-1, i-2, ... mod n); -1 pads."""
    W, A = agent_present.shape
    if A < 2:
        return np.full((W, A, 0), -1, dtype=np.int64)
    n = agent_present.sum(axis=1)[:, None, None]  # agents present per world
    rank = np.cumsum(agent_present, axis=1) - 1  # position of each slot among those present
    slot_of_rank = np.argsort(~agent_present, axis=1, kind="stable")  # present slots first
    k = np.arange(1, A)
    want = (rank[:, :, None] - k) % np.maximum(n, 1)  # rank of the k-th other
    slots = np.take_along_axis(slot_of_rank, want.reshape(W, -1), axis=1).reshape(W, A, A - 1)
    valid = agent_present[:, :, None] & (k < n)
    return np.where(valid, slots, -1).astype(np.int64)


def agent_vectors(
    pos: np.ndarray, yaw: np.ndarray, vel: np.ndarray, is_hider: np.ndarray, prep_progress
) -> np.ndarray:
    """(W, A, 10) from centres (W, A, 3), yaw (W, A), velocities (W, A, 4), is_hider (A,)."""
    W, A = yaw.shape
    return np.concatenate(
        [
            pos,
            wrap_yaw(yaw)[..., None],
            vel,
            np.broadcast_to(is_hider[None, :, None], (W, A, 1)),
            np.broadcast_to(np.asarray(prep_progress, float).reshape(-1, 1, 1), (W, A, 1)),
        ],
        axis=-1,
    )


def wrap_yaw(yaw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """yaw wrapped to [-pi, pi), into `out` when given."""
    out = np.add(yaw, np.pi, out=out)
    np.mod(out, 2 * np.pi, out=out)
    return np.subtract(out, np.pi, out=out)


def object_rows(pos, yaw, vel, size=None) -> np.ndarray:
    """(W, O, 9 [+3]) entity features shared by every observer."""
    parts = [pos, np.cos(yaw)[..., None], np.sin(yaw)[..., None], vel]
    if size is not None:
        parts.append(size)
    return np.concatenate(parts, axis=-1)


def lock_flags(lock_agent, lock_team, locked, team) -> np.ndarray:
    """(W, A, O, 3): locked by me, by my team, at all."""
    A = team.shape[0]
    me = lock_agent[:, None, :] == np.arange(A)[None, :, None]
    mine = lock_team[:, None, :] == team[None, :, None]
    anyone = np.broadcast_to(locked[:, None, :], me.shape)
    return np.stack([me, mine & anyone, anyone], axis=-1)


def assemble(
    cfg: GameConfig,
    agent_vec: np.ndarray,
    agent_present: np.ndarray,
    others: np.ndarray,
    sees_agent: np.ndarray,
    box_rows: np.ndarray,
    ramp_rows: np.ndarray,
    flags: np.ndarray,
    sees_object: np.ndarray,
    object_present: np.ndarray,
    lidar: np.ndarray,
) -> dict[str, np.ndarray]:
    W, A = agent_present.shape
    nb = cfg.max_boxes
    valid = others >= 0
    idx = np.maximum(others, 0)
    w = np.arange(W)[:, None, None]
    a = np.arange(A)[None, :, None]
    other_vec = np.where(valid[..., None], agent_vec[w, idx], 0.0)
    mask_aa = valid & sees_agent[w, a, idx]

    def per_agent(rows):  # (W, O, F) -> (W, A, O, F)
        return np.broadcast_to(rows[:, None], (W, A, *rows.shape[1:]))

    box = per_agent(box_rows)
    if cfg.boxes_lockable:
        box = np.concatenate([box, flags[:, :, :nb]], axis=-1)
    ramp = per_agent(ramp_rows)
    if cfg.ramps_lockable and cfg.ramp_lock_obs:
        if cfg.box_size_obs:
            ramp = np.concatenate([ramp, np.zeros((*ramp.shape[:3], 3))], axis=-1)
        ramp = np.concatenate([ramp, flags[:, :, nb:]], axis=-1)
    present = object_present[:, None, :] & agent_present[:, :, None]
    seen = sees_object & present
    box = np.where(present[:, :, :nb, None], box, 0.0)
    ramp = np.where(present[:, :, nb:, None], ramp, 0.0)

    live = agent_present[:, :, None]
    obs = {
        "observation_self": agent_vec,
        "agent_qpos_qvel": other_vec,
        "box_obs": box,
        "ramp_obs": ramp,
        "lidar": lidar,
        "mask_aa_obs": mask_aa,
        "mask_ab_obs": seen[:, :, :nb],
        "mask_ar_obs": seen[:, :, nb:],
        "mask_aa_obs_spoof": valid,
        "mask_ab_obs_spoof": present[:, :, :nb],
        "mask_ar_obs_spoof": present[:, :, nb:],
    }
    out = {}
    for key, value in obs.items():
        value = np.asarray(value, dtype=np.float32)
        out[key] = np.where(live.reshape(W, A, *([1] * (value.ndim - 2))), value, 0.0).astype(
            np.float32
        )
    return out
