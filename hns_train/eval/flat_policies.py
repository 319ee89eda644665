"""Policies trained by other trainers on the flat env, evaluated with our matches.

TorchRL, RLlib and the like train on `parallel_env(..., flatten=True)`: one float32 vector per
agent, the observation `Dict` flattened by `gymnasium.spaces.flatten` (its keys in sorted order,
each array in C order). `FlatPolicyController` turns such a policy (a function from a (n, D)
batch of those vectors to (n, 5) integer actions) into a `matches` team controller, so that it
plays in `play_matches` on `HideAndSeekGame` worlds, W at a time, like our own policies.
Policies are feed-forward: the controller keeps no recurrent state.

`team_gain(game_cfg, team, make_policy, episodes, seed)` is the learning check for such
policies: e.g. the chase seeker against a random hider, next to a random seeker against the same
random hider on the same seeds (same layouts and hider action streams), as a paired difference
of the in-sight share (1 - hidden_fraction; hiders: the hidden share) with its standard error
(`crossplay.paired_difference`).

`parameter_change(before, params)` says how far training moved a policy (the examples' smoke
tests assert it).

Public API: `flatten_team_obs(obs, space)`, `FlatPolicyController`, `team_gain`,
`parameter_change`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from hns_train.eval.crossplay import cross_play, paired_difference
from hns_train.eval.matches import FixedController

TEAMS = {"seeker": "in_sight", "hider": "hidden"}  # team -> the share it raises
ARMS = ("trained", "random")  # the two teams a gain compares
FlatActFn = Callable[[np.ndarray], np.ndarray]  # (n, D) float32 -> (n, 5) integer actions


def flatten_team_obs(obs: Mapping[str, np.ndarray], space: spaces.Dict) -> np.ndarray:
    """(n, ...) batch dict -> (n, D) float32, in the order of `spaces.flatten(space, one_obs)`
    (what `parallel_env(flatten=True)` gives each agent)."""
    missing = [k for k in space if k not in obs]
    if missing:
        raise ValueError(f"observations lack keys {missing}; the space has {list(space.keys())}")
    n = len(np.asarray(obs[next(iter(space.keys()))]))
    parts = []
    for key, sub in space.items():
        if not isinstance(sub, spaces.Box):
            raise ValueError(f"observation {key!r} is {type(sub).__name__}; only Box is flattened")
        value = np.asarray(obs[key], dtype=np.float32)
        if value.shape[1:] != sub.shape:
            raise ValueError(
                f"observation {key!r} has shape {value.shape[1:]} per agent; the space has "
                f"{sub.shape}"
            )
        parts.append(value.reshape(n, -1))
    return np.concatenate(parts, axis=1)


@dataclass
class FlatPolicyController:
    """A feed-forward policy on flat observations as a `matches` team controller."""

    act_fn: FlatActFn
    space: spaces.Dict  # env.dict_observation_space(agent) of the team's agents
    policy_id: str = "flat"

    def initial_state(self, n: int) -> None:
        return None

    def act(self, obs, state, episode_start):
        actions = np.asarray(self.act_fn(flatten_team_obs(obs, self.space)))
        n = len(np.asarray(obs[next(iter(self.space.keys()))]))
        if actions.shape != (n, 5):
            raise ValueError(f"the policy returned actions of shape {actions.shape}; want {(n, 5)}")
        return actions.astype(np.int64), None


def team_gain(
    game_cfg: Any,
    team: str,
    make_policy: Callable[[], Any],
    episodes: int,
    seed: int,
    worlds: int = 16,
) -> dict[str, Any]:
    """The share of `make_policy()` playing `team` ("seeker": in-sight share; "hider": hidden
    share) against a random opponent team, next to a random `team` against the same opponent on
    the same `episodes` seeds from `seed`:
    {"metric", "trained", "random", "gain", "gain_se", "episodes"}."""
    if team not in TEAMS:
        raise ValueError(f"team must be one of {sorted(TEAMS)}, got {team!r}")
    policies = {
        "trained": make_policy,
        "random": lambda: FixedController("random", seed=seed + 2),
        "opponent": lambda: FixedController("random", seed=seed + 1),  # one stream in both
    }
    pairings = tuple(("opponent", p) if team == "seeker" else (p, "opponent") for p in ARMS)
    played = cross_play(game_cfg, policies, episodes, worlds, seed, pairings=pairings)
    share = {
        name: getattr(played[pair], TEAMS[team]) for name, pair in zip(ARMS, pairings, strict=True)
    }
    gain, se = paired_difference(share["trained"], share["random"])
    return {
        "metric": TEAMS[team],
        "trained": float(share["trained"].mean()),
        "random": float(share["random"].mean()),
        "gain": gain,
        "gain_se": se,
        "episodes": episodes,
    }


def parameter_change(before: list[Any], params: Any) -> float:
    """L2 norm of the difference between copies `before` and the tensors `params` now."""
    from torch.nn.utils import parameters_to_vector

    now = [q.detach() for q in params]
    if len(now) != len(before):
        raise ValueError(f"{len(before)} tensors before and {len(now)} now: not the same module")
    return float((parameters_to_vector(now) - parameters_to_vector(before)).norm())
