"""Per-agent observations (spec §5): gymnasium spaces, the other-agent order and lock flags.

Keys, shapes, dtypes and column meanings are the contract's (`contract.py`).

All arrays are float32 with a leading (W, A) world x agent layout. Entity rows have fixed
maximum counts per preset; masks say which rows are visible (`mask_*_obs`: vision cone and line
of sight) or exist this episode (`mask_*_obs_spoof`, for the omniscient critic). Rows of absent
entities and of absent agents are zero.

Other agents appear in the order i-1, i-2, ... (mod the number of agents present). The gather
indices and lock flags below take numpy arrays or torch tensors alike (array-api-compat), for
both games. The whole dictionary is assembled by `warp/rules.observe` (tensor code, the Warp
game's and the reference the C game's compiled writes are checked against).
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace, device
from gymnasium import spaces

from hns_train.envs.config import GameConfig
from hns_train.envs.contract import LIDAR_KEY, OBS_DTYPE, is_mask_key, observation_shapes


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


def other_gathers(others, n_entities: int):
    """Flat gather indices from the (W, A, A-1) table of each agent's k-th other agent
    (`others_table`, -1 pads), arrays or tensors alike: the other's row among the W * A agent
    rows, and "agent i sees its k-th other" among the W * A * n_entities sight entries; a pad
    points one past the end (where the games keep a zero row / False)."""
    xp = array_namespace(others)
    W, A = others.shape[:2]
    valid = others >= 0
    w_ = xp.arange(W, device=device(others))[:, None, None]
    a_ = xp.arange(A, device=device(others))[None, :, None]
    rows = xp.where(valid, w_ * A + others, W * A)
    sees = xp.where(valid, (w_ * A + a_) * n_entities + others, W * A * n_entities)
    return rows, sees


def lock_flags(lock_agent, lock_team, locked, team):
    """(W, A, O, 3) bool: locked by me, by my team, at all; arrays or tensors alike."""
    xp = array_namespace(lock_agent)
    A = team.shape[0]
    me = lock_agent[:, None, :] == xp.arange(A, device=device(team))[None, :, None]
    mine = lock_team[:, None, :] == team[None, :, None]
    anyone = xp.broadcast_to(locked[:, None, :], me.shape)
    return xp.stack([me, mine & anyone, anyone], axis=-1)
