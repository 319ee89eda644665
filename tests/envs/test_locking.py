"""The lock tasks (envs/locking.py) in scripted scenes of the real game, and through PettingZoo.

Scenes: one hider placed by qpos (tests/envs/hns_scene.py) next to a box it faces; the scene's
spawn point is where it is placed (the task's reset hook is run again after placing). Scenes
play without inner walls (`walls="none"`): the rewards do not depend on them; the tri layout of
sequential lock is checked on its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from hns_train.envs import contract as C
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.layout import sample_layout
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
    params = {"walls": "none", **params}
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
    with pytest.raises(ValueError, match=r"lock\.return_threshold=-0.1 is not allowed.* >= 0"):
        make_config("lock_and_return", lock={"return_threshold": -0.1})


# ---------------------------------------------------------------- sequential_lock

# two boxes side by side in front of the agent at AGENT_XY, both 0.17 m away and seen
PAIR = {0: (2.0, 4.47, 0.0), 1: (2.0, 3.93, 0.0)}
SECOND_PAIR = {2: (4.0, 4.47, 0.0), 3: (4.0, 3.93, 0.0)}  # the same, 2 m to the east


def _sequential_scene(boxes, **params):
    far = {
        o: (0.6 + 0.7 * k, 1.0, 0.0) for k, o in enumerate(o for o in range(4) if o not in boxes)
    }
    return _scene("sequential_lock", boxes={**far, **boxes}, **params)


def test_a_box_out_of_order_cannot_be_locked():
    game = _sequential_scene({1: (*BOX_XY, 0.0)})  # box 1 in front, box 0 elsewhere
    assert game.sees_object[0, 0, 1]
    d0 = _box_dist(game, 0)
    for _ in range(3):
        reward, _ = _step(game, STAY_LOCK)
        assert not game.locked[0, 1] and not game.lockable[0, 1]
        # no lock reward: the target is still box 0, which the agent neither nears nor leaves
        assert reward == pytest.approx(SCALE * (d0 - _box_dist(game, 0)), abs=1e-5)
        d0 = _box_dist(game, 0)
    assert game.lockable[0, 0] and game.lockable[0, 4:].all()  # the next box and the ramps


def test_boxes_lock_in_order_and_each_pays_5():
    game = _sequential_scene(PAIR)
    assert game.sees_object[0, 0, :2].all()
    d0 = _box_dist(game, 0)
    reward, _ = _step(game, STAY_LOCK)  # both in range: only box 0, the next one, locks
    assert game.locked[0].tolist()[:4] == [True, False, False, False]
    assert reward == pytest.approx(LOCK + SCALE * d0, abs=1e-5)
    d1 = _box_dist(game, 1)
    reward, _ = _step(game, STAY_LOCK)  # now box 1 is the next one
    assert game.locked[0].tolist()[:4] == [True, True, False, False]
    assert reward == pytest.approx(LOCK + SCALE * d1, abs=1e-5)

    reward, _ = _step(game, STAY_UNLOCK)  # locked boxes can be unlocked whatever the order
    assert not game.locked[0, :2].any()
    assert reward == pytest.approx(-2 * LOCK - SCALE * _box_dist(game, 0), abs=1e-5)


def test_all_four_locked_in_order_is_a_success():
    game = _sequential_scene({**PAIR, **SECOND_PAIR}, horizon=6)
    _step(game, STAY_LOCK)
    _step(game, STAY_LOCK)
    S.place(game, agents={0: (AGENT_XY[0] + 2, AGENT_XY[1], S.FACE_PX)}, park_objects=False)
    # the teleport is no step: the target's distance paid is the one before it
    paid = float(game.task.target_dist[0])
    reward, _ = _step(game, STAY_LOCK)
    assert game.locked[0, :4].tolist() == [True, True, True, False]
    assert reward == pytest.approx(LOCK + SCALE * paid, abs=1e-5)
    d3 = _box_dist(game, 3)
    reward, _ = _step(game, STAY_LOCK)
    assert game.locked[0, :4].all()
    assert reward == pytest.approx(LOCK + SCALE * d3 + SUCCESS, abs=1e-5)
    for _ in range(2):
        reward, info = _step(game, STAY_LOCK)
        assert reward == pytest.approx(SUCCESS, abs=1e-4)
    assert info["task_score"] == 1.0 and info["boxes_locked"] == 4.0 and "returned" not in info


def test_tri_layout_has_three_closed_rooms_with_a_ramp_in_each():
    cfg = make_config("sequential_lock")
    c, g = cfg.cell, cfg.grid_cells
    orientations = set()
    for seed in range(40):
        layout = sample_layout(cfg, np.random.default_rng(seed))
        inner = np.flatnonzero(layout.wall_present[4:]) + 4
        assert len(inner) == 2, "two inner walls, each one segment: no doors"
        pos, half = layout.wall_pos[inner], layout.wall_half[inner]
        long_axis = half[:, :2].argmax(axis=1)  # 1: the wall runs along y (on an x line)
        full = np.flatnonzero(2 * half[:, :2].max(axis=1) > cfg.floor_size - 2 * c)
        assert len(full) == 1, "the first wall crosses the arena, the second ends on it"
        first, second = full[0], 1 - full[0]
        normal = 1 - long_axis[first]  # the first wall's line is at this coordinate
        line = pos[first, normal]
        assert 0.4 * g * c <= line <= 0.6 * g * c + c
        assert long_axis[second] == normal  # perpendicular
        # the second wall reaches from the first wall to the outer wall on one side
        lo = pos[second, normal] - half[second, normal]
        hi = pos[second, normal] + half[second, normal]
        high = lo > line - c
        assert (abs(lo - line) < c) if high else (abs(hi - line) < c)
        orientations.add((int(normal), bool(high)))
        # ramp k lies in room k % 3: the big room (away from the second wall), then the two
        # small ones below and above the second wall
        split = pos[second, 1 - normal]
        for k, xy in enumerate(layout.ramp_xy):
            side_high = xy[normal] > line
            if k % 3 == 0:
                assert side_high != high
            else:
                assert side_high == high and (xy[1 - normal] > split) == (k % 3 == 2)
    assert len(orientations) == 4
