"""Matches between two team controllers on a `HideAndSeekGame`, W worlds at a time.

A match is one episode: the hider team is played by one controller, the seeker team by another
(every teammate runs the same controller, with its own recurrent state). `play_matches` resets
all W worlds, steps them in lockstep to the horizon, and returns one `MatchResult` per world:
hider and seeker return (a team member's summed reward), hidden fraction (the rating score:
share of post-preparation steps in which no seeker saw a hider), and every episode statistic of
`envs/stats.py`.

Team policies (the `TeamPolicy` protocol): `initial_state(n)` -> recurrent state for n agents
(or None) and `act(obs, state, episode_start)` -> (actions (n, 5) int64, new state), where
`obs` is a (n, ...) batch dict of the team's agents, ordered world-major (world 0's team slots,
then world 1's, ...). `policy_id` names the controller in results and ratings.
- `PolicyController(model, deterministic=True)`: an `ActorCritic`; deterministic = argmax of each
  action head (the paper's evaluation "without exploration noise"), else sampled.
- `FixedController("random" | "noop", seed)`: the built-in opponents of `agents/opponents.py`.
- `ScriptedSeeker()`: turns towards the nearest *visible* hider and pushes towards it; when none
  is visible it spins in place to search (and drifts to the arena centre). It reads only what
  the policy may read: observation_self, agent_qpos_qvel rows and mask_aa_obs.

Replays: `on_step(game, actions, rewards, infos)` is called once right after the reset with
`actions = rewards = infos = None`, then after every step (actions (W, A, 5) as sent), so a
`ReplayRecorder` plugs in without this module depending on it:

    def on_step(game, actions, rewards, infos):
        if actions is None:
            recorder.record_reset()
        else:
            recorder.record_step(rewards, actions, infos[recorder.world])

Public API: `play_matches(game, hiders, seekers, n_matches=None, seed=0, on_step=None,
progress=False) -> list[MatchResult]`, `team_observations(obs, slots)`, the controllers above,
`MatchResult` (`to_dict()`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from hns_train.agents.opponents import ACTION_BINS, FIXED_OPPONENTS, fixed_actions, noop_action
from hns_train.agents.pool import policy_key
from hns_train.envs import contract

StepHook = Callable[[Any, np.ndarray | None, np.ndarray | None, list | None], None]

# observation_self / agent_qpos_qvel columns (the env's contract)
_S = contract.SelfColumns
POS, YAW, IS_HIDER = _S.XY, _S.YAW, _S.IS_HIDER


class TeamPolicy(Protocol):
    policy_id: str

    def initial_state(self, n: int) -> Any: ...

    def act(
        self, obs: Mapping[str, np.ndarray], state: Any, episode_start: np.ndarray
    ) -> tuple[np.ndarray, Any]: ...


class PolicyController:
    """An `ActorCritic` as a team controller."""

    def __init__(self, model: Any, policy_id: Any = "latest", deterministic: bool = True) -> None:
        self.model = model
        self.policy_id = policy_key(policy_id)
        self.deterministic = deterministic

    @classmethod
    def from_state_dict(
        cls,
        obs_shapes: Mapping,
        state_dict: Mapping[str, Any],
        policy_id: Any,
        network_config: Any = None,
        deterministic: bool = True,
    ) -> PolicyController:
        """Build an `ActorCritic` from pool weights (e.g. `SnapshotCache.get(version)`);
        ValueError naming the parameters where they do not fit."""
        from hns_train.agents.network_kinds import load_weights
        from hns_train.agents.policy import ActorCritic

        model = ActorCritic(obs_shapes, network_config, device="cpu")
        load_weights(model, state_dict, f"policy {policy_id}")
        model.eval()
        return cls(model, policy_id, deterministic)

    def initial_state(self, n: int) -> np.ndarray:
        return self.model.initial_state(n)

    def act(self, obs, state, episode_start):
        out = self.model.act(obs, state, episode_start, deterministic=self.deterministic)
        return out.actions, out.state


class FixedController:
    """ "random" or "noop" from `agents/opponents.py`."""

    def __init__(self, name: str, seed: int | None = 0, action_bins: int = ACTION_BINS) -> None:
        if name not in FIXED_OPPONENTS:
            raise ValueError(f"unknown fixed opponent {name!r}; known: {sorted(FIXED_OPPONENTS)}")
        self.code = FIXED_OPPONENTS[name]
        self.policy_id = name
        self.rng = np.random.default_rng(seed)
        self.action_bins = action_bins

    def initial_state(self, n: int) -> None:
        return None

    def act(self, obs, state, episode_start):
        rows = len(obs[contract.SELF_KEY])
        return fixed_actions(self.code, rows, self.rng, self.action_bins), None


@dataclass
class ScriptedSeeker:
    """Chases the nearest visible hider; spins to search when it sees none."""

    turn_gain: float = 8.0  # torque bins per radian of heading error
    arena_centre: tuple[float, float] = (3.0, 3.0)  # the 6 m floor spans [0, 6]^2
    centre_radius: float = 1.0  # drift back to the centre when farther than this
    keep_distance: float = 2.0  # stop closing in here: a close target crosses the cone fast
    action_bins: int = ACTION_BINS
    policy_id: str = "scripted_seeker"

    def initial_state(self, n: int) -> None:
        return None

    def act(self, obs, state, episode_start):
        agents = contract.ENTITY_KEYS[0]
        me = np.asarray(obs[contract.SELF_KEY], dtype=np.float64)
        others = np.asarray(obs[agents.key], dtype=np.float64)  # (n, K, SELF_DIM)
        visible = np.asarray(obs[agents.visible_mask]) > 0.5
        targets = visible & (others[..., IS_HIDER] > 0.5)
        delta = others[..., POS] - me[:, None, POS]
        dist = np.where(targets, np.linalg.norm(delta, axis=-1), np.inf)
        nearest = dist.argmin(axis=1)
        found = np.isfinite(dist.min(axis=1, initial=np.inf))
        to_target = delta[np.arange(len(me)), nearest]
        to_centre = np.asarray(self.arena_centre) - me[:, POS]

        mid = self.action_bins // 2
        actions = np.tile(noop_action(self.action_bins), (len(me), 1))
        # The agent's front is (sin yaw, -cos yaw), i.e. heading yaw - pi/2 (rules.py).
        heading = me[:, YAW] - np.pi / 2
        error = _wrap(np.arctan2(to_target[:, 1], to_target[:, 0]) - heading)
        turn = np.clip(np.round(mid + self.turn_gain * error), 0, 2 * mid)
        actions[:, contract.N_MOVE_DIMS - 1] = np.where(found, turn, 2 * mid)
        far = np.linalg.norm(to_centre, axis=1) > self.centre_radius
        close = np.linalg.norm(to_target, axis=1) < self.keep_distance
        chase = np.where(close[:, None], 0.0, to_target)
        push = np.where(found[:, None], chase, np.where(far[:, None], to_centre, 0.0))
        norm = np.maximum(np.linalg.norm(push, axis=1, keepdims=True), 1e-9)
        actions[:, :2] = np.clip(np.round(mid + mid * push / norm * (norm > 1e-6)), 0, 2 * mid)
        return actions.astype(np.int64), None


def _wrap(angle: np.ndarray) -> np.ndarray:
    return (angle + np.pi) % (2 * np.pi) - np.pi


@dataclass
class MatchResult:
    hider: str
    seeker: str
    seed: int | None
    world: int
    steps: int
    hider_return: float
    seeker_return: float
    hidden_fraction: float
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def hider_score(self) -> float:
        """The rating score of the hider team, in [0, 1]."""
        return self.hidden_fraction

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def team_observations(obs: Mapping[str, np.ndarray], slots: np.ndarray) -> dict[str, np.ndarray]:
    """(W, A, ...) observations -> (W * len(slots), ...) for the given agent slots."""
    out = {}
    for key, value in obs.items():
        picked = np.asarray(value)[:, slots]
        out[key] = picked.reshape(picked.shape[0] * picked.shape[1], *picked.shape[2:])
    return out


def play_matches(
    game: Any,
    hiders: TeamPolicy,
    seekers: TeamPolicy,
    n_matches: int | None = None,
    seed: int | None = 0,
    on_step: StepHook | None = None,
    progress: bool = False,
) -> list[MatchResult]:
    """Play `n_matches` episodes (default: one per world) in rounds of W worlds.

    World w of round k is reset with seed `seed + k * W + w` (None: the game's own streams)."""
    W, A = game.n_worlds, game.n_agents
    n_matches = W if n_matches is None else int(n_matches)
    if n_matches < 1:
        raise ValueError(f"n_matches must be >= 1, got {n_matches}")
    teams = (
        (hiders, np.flatnonzero(game.is_hider)),
        (seekers, np.flatnonzero(~game.is_hider)),
    )
    results: list[MatchResult] = []
    rounds = -(-n_matches // W)
    bar = tqdm(total=n_matches, desc="matches", unit="match", disable=not progress)
    for k in range(rounds):
        seeds = None if seed is None else [seed + k * W + w for w in range(W)]
        obs = game.reset(seeds=seeds)
        if on_step is not None:
            on_step(game, None, None, None)
        states = [ctrl.initial_state(W * len(slots)) for ctrl, slots in teams]
        starts = [np.ones(W * len(slots), dtype=bool) for _, slots in teams]
        infos: list[dict] = [{} for _ in range(W)]
        steps = 0
        truncated = np.zeros(W, dtype=bool)
        while not truncated.all():
            actions = np.empty((W, A, contract.N_ACTION_DIMS), dtype=contract.ACTION_DTYPE)
            for i, (ctrl, slots) in enumerate(teams):
                team_act, states[i] = ctrl.act(team_observations(obs, slots), states[i], starts[i])
                actions[:, slots] = np.asarray(team_act).reshape(
                    W, len(slots), contract.N_ACTION_DIMS
                )
                starts[i] = np.zeros_like(starts[i])
            obs, rewards, truncated, step_infos = game.step(actions)
            steps += 1
            for w, info in enumerate(step_infos):
                if info:
                    infos[w] = info
            if on_step is not None:
                on_step(game, actions, rewards, step_infos)
        for w in range(min(W, n_matches - len(results))):
            info = infos[w]
            results.append(
                MatchResult(
                    hider=hiders.policy_id,
                    seeker=seekers.policy_id,
                    seed=None if seeds is None else seeds[w],
                    world=w,
                    steps=steps,
                    hider_return=float(info["hider_return"]),
                    seeker_return=float(info["seeker_return"]),
                    hidden_fraction=float(info["hidden_fraction"]),
                    stats=dict(info),
                )
            )
            bar.update(1)
    bar.close()
    return results
