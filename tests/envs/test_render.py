"""Rendering: PettingZoo's render test, what the top camera shows, lock highlight, viewer errors."""

import hns_scene as S
import imageio.v3 as iio
import numpy as np
import pytest
from pettingzoo.test import render_test

import hns_train.envs as E
from hns_train.envs.render import TopViewRenderer, main, render_frame


def _pixel(cfg, x, y):
    """(row, col) of world point (x, y) in the top camera's frame (orthographic, 1.08 x arena)."""
    span = cfg.floor_size * 1.08
    col = (x - cfg.floor_size / 2) / span * cfg.render_width + cfg.render_width / 2
    row = (cfg.floor_size / 2 - y) / span * cfg.render_height + cfg.render_height / 2
    return int(row), int(col)


def _patch(frame, cfg, x, y, r=2):
    row, col = _pixel(cfg, x, y)
    return frame[row - r : row + r + 1, col - r : col + r + 1].reshape(-1, 3).mean(0)


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_pettingzoo_render(preset):
    from hns_train.envs.render import display_available

    def make(render_mode=None):
        # PettingZoo's test first makes a "human" env only to read its render modes; without a
        # display the env refuses "human" when made, so that one is read from a plain env.
        if render_mode == "human" and not display_available():
            render_mode = None
        return E.env(preset, seed=0, render_mode=render_mode)

    render_test(make)


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_frame_shows_teams_in_their_colours(preset):
    env = E.parallel_env(preset, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    cfg = env.cfg
    assert frame.shape == (cfg.render_height, cfg.render_width, 3) and frame.dtype == np.uint8
    for slot in range(cfg.max_agents):
        r, g, b = _patch(frame, cfg, *env.game.agent_pos[0, slot, :2])
        if slot < cfg.max_hiders:  # cyan
            assert g > r + 80 and b > r + 80, (slot, r, g, b)
        else:  # red
            assert r > g + 80 and r > b + 80, (slot, r, g, b)
    env.close()


def test_locked_box_is_highlighted_until_unlocked():
    game = S.one_v_one(prep_fraction=0.0)
    S.place(game, agents={0: (1.58, 4.2, S.FACE_PX), 1: (3.5, 5.0, 0)}, objects={0: (2.0, 4.2, 0)})
    renderer = TopViewRenderer(game.cfg.render_width, game.cfg.render_height)

    def box_colour():
        return _patch(renderer.render(game.model, game.data), game.cfg, 2.05, 4.25)

    before = box_colour()
    S.run(game, 1, a0=[5, 5, 5, 0, 1])
    assert game.locked[0, 0]
    locked = box_colour()
    assert locked.sum() > before.sum() + 60
    S.run(game, 1, a0=[5, 5, 5, 0, 0])
    assert not game.locked[0, 0]
    np.testing.assert_allclose(box_colour(), before, atol=3)
    renderer.close()


def test_renderer_is_reusable_across_worlds():
    game = E.HideAndSeekGame(E.make_config("randomwalls"), seed=0)
    renderer = TopViewRenderer(160, 120)
    game.reset()
    first = renderer.render(game.model, game.data)
    np.testing.assert_array_equal(renderer.render(game.model, game.data), first)
    game.reset()  # new walls and poses, a different model object
    second = renderer.render(game.model, game.data)
    assert second.shape == (120, 160, 3)
    assert np.abs(second.astype(int) - first).mean() > 1.0
    renderer.close()
    with pytest.raises(RuntimeError, match="close"):
        renderer.render(game.model, game.data)


def test_frame_larger_than_the_offscreen_buffer_raises():
    game = E.HideAndSeekGame(E.make_config("quadrant"), seed=0)
    game.reset()
    renderer = TopViewRenderer(2000, 480)
    with pytest.raises(ValueError, match="exceeds the model's offscreen buffer"):
        renderer.render(game.model, game.data)
    renderer.close()


def test_human_mode_without_a_display_fails_when_the_env_is_made(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    with pytest.raises(ValueError, match="needs a display.*render_mode='rgb_array'"):
        E.parallel_env("quadrant", render_mode="human")
    with pytest.raises(ValueError, match="needs a display"):
        E.env("quadrant", render_mode="human")
    env = E.parallel_env("quadrant")
    assert env.metadata["render_modes"] == ["rgb_array"]


def test_render_without_a_mode_raises():
    env = E.parallel_env("quadrant")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="render_mode"):
        env.render()


def test_cli_writes_the_frame(tmp_path):
    out = tmp_path / "q.png"
    main(["--preset", "quadrant", "--seed", "2", "--out", str(out)])
    np.testing.assert_array_equal(iio.imread(out), render_frame("quadrant", seed=2))
