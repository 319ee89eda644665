"""Built-in fixed opponents: teams that act without a network, on the env's action layout.

Action layout per agent (int64, 5 columns): x force bin, y force bin, z torque bin (each in
[0, action_bins), middle bin = zero force), grab (0/1), lock (0/1). Default `action_bins` = 11,
as `GameConfig.action_bins`.

Each opponent is a function `(obs, rng, action_bins=11) -> actions (B, 5)` where `obs` is a
(B, ...) batch dict of the controlled agents' observations (only its batch size is used) and
`rng` a `numpy.random.Generator`:
- `random_actions`: every column uniformly over its range (the untrained policy's behaviour);
- `noop_actions`: bins (5, 5, 5), grab 0, lock 0 (a team that stands still).
`FIXED_OPPONENTS` maps the pool's names ("random", "noop") to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

ACTION_BINS = 11
N_ACTION_DIMS = 5


def action_nvec(action_bins: int = ACTION_BINS) -> np.ndarray:
    """Sizes of the 5 action columns: (bins, bins, bins, 2, 2)."""
    if action_bins < 3 or action_bins % 2 == 0:
        raise ValueError(f"action_bins must be odd and >= 3 (middle bin = 0), got {action_bins}")
    return np.array([action_bins] * 3 + [2, 2], dtype=np.int64)


def noop_action(action_bins: int = ACTION_BINS) -> np.ndarray:
    """(5,) the no-op: middle force and torque bins, no grab, no lock."""
    action_nvec(action_bins)
    return np.array([action_bins // 2] * 3 + [0, 0], dtype=np.int64)


def batch_size(obs: Mapping[str, np.ndarray]) -> int:
    if "observation_self" not in obs:
        raise ValueError(f"observation batch needs 'observation_self'; got keys {sorted(obs)}")
    shape = np.shape(obs["observation_self"])
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
