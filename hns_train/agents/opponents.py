"""Built-in fixed opponents: teams that act without a network, on the env's action layout.

The action layout (5 int64 columns: x force, y force, z torque bins in [0, action_bins), grab,
lock; the no-op) is the contract's, `hns_train/envs/contract.py`; `action_nvec`, `noop_action`,
`ACTION_BINS` and `N_ACTION_DIMS` here are its, as arrays.

Each opponent is a function `(obs, rng, action_bins=11) -> actions (B, 5)` where `obs` is a
(B, ...) batch dict of the controlled agents' observations (only its batch size is used) and
`rng` a `numpy.random.Generator`:
- `random_actions`: every column uniformly over its range (the untrained policy's behaviour);
- `noop_actions`: the contract's no-op (middle bins, no grab, no lock: a team that stands still).
`FIXED_OPPONENTS` maps the pool's names ("random", "noop") to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from hns_train.envs import contract

ACTION_BINS = contract.DEFAULT_ACTION_BINS
N_ACTION_DIMS = contract.N_ACTION_DIMS


def action_nvec(action_bins: int = ACTION_BINS) -> np.ndarray:
    """Sizes of the 5 action columns: (bins, bins, bins, 2, 2)."""
    return np.array(contract.action_nvec(action_bins), dtype=contract.ACTION_DTYPE)


def noop_action(action_bins: int = ACTION_BINS) -> np.ndarray:
    """(5,) the no-op: middle force and torque bins, no grab, no lock."""
    return np.array(contract.noop_action(action_bins), dtype=contract.ACTION_DTYPE)


def batch_size(obs: Mapping[str, np.ndarray]) -> int:
    if contract.SELF_KEY not in obs:
        raise ValueError(f"observation batch needs '{contract.SELF_KEY}'; got keys {sorted(obs)}")
    shape = np.shape(obs[contract.SELF_KEY])
    if len(shape) != 2:
        raise ValueError(f"observation_self must have shape (B, D), got {shape}")
    return int(shape[0])


def random_actions(
    obs: Mapping[str, np.ndarray], rng: np.random.Generator, action_bins: int = ACTION_BINS
) -> np.ndarray:
    """(B, 5) actions drawn uniformly per column."""
    nvec = action_nvec(action_bins)
    return rng.integers(0, nvec, size=(batch_size(obs), N_ACTION_DIMS), dtype=np.int64)


def noop_actions(
    obs: Mapping[str, np.ndarray], rng: np.random.Generator, action_bins: int = ACTION_BINS
) -> np.ndarray:
    """(B, 5) no-op actions (rng unused; kept for the common signature)."""
    return np.tile(noop_action(action_bins), (batch_size(obs), 1))


FixedOpponent = Callable[..., np.ndarray]
FIXED_OPPONENTS: dict[str, FixedOpponent] = {"random": random_actions, "noop": noop_actions}


def fixed_opponent(name: str) -> FixedOpponent:
    if name not in FIXED_OPPONENTS:
        raise ValueError(f"unknown fixed opponent {name!r}; known: {sorted(FIXED_OPPONENTS)}")
    return FIXED_OPPONENTS[name]
