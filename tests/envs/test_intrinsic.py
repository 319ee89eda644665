"""count_based (intrinsic.py): the bonus scale / sqrt(N(s)) with N counted by hand, the table's
life across episodes, the state choices, and the PettingZoo interfaces."""

from __future__ import annotations

import numpy as np
import pytest

from hns_train.envs import contract as C
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*probably should be gymnasium.spaces"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
]


def _noop(game):
    return np.tile(np.array(C.noop_action()), (game.n_worlds, game.n_agents, 1))


def test_a_repeated_state_earns_scale_over_root_of_its_visits():
    scale, T = 2.5, 6
    game = HideAndSeekGame(make_config("count_based", horizon=T, count_bonus_scale=scale))
    game.reset(seeds=[0])
    # no-op: nothing moves, every step ends in the state of the first: N = 1, 2, ..., T
    for n in range(1, T + 1):
        _, reward, _, infos = game.step(_noop(game))
        np.testing.assert_allclose(reward, scale / np.sqrt(n), rtol=1e-6)
    assert infos[0]["task_score"] == 1.0  # one new state this episode
    assert infos[0]["states_seen"] == 1.0
    np.testing.assert_allclose(
        infos[0]["hider_return"], sum(scale / np.sqrt(n) for n in range(1, T + 1))
    )
    # the same world again: the table remembers, so the count goes on from T
    game.reset(seeds=[0])
    _, reward, _, _ = game.step(_noop(game))
    np.testing.assert_allclose(reward, scale / np.sqrt(T + 1), rtol=1e-6)


def test_a_moved_box_is_a_new_state_and_old_ones_keep_their_counts():
    game = HideAndSeekGame(make_config("count_based", horizon=10), seed=1)
    game.reset()
    idx, qpos = game.index, game.batch.bind("qpos")[0]
    x = idx.object_qpos[0, 0]
    home = qpos[x]
    game.step(_noop(game))  # state A: N(A) = 1
    qpos[x] = home + 1.0  # two cells to the right
    _, reward, _, _ = game.step(_noop(game))  # state B: N(B) = 1
    np.testing.assert_allclose(reward, 1.0)
    # start positions are odd multiples of 0.1 m, at least 0.05 m from a cell edge (odd
    # multiples of 0.25 m): 4 cm further is still A's cell
    qpos[x] = home + 0.04
    _, reward, _, _ = game.step(_noop(game))  # N(A) = 2
    np.testing.assert_allclose(reward, 1 / np.sqrt(2), rtol=1e-6)
    assert len(game.task.counts) == 2 and game.task.new_states[0] == 2


def test_the_table_is_shared_by_the_worlds_of_a_game():
    game = HideAndSeekGame(make_config("count_based", horizon=4), n_worlds=2, seed=0)
    game.reset(seeds=[5, 5])  # two identical worlds: one state, two visits a step
    _, reward, _, _ = game.step(_noop(game))
    np.testing.assert_allclose(reward[0], 1.0)
    np.testing.assert_allclose(reward[1], 1 / np.sqrt(2), rtol=1e-6)


def test_agents_are_part_of_the_state_only_when_asked():
    def run(state):
        cfg = make_config("count_based", horizon=8, count_state=state)
        game = HideAndSeekGame(cfg, seed=2)
        game.reset()
        keys = game.task.state_keys()
        actions = _noop(game)
        actions[..., 0] = cfg.action_bins - 1  # everyone runs along +x, touching nothing yet
        for _ in range(cfg.horizon):
            _, _, _, infos = game.step(actions)
        return keys.shape[1], infos[0]["task_score"]

    width, new = run("objects")
    width_a, new_a = run("objects_agents")
    game = HideAndSeekGame(make_config("count_based"), seed=2)
    assert width == 2 * game.n_objects and width_a == 2 * (game.n_objects + game.n_agents)
    assert new_a > new  # running agents cross cells; still objects do not


def test_count_based_numbers_are_checked():
    with pytest.raises(ValueError, match=r"count_based\.state='boxes' is not one of"):
        make_config("count_based", count_based={"state": "boxes"})
    with pytest.raises(ValueError, match=r"count_based\.cell=0.0 is not allowed; it must be > 0"):
        make_config("count_based", count_cell=0.0)
