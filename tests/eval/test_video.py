"""Offscreen rendering of replays: frame sizes, changing content, overlays, mp4/gif/png files."""

import subprocess
import sys
from pathlib import Path

import imageio.v2 as iio2
import imageio.v3 as iio
import mujoco
import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.eval import recorder
from hns_train.eval import replay as R
from hns_train.eval import video as V
from hns_train.eval.cli import main
from hns_train.eval.recorder import team_label

W, H = 96, 80  # small and not square: catches swapped axes
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def replay():
    cfg = make_config("quadrant")
    rp = recorder.record_episode(cfg, recorder.object_seeking_actions(cfg, seed=1), seed=5)
    assert rp["locked"].any() and (rp["grabbed"] >= 0).any()
    return rp


def _opponent_sight(rp) -> np.ndarray:
    """Frames in which some agent sees an opponent."""
    h = rp.cfg.max_hiders
    s = rp["sees_agent"]
    return np.flatnonzero(s[:, :h, h:].any((1, 2)) | s[:, h:, :h].any((1, 2)))


def test_frames_have_the_asked_size_and_change_over_time(replay):
    with V.ReplayVideo(replay, V.VideoOptions(width=W, height=H, text=False)) as video:
        first, last = video.frame(0), video.frame(-1)
        again = video.frame(0)
    assert first.shape == (H, W, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, again)  # a frame depends only on the replay state
    changed = np.abs(first.astype(int) - last.astype(int)).sum(-1) > 30
    assert changed.mean() > 0.005, "agents and objects moved; the pictures must differ"
    assert first.std() > 10  # not a blank image


def test_overlays_draw_sight_lines_locks_and_text(replay):
    t_seen = int(_opponent_sight(replay)[0])
    t_lock = int(np.flatnonzero(replay["locked"].any(1))[0])
    plain = V.VideoOptions(width=W, height=H, text=False, sight_lines=False)
    lines = V.VideoOptions(width=W, height=H, text=False, sight_lines=True)
    text = V.VideoOptions(width=W, height=H, text=True, sight_lines=False)
    with V.ReplayVideo(replay, plain) as v:
        a = v.frame(t_seen)
        locked_frame = v.frame(t_lock)
        v.replay = _without_locks(replay)
        unlocked_frame = v.frame(t_lock)
    with V.ReplayVideo(replay, lines) as v:
        b = v.frame(t_seen)
    with V.ReplayVideo(replay, text) as v:
        c = v.frame(t_seen)
    assert (a != b).any(axis=-1).sum() > 5, "lines of sight were not drawn"
    assert (a != c).any(axis=-1).sum() > 50, "text was not drawn"
    assert (locked_frame != unlocked_frame).any(axis=-1).sum() > 5, "lock tint was not drawn"


def _without_locks(rp):
    arrays = dict(rp.arrays)
    arrays["locked"] = np.zeros_like(rp["locked"])
    arrays["lock_team"] = np.full_like(rp["lock_team"], -1)
    return R.Replay(rp.cfg, rp.layout, arrays, rp.header)


def test_follow_camera_tracks_an_agent(replay):
    opts = V.VideoOptions(width=W, height=H, camera="follow:seeker_0", text=False)
    with V.ReplayVideo(replay, opts) as v:
        follow = v.frame(40)
    with V.ReplayVideo(replay, V.VideoOptions(width=W, height=H, text=False)) as v:
        top = v.frame(40)
    assert follow.shape == top.shape and (follow != top).any(axis=-1).mean() > 0.2
    assert V.parse_camera("follow:2", replay) == 2
    assert V.parse_camera("follow:hider_1", replay) == 1
    for bad in ("follow:seeker_7", "follow:seeker0", "follow:9", "side"):
        with pytest.raises(ValueError, match="follow:AGENT|allowed"):
            V.parse_camera(bad, replay)


def _visible_share(video: V.ReplayVideo, renderer, agent: int) -> float:
    """The share of the follow camera's picture of the newest frame that shows `agent`'s own
    geoms (MuJoCo's segmentation render: what hides the agent hides its pixels)."""
    renderer.update_scene(video.data, camera=video.camera)
    ids = renderer.render()
    body = video.index.agent_body[agent]
    mine = np.flatnonzero(video.model.geom_bodyid == body)
    return float(((ids[..., 1] == mujoco.mjtObj.mjOBJ_GEOM) & np.isin(ids[..., 0], mine)).mean())


def test_follow_camera_keeps_its_agent_in_view_across_the_arena():
    """The seeker drives to the west wall, then across the arena into the east wall, turning
    all along: behind it, a camera at its usual distance would be outside the walls."""
    cfg = make_config("chase")
    seeker, steps = cfg.max_hiders, iter(range(cfg.horizon))

    def act(obs):
        a = np.full((1, cfg.max_agents, 5), 5, np.int64)
        a[..., 3:] = 0
        a[0, seeker, 0] = 0 if next(steps) < 12 else 10  # x force: west, then east
        a[0, seeker, 2] = 7  # a slow turn
        return a

    rp = recorder.record_episode(cfg, act, seed=0)
    opts = V.VideoOptions(width=W, height=H, camera="follow:seeker_0", text=False)
    renderer = mujoco.Renderer(rp.rebuild()[0], H, W)
    renderer.enable_segmentation_rendering()
    with V.ReplayVideo(rp, opts) as video:
        x, shown = [], []
        for t in range(rp.n_frames):
            video.frame(t)
            x.append(video.data.xpos[video.index.agent_body[seeker], 0])
            shown.append(_visible_share(video, renderer, seeker))
    renderer.close()
    assert min(x) < 0.1 * cfg.floor_size and max(x) > 0.9 * cfg.floor_size  # wall to wall
    hidden = [t for t, share in enumerate(shown) if share < 0.002]
    assert hidden == [], f"the seeker is out of view in frames {hidden} of {rp.n_frames}"


def test_gif_mp4_and_png_files(replay, tmp_path):
    short = R.Replay(
        replay.cfg,
        replay.layout,
        {k: v[:13] if len(v) == replay.n_frames else v[:12] for k, v in replay.arrays.items()},
        {**replay.header, "sizes": {**replay.header["sizes"], "n_frames": 13, "n_steps": 12}},
    )
    opts = V.VideoOptions(width=64, height=48)
    gif = V.write_video(short, tmp_path / "a.gif", opts)
    frames = iio.imread(gif, index=None)
    assert frames.shape[:3] == (13, 48, 64)
    mp4 = V.write_video(short, tmp_path / "a.mp4", opts)
    with iio2.get_reader(mp4, format="FFMPEG") as reader:
        n = sum(1 for _ in reader)
        assert reader.get_meta_data()["size"] == (64, 48)
    assert n == 13
    png = V.render_png(short, tmp_path / "a.png", 5, opts)
    assert iio.imread(png).shape == (48, 64, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif", "a.mp4", "a.png"]
    with pytest.raises(ValueError, match="even"):
        V.write_video(short, tmp_path / "odd.mp4", V.VideoOptions(width=63, height=48))
    with pytest.raises(ValueError, match="format"):
        V.write_video(short, tmp_path / "a.avi", opts)
    with pytest.raises(ValueError, match=r"^width=8 is not allowed; it must be >= 16 and <= "):
        V.VideoOptions(width=8, fps=0.0)


def test_a_frame_larger_than_a_render_buffer_is_refused_before_rendering(replay, tmp_path, capsys):
    with pytest.raises(ValueError, match="height=100000 is not allowed; it must be >= 16 and <="):
        V.VideoOptions(height=100000)
    path = R.save(replay, tmp_path / "ep.npz")
    argv = [str(path), "--width", "100000", "--format", "png", "--out", str(tmp_path / "a.png")]
    assert main(argv) == 2  # MuJoCo used to stop with "Offscreen framebuffer is not complete"
    assert "width=100000 is not allowed" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.npz"]


def test_renders_go_into_the_run_or_runs_renders_never_beside_a_replay_of_no_run(
    replay, tmp_path, capsys, monkeypatch
):
    shipped = tmp_path / "repo" / "replays"  # as the repository's example replays
    path = R.save(replay, shipped / "example.npz")
    run = tmp_path / "runs" / "mine"
    (run / "replays").mkdir(parents=True)
    (run / "config.yaml").write_text("name: mine\n")
    in_run = R.save(replay, run / "replays" / "ep.npz")
    monkeypatch.chdir(tmp_path)
    small = ["--format", "png", "--frame", "3", "--width", "64", "--height", "48"]
    assert main([str(path), *small]) == 0
    out = capsys.readouterr().out.strip()
    assert out == str(Path("runs") / "renders" / "example.png") and Path(out).is_file()
    assert sorted(p.name for p in shipped.iterdir()) == ["example.npz"]  # nothing beside it
    assert main([str(in_run), *small]) == 0
    assert capsys.readouterr().out.strip() == str(run / "replays" / "ep.png")
    assert (run / "replays" / "ep.png").is_file()


def test_cli_renders_a_png_and_prints_its_path(replay, tmp_path, capsys, monkeypatch):
    path = R.save(replay, tmp_path / "ep.npz")
    out = tmp_path / "frame.png"
    argv = [str(path), "--format", "png", "--frame", "3", "--width", "64", "--height", "48"]
    assert main([*argv, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert iio.imread(out).shape == (48, 64, 3)
    # errors a user can fix: a message and status 2, no traceback
    assert main([*argv, "--out", str(tmp_path / "o.gif")]) == 2  # was a PNG named .gif
    err = capsys.readouterr().err
    assert "o.gif" in err and "format 'png'" in err and "extension says 'gif'" in err
    assert not (tmp_path / "o.gif").exists()
    assert main([str(tmp_path / "nope.npz")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([str(path), "--camera", "follow:seeker_9", "--out", str(out)]) == 2
    assert "allowed" in capsys.readouterr().err
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    assert main([str(path), "--show"]) == 2
    assert "display" in capsys.readouterr().err


def test_text_sits_in_a_strip_above_the_arena(replay):
    """The world is drawn under the strip, never under the text: only the strip changes with
    the text, and the label says a policy's version once."""
    relabelled = R.Replay(
        replay.cfg,
        replay.layout,
        replay.arrays,
        {**replay.header, "metadata": {"hiders": {"name": "A ckpt_0000000305.pt v305",
                                                  "version": 305}}},
    )  # fmt: skip
    assert team_label(relabelled.metadata["hiders"]) == "A ckpt_0000000305.pt v305"
    opts = V.VideoOptions(width=240, height=240)
    with V.ReplayVideo(replay, opts) as v, V.ReplayVideo(relabelled, opts) as w:
        strip = v._strip
        a, b = v.frame(30), w.frame(30)
    assert 0 < strip <= 0.25 * 240 and a.shape == (240, 240, 3)
    assert (a[:strip] != b[:strip]).any() and (a[strip:] == b[strip:]).all()
    assert (a[:strip] == V.STRIP_RGB).all(-1).mean() > 0.5  # the strip's background, and text


def test_vision_cones_are_drawn(replay):
    with V.ReplayVideo(replay, V.VideoOptions(width=W, height=H, text=False)) as v:
        cones = v.frame(10)
        v.options = V.VideoOptions(width=W, height=H, text=False, vision_cones=False)
        plain = v.frame(10)
    assert (cones != plain).any(axis=-1).sum() > 20


def test_the_viewer_gets_the_video_overlays_without_a_render_context(replay):
    """`show` draws a frame's overlays into the viewer's user scene, as the video draws them
    into its own: no offscreen renderer is made for it."""
    t = int(np.flatnonzero(replay["locked"].any(1) & (replay["grabbed"] >= 0).any(1))[0])
    video = V.ReplayVideo(replay, V.VideoOptions(vision_cones=False))
    assert video.renderer is None
    replay.set_state(video.model, video.data, t, video.index)
    scene = mujoco.MjvScene(video.model, maxgeom=1000)
    video._decorate(scene, t)
    cfg = replay.cfg
    locked = int((replay["lock_team"][t][replay["locked"][t]] >= 0).sum())
    h = cfg.max_hiders
    sees = replay["sees_agent"][t]
    sight = int(sees[:h, h:].sum() + sees[h:, :h].sum())
    grabs = int((replay["grabbed"][t] >= 0).sum())
    assert scene.ngeom == cfg.n_ramps + 4 * locked + sight + grabs
    video.close()


@pytest.mark.parametrize("yaw", [np.pi / 2, np.pi / 2 + 0.3])
def test_follow_camera_stays_in_the_arena_when_its_agent_backs_onto_a_wall(yaw):
    """The seeker 0.4 m from the west wall, facing east: behind it a camera looking down over
    the wall showed mostly the wall's top and the void beyond it (play recordings of chase,
    whose seeker ends up against a wall). It turns round the agent instead: it stays inside
    the arena, at its usual elevation."""
    cfg = make_config("chase")
    seeker = cfg.max_hiders
    noop = np.zeros((1, cfg.max_agents, 5), np.int64) + [5, 5, 5, 0, 0]
    rp = recorder.record_episode(cfg, lambda obs: noop, seed=0)
    opts = V.VideoOptions(width=W, height=H, camera="follow:seeker_0", text=False)
    with V.ReplayVideo(rp, opts) as video:
        joints = video.index.agent_qpos[seeker]
        rp.arrays["qpos"][0, joints[[0, 1, 3]]] = (0.4, cfg.floor_size / 2, yaw)
        video.frame(0)
        cam = video.camera
        az, el = np.radians(cam.azimuth), np.radians(cam.elevation)
        forward = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
        position = np.array(cam.lookat) - cam.distance * forward
    assert 0 < position[0] < cfg.floor_size and 0 < position[1] < cfg.floor_size, position
    assert cam.elevation == V.FOLLOW_ELEVATION and cam.distance >= V.FOLLOW_NEAR


DROPPED_STOP = """
import signal, sys, weakref
from hns_train.eval import replay, stop, video

stop.stop_on(signal.SIGTERM)


class Held:
    pass


# the signal's handler runs inside a weakref callback: Python prints its exception and drops it
held = Held()
ref = weakref.ref(held, lambda _: signal.raise_signal(signal.SIGTERM))
del held
try:
    video.write_video(replay.load(sys.argv[1]), sys.argv[2])
except stop.RenderStopped as stopped:
    print("stopped", stopped.code)
"""


def test_a_stop_whose_exception_python_dropped_still_stops_the_render(tmp_path):
    # On the code before, a SIGTERM that landed in an import's module-lock callback was
    # dropped and the render went on to write its video (an eval worker's render, busy cores).
    replay = tmp_path / "match.npz"
    replay.write_bytes((ROOT / "replays" / "example_quadrant.npz").read_bytes())
    result = subprocess.run(
        [sys.executable, "-c", DROPPED_STOP, str(replay), str(tmp_path / "match.mp4")],
        cwd=ROOT,  # MUJOCO_GL comes from conftest.py's default
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Exception ignored" in result.stderr  # the handler's exception did not get through
    assert result.stdout.split() == ["stopped", "143"], result.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["match.npz"]
