"""Scripted scenes for the env behaviour tests: real one-world games whose entities are put in
place by writing qpos, after which the game re-reads state and re-casts rays with its own methods;
and seeded random-play episodes of the PettingZoo env, for the reproducibility tests.

Quadrant geometry used by the scenes: outer walls on x, y = 0.1 and 5.9 (faces at 0.15 / 5.85),
the room x in [3.1, 5.9], y in [0.1, 3.1]. Scenes play in the open band y in [3.5, 5.1]; objects
a scene does not use wait in a row at y = 5.6, inside the out-of-bounds rect.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

import hns_train.envs as E
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame

FACE_PX, FACE_MX, FACE_PY, FACE_MY = math.pi / 2, -math.pi / 2, math.pi, 0.0  # yaw -> front
HIDER, SEEKER = 0, 1  # agent slots in a 1 v 1 game
PARK_ROW_Y = 5.6


def one_v_one(preset: str = "quadrant", seed: int = 0, **params) -> HideAndSeekGame:
    """A reset one-world game with one hider (slot 0) and one seeker (slot 1)."""
    params = {"n_hiders": (1, 1), "n_seekers": (1, 1), **params}
    game = HideAndSeekGame(make_config(preset, **params), n_worlds=1, seed=seed)
    game.reset()
    return game


def place(game: HideAndSeekGame, agents=None, objects=None, park_objects: bool = True) -> None:
    """Put agents {slot: (x, y, yaw)} and objects {slot: (x, y, yaw)} on the floor at rest.

    Other present objects go to the parking row when `park_objects`. The game then re-reads
    positions, rays and observations as it does after a physics step.
    """
    agents, objects = agents or {}, objects or {}
    idx, m, d = game.index, game.model, game.data
    for a, (x, y, yaw) in agents.items():
        d.qpos[idx.agent_qpos[a]] = (x, y, 0.0, yaw)
        d.qvel[idx.agent_qvel[a]] = 0.0
    parked = 0
    for o in range(game.n_objects):
        if o in objects:
            x, y, yaw = objects[o]
        elif park_objects and game.object_present[0, o]:
            x, y, yaw = 0.5 + 0.7 * parked, PARK_ROW_Y, 0.0
            parked += 1
        else:
            continue
        d.qpos[idx.object_qpos[o]] = (x, y, 0.0, yaw)
        d.qvel[idx.object_qvel[o]] = 0.0
    mujoco.mj_forward(m, d)
    worlds = np.arange(1)
    game._read_state(worlds)
    game._cast_rays(worlds)
    game._observe(worlds)


def actions(game: HideAndSeekGame, **by_slot) -> np.ndarray:
    """(1, A, 5) no-op actions with the given slots replaced: actions(game, a0=[10, 5, 5, 0, 0])."""
    out = np.broadcast_to(game.noop, (1, game.n_agents, 5)).copy()
    for key, value in by_slot.items():
        out[0, int(key.removeprefix("a"))] = value
    return out


def run(game: HideAndSeekGame, n: int, **by_slot):
    """Step `n` times with the same actions; returns the last step's rewards (A,)."""
    reward = None
    for _ in range(n):
        _, reward, _, _ = game.step(actions(game, **by_slot))
    return reward[0]


def agent_xy(game: HideAndSeekGame, slot: int) -> np.ndarray:
    return game.agent_pos[0, slot, :2].copy()


def object_xy(game: HideAndSeekGame, slot: int) -> np.ndarray:
    return game.object_pos[0, slot, :2].copy()


# Movement bins: 0 = full force towards -axis, 5 = none, 10 = full force towards +axis.
PUSH_PX = [10, 5, 5, 0, 0]
PUSH_MX = [0, 5, 5, 0, 0]
STILL = [5, 5, 5, 0, 0]


def seeded_episode(preset: str, seed: int, action_seed: int = 0, **params) -> list:
    """Everything `reset(seed=seed)` and then random actions (drawn from `action_seed`) give
    until the episode ends: the reset's observations, then each step's returns."""
    env = E.parallel_env(preset, **params)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(action_seed)
    trace = [obs]
    while env.agents:
        trace.append(env.step({a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}))
    return trace


def same(a, b) -> bool:
    """Whether two nested dicts / tuples / lists of arrays are equal, element for element."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(a, b)
