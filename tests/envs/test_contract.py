"""The action / observation contract describes what the game really writes and reads.

Shapes, dtypes and key order of every preset's observations, the meaning of each column read
back from the game's own state, and the action heads (no-op = zero control) are checked against
a game stepped with grabs and locks.
"""

import numpy as np
import pytest

from hns_train.envs import contract as C
from hns_train.envs import observations as O
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame


@pytest.mark.parametrize(
    "preset, params",
    [
        ("quadrant", {}),
        ("randomwalls", {}),
        ("chase", {}),
        ("randomwalls", {"box_size_obs": True, "ramps_lockable": True, "n_hiders": (1, 3)}),
    ],
)
def test_columns_mean_what_the_contract_says(preset, params):
    cfg = make_config(preset, **params)
    game = HideAndSeekGame(cfg, n_worlds=2, seed=3)
    obs = game.reset()
    shapes = C.observation_shapes(cfg)
    assert tuple(shapes) == C.OBS_KEYS == tuple(obs)
    for key, shape in shapes.items():
        assert obs[key].shape == (2, cfg.max_agents, *shape) and obs[key].dtype == C.OBS_DTYPE
    rng = np.random.default_rng(0)
    for _ in range(cfg.prep_steps + 6):
        actions = rng.integers(0, game.action_nvec, size=(2, game.n_agents, C.N_ACTION_DIMS))
        actions[..., C.GRAB] = actions[..., C.LOCK] = 1
        obs, *_ = game.step(actions)
    S, B = C.SelfColumns, C.ObjectColumns
    live = game.agent_present
    me = obs[C.SELF_KEY][live]
    np.testing.assert_array_equal(me[:, S.POS], game.agent_pos[live].astype(np.float32))
    np.testing.assert_array_equal(me[:, S.VEL], game.agent_vel[live].astype(np.float32))
    hider = np.broadcast_to(game.is_hider, live.shape)[live]
    np.testing.assert_array_equal(me[:, S.IS_HIDER], hider)
    np.testing.assert_array_equal(me[:, S.PREP], 1.0)  # past the preparation phase
    np.testing.assert_allclose(np.cos(me[:, S.YAW]), np.cos(game.agent_yaw[live]), atol=1e-5)
    assert np.all((me[:, S.YAW] >= -np.pi) & (me[:, S.YAW] <= np.pi))
    nb = cfg.max_boxes
    flags = O.lock_flags(game.lock_agent, game.lock_team, game.locked, game.team)
    for key, cols, objects in (
        (C.BOXES_KEY, C.box_columns(cfg), slice(0, nb)),
        (C.RAMPS_KEY, C.ramp_columns(cfg), slice(nb, None)),
    ):
        assert obs[key].shape[-1] == cols.dim
        present = game.object_present[:, objects]
        for w, a in zip(*np.nonzero(live), strict=True):
            rows = obs[key][w, a][present[w]]
            pos = game.object_pos[w, objects][present[w]]
            yaw = game.object_yaw[w, objects][present[w]]
            np.testing.assert_array_equal(rows[:, B.POS], pos.astype(np.float32))
            np.testing.assert_array_equal(rows[:, B.COS_YAW], np.cos(yaw).astype(np.float32))
            np.testing.assert_array_equal(rows[:, B.SIN_YAW], np.sin(yaw).astype(np.float32))
            if cols.lock is not None:
                want = flags[w, a, objects][present[w]]
                np.testing.assert_array_equal(rows[:, cols.lock], want)
            if cols.size is not None:
                want = game.box_size[w][present[w]] if key == C.BOXES_KEY else 0.0
                np.testing.assert_array_equal(rows[:, cols.size], np.float32(want))


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(n_hiders=(2, 1)), r"n_hiders=\(2, 1\) is not allowed.*0 <= low <= high"),
        (dict(n_boxes=(-1, 2)), r"n_boxes=\(-1, 2\) is not allowed.*0 <= low <= high"),
        (dict(n_rooms=(0, 4)), r"n_rooms=\(0, 4\) is not allowed.*1 <= low <= high"),
        (dict(prep_fraction=1.0), r"prep_fraction=1.0 is not allowed.*>= 0 and < 1"),
        (dict(tri_split=(0.6, 0.4)), r"tri_split=\(0.6, 0.4\) .*0 < low <= high < 1"),
        (dict(action_bins=10), r"action_bins=10 is not allowed; it must be odd and >= 3"),
    ],
)
def test_game_ranges_name_the_key_and_what_is_allowed(params, message):
    with pytest.raises(ValueError, match=message):
        make_config("quadrant", **params)


def test_action_heads_and_noop():
    cfg = make_config("quadrant")
    game = HideAndSeekGame(cfg, seed=0)
    assert game.action_nvec.tolist() == list(C.action_nvec(cfg.action_bins)) == [11, 11, 11, 2, 2]
    assert len(C.ACTION_HEADS) == C.N_ACTION_DIMS == len(game.noop)
    levels = C.control_levels(cfg.action_bins, cfg.max_ctrl)
    # linspace's middle value is -1e-16, not 0: kept, as every recorded episode used it
    assert abs(levels[C.noop_action()[0]]) < 1e-12 and levels[0] == -cfg.max_ctrl
    game.reset()
    game.step(np.tile(game.noop, (1, game.n_agents, 1)))
    np.testing.assert_allclose(game.batch.bind("ctrl"), 0.0, atol=1e-12)  # the no-op pushes nothing
    for bad in (10, 1, 2.0, True):
        with pytest.raises(ValueError, match="action_bins"):
            C.action_nvec(bad)


def test_the_game_refuses_actions_naming_the_first_bad_entry():
    nvec = np.array(C.action_nvec())
    actions = np.tile(C.noop_action(), (2, 3, 1))
    assert C.check_actions(actions.astype(float), 2, 3, nvec).dtype == np.int64  # whole floats
    actions[1, 2, 3] = 2
    actions[1, 2, 4] = -1
    with pytest.raises(ValueError, match=r"action 2 for world 1, agent slot 2, dimension 3 "):
        C.check_actions(actions, 2, 3, nvec)
    with pytest.raises(ValueError, match="actions must be integers, got dtype float64"):
        C.check_actions(actions + 0.5, 2, 3, nvec)
    with pytest.raises(ValueError, match=r"shape \(2, 3, 5\); expected \(3, 2, 5\)"):
        C.check_actions(actions, 3, 2, nvec)
