"""The lock tasks (envs/locking.py) in scripted scenes of the real game, and through PettingZoo.

Scenes: one hider placed by qpos (tests/envs/hns_scene.py) next to a box it faces; the scene's
spawn point is where it is placed (the task's reset hook is run again after placing). Lock and
return scenes play without inner walls (`walls="none"`): the rewards do not depend on them.
"""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

import hns_train.envs as E
from hns_train.envs import contract as C
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from tests.envs import hns_scene as S

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*probably should be gymnasium.spaces"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
]

SCALE, LOCK, SUCCESS = 0.5, 5.0, 1.0  # the presets' lock task numbers
STAY_LOCK, STAY_UNLOCK = [5, 5, 5, 0, 1], [5, 5, 5, 0, 0]  # no move, lock = 1 / 0
AGENT_XY, BOX_XY = (1.58, 4.2), (2.0, 4.2)  # the box face 0.17 m in front of the agent


def _scene(preset="lock_and_return", agent=AGENT_XY, boxes=None, **params):
    """A one-world game of `preset`, the hider at `agent` facing +x, the boxes placed."""
    params = {"walls": "none", **params} if preset == "lock_and_return" else params
    game = HideAndSeekGame(make_config(preset, **params), n_worlds=1, seed=0)
    game.reset()
    boxes = boxes if boxes is not None else {0: (*BOX_XY, 0.0)}
    S.place(game, agents={0: (*agent, S.FACE_PX)}, objects=boxes)
    game.task.reset(np.arange(1))  # the spawn point and targets of the placed scene
    return game


def _step(game, action):
    _, reward, _, infos = game.step(S.actions(game, a0=action))
    return float(reward[0, 0]), infos[0]


def _box_dist(game, o=0):
    return float(np.linalg.norm(S.object_xy(game, o) - S.agent_xy(game, 0)))


def _spawn_dist(game):
    return float(np.linalg.norm(S.agent_xy(game, 0) - np.array(AGENT_XY)))


# ---------------------------------------------------------------- lock_and_return


def test_the_agent_is_one_hider():
    game = _scene()
    assert game.n_agents == 1 and game.is_hider[0]
    assert game.obs[C.SELF_KEY][0, 0, C.SelfColumns.IS_HIDER] == 1.0
    with pytest.raises(ValueError, match="exactly one agent, a hider"):
        HideAndSeekGame(make_config("lock_and_return", n_seekers=(1, 1)))


def test_locking_pays_5_and_unlocking_costs_5():
    game = _scene()
    d0 = _box_dist(game)
    reward, _ = _step(game, STAY_LOCK)
    assert game.locked[0, 0]
    # the target box is locked: its whole distance is paid; at the spawn point: success
    assert _spawn_dist(game) <= 0.1
    assert reward == pytest.approx(LOCK + SCALE * d0 + SUCCESS, abs=1e-5)

    reward, _ = _step(game, STAY_LOCK)  # staying locked: success only (no move, no shaping)
    assert reward == pytest.approx(SUCCESS, abs=1e-4)

    reward, _ = _step(game, STAY_UNLOCK)  # in range, lock = 0 unlocks
    assert not game.locked[0, 0]
    # the box is the target again: its whole distance is charged; no success
    assert reward == pytest.approx(-LOCK - SCALE * _box_dist(game), abs=1e-5)


def test_shaped_reward_is_half_the_distance_gained_towards_the_box():
    game = _scene(agent=(0.9, 4.2))
    d0 = _box_dist(game)
    reward, _ = _step(game, [8, 5, 5, 0, 0])  # east, towards the box
    d1 = _box_dist(game)
    assert d1 < d0 - 0.02
    assert reward == pytest.approx(SCALE * (d0 - d1), abs=1e-5)
    reward, _ = _step(game, [2, 5, 5, 0, 0])  # west: away
    assert reward == pytest.approx(SCALE * (d1 - _box_dist(game)), abs=1e-5)
    assert reward < 0


@pytest.mark.parametrize("away, success", [(0.05, True), (0.15, False)])
def test_success_needs_the_box_locked_and_the_agent_within_10_cm_of_its_spawn(away, success):
    game = _scene()
    reward, _ = _step(game, STAY_UNLOCK)
    assert reward == pytest.approx(0.0, abs=1e-4), "at the spawn point, box unlocked: nothing"
    _step(game, STAY_LOCK)
    assert game.locked[0, 0]
    # teleport west of the spawn point, out of reach of the box (which stays locked)
    S.place(game, agents={0: (AGENT_XY[0] - away, AGENT_XY[1], S.FACE_PX)}, park_objects=False)
    before = _spawn_dist(game)
    # (the previous step's distance is the task's; the teleport is not a step)
    previous = float(game.task.spawn_dist[0])
    reward, _ = _step(game, STAY_LOCK)
    assert game.locked[0, 0]
    assert abs(_spawn_dist(game) - before) < 1e-3
    assert (_spawn_dist(game) <= 0.1) == success
    want = SCALE * (previous - _spawn_dist(game)) + SUCCESS * success
    assert reward == pytest.approx(want, abs=1e-5)


def test_returning_is_shaped_once_the_box_is_locked():
    game = _scene()
    _step(game, STAY_LOCK)
    assert game.locked[0, 0]
    # the agent walks west, away from its spawn point, holding lock = 1 (the box stays locked)
    d0 = _spawn_dist(game)
    reward, _ = _step(game, [2, 5, 5, 0, 1])
    d1 = _spawn_dist(game)
    assert game.locked[0, 0] and d1 > 0.1
    assert reward == pytest.approx(-SCALE * (d1 - d0), abs=1e-5)
    reward, _ = _step(game, [8, 5, 5, 0, 1])  # back east, towards the spawn point
    d2 = _spawn_dist(game)
    assert d2 < d1
    assert reward == pytest.approx(SCALE * (d1 - d2) + SUCCESS * (d2 <= 0.1), abs=1e-5)


def test_score_and_statistics_at_the_episode_end():
    game = _scene(horizon=3)
    _step(game, STAY_LOCK)
    _step(game, STAY_LOCK)
    _, info = _step(game, STAY_LOCK)
    assert info["task_score"] == 1.0 and info["boxes_locked"] == 1.0 and info["returned"] == 1.0
    assert info["hider_return"] == pytest.approx(
        LOCK + SCALE * (BOX_XY[0] - AGENT_XY[0]) + 3 * SUCCESS, abs=1e-3
    )

    game = _scene(horizon=2)
    _step(game, STAY_LOCK)
    _, info = _step(game, [2, 5, 5, 0, 1])  # walked away from the spawn point
    assert info["boxes_locked"] == 1.0 and info["returned"] == 0.0 and info["task_score"] == 0.0


def test_bad_numbers_are_named():
    with pytest.raises(ValueError, match="lock_return_threshold"):
        make_config("lock_and_return", lock_return_threshold=-0.1)


# ---------------------------------------------------------------- PettingZoo

LOCK_PRESETS = ["lock_and_return"]


@pytest.mark.parametrize("preset", LOCK_PRESETS)
def test_pettingzoo_parallel_and_aec_api(preset):
    parallel_api_test(E.parallel_env(preset, seed=1, horizon=30), num_cycles=100)
    api_test(E.env(preset, seed=2, horizon=30), num_cycles=60)


@pytest.mark.parametrize("preset", LOCK_PRESETS)
def test_pettingzoo_seeding_reproduces_episodes(preset):
    parallel_seed_test(lambda: E.parallel_env(preset, horizon=20))

    def episode(seed):
        env = E.parallel_env(preset, horizon=20)
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(7)
        trace = [obs["hider_0"][C.BOXES_KEY].copy()]
        rewards = []
        while env.agents:
            act = {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
            obs, rew, _, _, infos = env.step(act)
            rewards.append(rew["hider_0"])
        return trace, rewards, infos["hider_0"]

    a, b, c = episode(3), episode(3), episode(4)
    assert np.array_equal(a[0][0], b[0][0]) and a[1] == b[1] and a[2] == b[2]
    assert not np.array_equal(a[0][0], c[0][0])
    assert "task_score" in a[2] and "boxes_locked" in a[2]


@pytest.mark.parametrize("preset", LOCK_PRESETS)
def test_pettingzoo_spaces_and_bad_actions(preset):
    env = E.parallel_env(preset, seed=0)
    obs, _ = env.reset()
    assert env.agents == ["hider_0"]
    assert env.observation_space("hider_0").contains(obs["hider_0"])
    assert list(env.action_space("hider_0").nvec) == [11, 11, 11, 2, 2]
    with pytest.raises(ValueError, match="hider_0"):
        env.step({"hider_0": np.array([5, 5, 5, 0, 2])})
    with pytest.raises(ValueError):
        env.step({"seeker_0": np.array([5, 5, 5, 0, 0])})
