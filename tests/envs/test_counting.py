"""object_counting (counting.py): the pinned agent, boxes in sight then hidden, the answer's reward
and score, the PettingZoo interfaces and the refusals of a scene that does not work."""

from __future__ import annotations

import numpy as np
import pytest

from hns_train.envs import contract as C
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.layout import FACING_Y

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*probably should be gymnasium.spaces"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
]
W = 12  # worlds: with seed 3 and 1-6 boxes (the preset has the paper's 6) they cover 1..6 boxes
VARIED = dict(n_boxes=(1, 6))


@pytest.fixture(scope="module")
def played():
    """Every world answers its count on the last step, with wild movement, grab and lock bins
    before; positions, masks and rewards of every step."""
    cfg = make_config("object_counting", **VARIED)
    game = HideAndSeekGame(cfg, n_worlds=W, seed=3)
    obs = game.reset()
    rng = np.random.default_rng(0)
    trace = {"mask": [obs["mask_ab_obs"][:, 0].copy()], "agent": [], "yaw": [], "box": []}
    trace["reward"] = []
    for t in range(cfg.horizon):
        actions = rng.integers(0, game.action_nvec, size=(W, 1, 5))
        if t == cfg.horizon - 1:
            actions[:, 0, 0] = game.task.went_left  # the answer
        obs, reward, truncated, infos = game.step(actions)
        trace["mask"].append(obs["mask_ab_obs"][:, 0].copy())
        trace["agent"].append(game.agent_pos[:, 0].copy())
        trace["yaw"].append(game.agent_yaw[:, 0].copy())
        trace["box"].append(game.object_pos.copy())
        trace["reward"].append(reward.copy())
    assert truncated.all()
    return cfg, game, {k: np.array(v) for k, v in trace.items()}, infos


def test_the_right_count_gets_the_reward_and_the_score(played):
    cfg, game, trace, infos = played
    n = np.array([i["boxes"] for i in infos])
    left = np.array([i["went_left"] for i in infos])
    # the count by hand: boxes whose final centre is left of the agent's line of sight
    final_x = trace["box"][-1][:, :, 0]
    present = np.arange(cfg.max_boxes) < n[:, None]
    by_hand = ((final_x < cfg.floor_size / 2) & present).sum(axis=1)
    assert np.array_equal(left, by_hand)
    assert set(n) == set(range(1, 7)) and len(set(left)) > 2  # the worlds cover the cases
    assert np.all(trace["reward"][:-1] == 0.0)
    assert np.all(trace["reward"][-1] == cfg.counting.correct_reward)
    assert all(i["task_score"] == 1.0 and i["answer"] == i["went_left"] for i in infos)
    assert all(i["hider_return"] == 1.0 for i in infos)
    assert game.physics_warnings_total == 0


@pytest.mark.parametrize("off_by", [1, -1])
def test_a_wrong_count_gets_nothing(off_by):
    cfg = make_config("object_counting", counting_wrong_reward=-0.25, **VARIED)
    game = HideAndSeekGame(cfg, n_worlds=4, seed=5)
    game.reset()
    actions = np.tile(np.array(C.noop_action()), (4, 1, 1))
    for _ in range(cfg.horizon):
        actions[:, 0, 0] = (game.task.went_left + off_by) % cfg.action_bins
        _, reward, _, infos = game.step(actions)
    assert np.all(reward[:, 0] == -0.25)
    assert all(i["task_score"] == 0.0 for i in infos)


def test_boxes_are_seen_at_the_start_and_hidden_at_the_end(played):
    cfg, _, trace, infos = played
    n = np.array([i["boxes"] for i in infos])
    present = np.arange(cfg.max_boxes) < n[:, None]
    mask = trace["mask"]  # (1 + horizon, W, boxes): after the reset, then after each step
    in_view = mask[: cfg.counting.show_steps + 1]
    assert np.array_equal(in_view, np.broadcast_to(present, in_view.shape))
    hidden = mask[cfg.counting.show_steps + cfg.counting.move_steps :]
    assert not hidden.any()
    moving = mask[cfg.counting.show_steps + 1 : cfg.counting.show_steps + cfg.counting.move_steps]
    assert moving.any() and not moving.all()  # they leave during the move


def test_the_agent_does_not_move_and_boxes_slide_along_their_row(played):
    cfg, _, trace, infos = played
    pin = np.array([cfg.floor_size / 2, cfg.counting.agent_y])
    np.testing.assert_allclose(trace["agent"][..., :2], np.broadcast_to(pin, (40, W, 2)), atol=1e-9)
    np.testing.assert_allclose(np.cos(trace["yaw"] - FACING_Y), 1.0, atol=1e-12)
    n = np.array([i["boxes"] for i in infos])
    present = np.arange(cfg.max_boxes) < n[:, None]
    box_y = trace["box"][..., 1]
    np.testing.assert_allclose(box_y[:, present], cfg.counting.row_y, atol=1e-9)
    parked = trace["box"][:, ~present]
    assert np.array_equal(parked, np.broadcast_to(parked[0], parked.shape))  # absent: untouched
    x = trace["box"][..., 0]
    # still while shown, then monotone to the spot, never closer than the spacing
    assert np.all(x[: cfg.counting.show_steps] == x[0])
    gaps = np.diff(x, axis=2)[:, present[:, 1:]]
    assert gaps.min() >= cfg.counting.spacing - 1e-9


def test_seeding_is_reproducible_and_the_count_varies():
    def counts(seed):
        game = HideAndSeekGame(make_config("object_counting"), n_worlds=8, seed=seed)
        game.reset()
        return game.task.n_boxes.copy(), game.task.went_left.copy()

    first = counts(11)
    assert all(np.array_equal(a, b) for a, b in zip(first, counts(11), strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, counts(12), strict=True))
    n, k = first
    assert np.all((k >= 0) & (k <= n))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(horizon=41), "horizon=41 must be show"),
        (dict(counting={"window": 3.0}), "hiding spots .* is in sight"),
        (dict(counting={"window": 1.0}), "wider than the window"),
        (dict(n_boxes=(1, 11)), "n_boxes high=11 must be < action_bins=11"),
        (dict(walls="none"), "walls and placement must be 'counting'"),
        (dict(counting_spot_margin=0.3), "puts the outermost box into the outer wall"),
    ],
)
def test_a_scene_that_does_not_work_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        HideAndSeekGame(make_config("object_counting", **overrides))


def test_bad_counting_numbers_are_refused():
    with pytest.raises(ValueError, match=r"counting\.move_steps=0 is not allowed; it must be >= 1"):
        make_config("object_counting", counting={"move_steps": 0})
    with pytest.raises(ValueError, match="agent_y < screen_y"):
        make_config("object_counting", counting={"screen_y": 3.5})
    with pytest.raises(ValueError, match="placement 'counting' takes one agent"):
        HideAndSeekGame(make_config("quadrant", walls="counting", placement="counting")).reset()
