"""Evaluation worker: real sockets, real pool and ratings (SQLite), real replays and videos."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import imageio.v2 as iio2
import numpy as np
import pytest
import torch
from waiting import wait_for

from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.atomic_file import partial_files
from hns_train.config import CONFIG_DIR, ConfigError, load_config
from hns_train.distributed.contract import state_dict_to_arrays
from hns_train.distributed.controller import Controller
from hns_train.distributed.evaluator import EvalWorker, schedule
from hns_train.distributed.streams import ControlServer, ParamPublisher
from hns_train.distributed.worker import WorkerSpec
from hns_train.envs.contract import observation_shapes
from hns_train.envs.game import HideAndSeekGame
from hns_train.eval import replay as replay_mod
from hns_train.eval.matches import PolicyController, play_matches
from hns_train.eval.ratings import Ratings
from hns_train.eval.recorder import MatchRecording

SMOKE = CONFIG_DIR / "smoke.yaml"


def smoke(tmp_path, *overrides):
    return load_config(SMOKE, [f"runs_dir={tmp_path}", *overrides])


def test_schedule_alternates_roles_and_scripted_seeker_only_seeks():
    assert schedule(["pool", "random", "scripted_seeker"]) == [
        ("pool", "hider"),
        ("pool", "seeker"),
        ("random", "hider"),
        ("random", "seeker"),
        ("scripted_seeker", "hider"),  # the latest hides from it; it never hides
    ]


@pytest.mark.parametrize(
    "override, message",
    [
        ("eval.opponents=pool,bots", "bots"),
        ("eval.opponents=' , '", "none given"),
        ("eval.replay_share=1.5", "replay_share"),
        ("eval.worlds=0", "worlds"),
    ],
)
def test_eval_settings_reject_bad_values(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        smoke(tmp_path, override)


def _model(cfg, seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network).eval()


def test_rounds_rate_latest_against_pool_snapshot_in_both_roles(tmp_path):
    cfg = smoke(
        tmp_path,
        "name=evalunit",
        "eval.opponents=pool",
        "eval.worlds=2",
        "eval.replay_share=0.5",
        "eval.every_s=0",
        "eval.render_videos=false",
    )
    run = cfg.run_dir
    run.mkdir(parents=True)
    snapshot, latest = _model(cfg, 1), _model(cfg, 2)
    with PolicyPool(run / "pool", cfg.pool) as pool:
        pool.add_snapshot(2, snapshot.state_dict())
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    endpoints = {"control": f"inproc://ctl-{tag}", "params": f"inproc://params-{tag}"}
    server = ControlServer(endpoints["control"])
    publisher = ParamPublisher(endpoints["params"])
    publisher.publish(5, state_dict_to_arrays(latest.state_dict()))
    worker = EvalWorker(WorkerSpec("eval", 0, cfg.to_dict(), str(run), endpoints))
    try:
        deadline = time.monotonic() + 60
        while worker.rounds < 2 and time.monotonic() < deadline:
            worker.step()
        assert worker.rounds == 2 and worker.version == 5
        beat = worker.counters()
        seed0 = worker._seed(0)
    finally:
        worker.close()
        publisher.close()
        server.close()

    assert beat["matches"] == 4 and beat["rounds"] == 2 and beat["version"] == 5
    assert set(beat["rating"]) == {"hider", "seeker"} and set(beat["win_rate"]) == {"pool"}
    assert {row[0] for row in beat["leaderboard"]["rows"]} == {"latest", "2"}
    assert len(beat["new_replays"]) == 2 and beat["new_videos"] == []

    with Ratings(run / "pool") as ratings:
        for policy in ("latest", "2"):
            for role in ("hider", "seeker"):
                assert ratings.get(policy, role).games == 2
        assert beat["rating"]["hider"] == pytest.approx(
            [ratings.get("latest", "hider").mu, ratings.get("latest", "hider").sigma]
        )
        rows = ratings.matches()[::-1]  # oldest first
    assert [(r["hider"], r["seeker"]) for r in rows] == [("latest", "2")] * 2 + [
        ("2", "latest")
    ] * 2
    for row in rows:
        assert row["stats"]["latest_version"] == 5 and row["stats"]["opponent_class"] == "pool"

    # One replay per round (share 0.5 of 2 worlds), named and labelled with both teams.
    first, second = (Path(p) for p in beat["new_replays"])
    assert first.name.startswith("eval_v000005_latest_vs_snap2_")
    assert second.name.startswith("eval_v000005_snap2_vs_latest_")
    assert rows[0]["stats"]["replay"] == str(first) and rows[1]["stats"]["replay"] is None
    rep = replay_mod.load(first)
    assert rep.metadata["hiders"] == {"name": "latest", "version": 5}
    assert rep.metadata["seekers"] == {"name": "snapshot", "version": 2}
    assert rep.n_steps == cfg.game_config().horizon

    # The worker played the published weights without exploration noise: the same match,
    # replayed here with argmax actions of those weights, matches step for step.
    game = HideAndSeekGame(cfg.game_config(), n_worlds=2, seed=0)
    hook = MatchRecording(game, [0], seed0, {})
    again = play_matches(
        game,
        PolicyController(latest, "latest", deterministic=True),
        PolicyController(snapshot, 2, deterministic=True),
        2,
        seed0,
        on_step=hook,
    )
    mine = hook.recorders[0].to_replay()
    np.testing.assert_array_equal(mine["actions"], rep["actions"])
    assert again[0].hidden_fraction == pytest.approx(rows[0]["hidden_fraction"])
    assert again[1].hidden_fraction == pytest.approx(rows[1]["hidden_fraction"])


def test_parameters_are_checked_as_they_arrive_and_the_newest_loaded_when_a_round_starts(
    tmp_path,
):
    cfg = smoke(
        tmp_path,
        "name=evalload",
        "eval.opponents=random",
        "eval.worlds=1",
        "eval.every_s=3600",
        "eval.replay_share=0",
        "eval.render_videos=false",
    )
    cfg.run_dir.mkdir(parents=True)
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    endpoints = {"control": f"inproc://ctl-{tag}", "params": f"inproc://params-{tag}"}
    server = ControlServer(endpoints["control"])
    publisher = ParamPublisher(endpoints["params"])
    versions = {v: state_dict_to_arrays(_model(cfg, v).state_dict()) for v in (5, 6, 7)}
    worker = EvalWorker(WorkerSpec("eval", 0, cfg.to_dict(), str(cfg.run_dir), endpoints))
    try:
        publisher.publish(5, versions[5])
        wait_for(lambda: worker.step() or worker.rounds == 1, 60, "the first round")
        weights = next(worker.latest.parameters())
        writes = weights._version  # torch counts in-place writes: each load is one
        for v in (6, 7):
            publisher.publish(v, versions[v])
            wait_for(lambda v=v: worker.step() or worker.params.version == v, 10, f"version {v}")
        broken = {
            k: np.full_like(a, np.nan) if a.dtype.kind == "f" else a for k, a in versions[7].items()
        }
        publisher.publish(8, broken)
        wait_for(lambda: worker.step() or worker.params.rejected == 1, 10, "the drop")
        assert worker.rounds == 1 and weights._version == writes  # nothing loaded in between
        worker.play_round()
        assert worker.version == 7 and weights._version == writes + 1
        for name, array in versions[7].items():
            np.testing.assert_array_equal(worker.latest.state_dict()[name].numpy(), array)
    finally:
        worker.close()
        publisher.close()
        server.close()


def test_serial_run_produces_snapshots_ratings_replays_and_a_video(tmp_path):
    # the stop waits for the video under way, however busy the machine
    cfg = smoke(
        tmp_path, "name=evalrun", "eval.n_workers=1", "eval.every_s=2", "eval.stop_render_wait_s=99"
    )
    summary = Controller(cfg).run()
    assert summary.reason == "reached stop.versions=4"
    run = tmp_path / "evalrun"
    with PolicyPool(run / "pool") as pool:
        assert pool.versions()[:3] == [0, 2, 4]
    with Ratings(run / "pool") as ratings:
        matches = ratings.matches()
        rated = [r for r in ratings.leaderboard() if r.policy == "latest"]
    assert matches and all("latest" in (m["hider"], m["seeker"]) for m in matches)
    assert rated and all(r.sigma < 25 / 3 for r in rated)  # games shrink the prior's sigma

    # The controller's metrics count every rated match and carry the latest policy's rating.
    train = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if '"kind": "train"' in line
    ]
    assert train[-1]["eval/matches"] == len(matches)
    assert any(k.startswith("rating/latest_") and k.endswith("_mu") for k in train[-1])
    assert any(k.startswith("eval/win_rate/") for k in train[-1])

    replays = sorted((run / "replays").glob("eval_*.npz"))
    assert replays
    rep = replay_mod.load(replays[0])
    assert rep.metadata["kind"] == "eval" and rep.n_steps == cfg.game_config().horizon
    videos = sorted((run / "replays").glob("eval_*.mp4"))
    assert videos and all(v.with_suffix(".npz").is_file() for v in videos)
    head = videos[0].read_bytes()
    assert head[4:8] == b"ftyp" and len(head) > 5_000  # an ISO media file with content
    with iio2.get_reader(str(videos[0]), format="FFMPEG") as reader:
        frames = [frame for frame in reader]
    assert len(frames) == replay_mod.load(videos[0].with_suffix(".npz")).n_frames
    assert frames[0].shape == (480, 480, 3) and frames[0].std() > 10  # a picture, not a blank


def _render_mid_video(tmp_path):
    """A VideoJob rendering the example replay, once its encoder is writing (the first bytes
    are in its partial file)."""
    from hns_train.distributed.evaluator import VideoJob

    replay = tmp_path / "match.npz"
    shutil.copy(Path(__file__).parents[2] / "replays" / "example_quadrant.npz", replay)
    job = VideoJob(replay)
    deadline = time.monotonic() + 120
    while not any(p.stat().st_size for p in partial_files(job.out)):
        assert job.outcome() is None and time.monotonic() < deadline, job.outcome()
        time.sleep(0.05)
    return job


def test_a_stopped_render_leaves_no_partial_video(tmp_path, monkeypatch):
    """An eval worker that stops mid-render terminates its render child (a real
    `python -m hns_train.eval` process), which deletes its partial `.tmp.mp4` before it exits."""
    from hns_train.distributed import evaluator

    # time enough on any busy cores: this is the render's own cleanup, not the kill after it
    monkeypatch.setattr(evaluator, "RENDER_TERM_S", 120.0)
    job = _render_mid_video(tmp_path)
    job.kill()
    # SIGTERM handled, not killed outright: 143, or 1 where the encoder's own shutdown raised
    # while the render unwound (seen once on busy cores); either way the cleanup ran
    assert job.proc.returncode in (128 + 15, 1), job.outcome()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["match.npz"]


def test_a_render_that_does_not_stop_is_killed_and_its_partial_video_deleted(tmp_path, monkeypatch):
    """A render that does not exit within RENDER_TERM_S of its SIGTERM (here: a stopped
    process, as a hung one) is killed, and the worker deletes the partial file it left."""
    from hns_train.distributed import evaluator

    monkeypatch.setattr(evaluator, "RENDER_TERM_S", 0.5)
    job = _render_mid_video(tmp_path)
    os.kill(job.proc.pid, signal.SIGSTOP)  # SIGTERM stays pending; SIGKILL still ends it
    job.kill()
    assert job.proc.returncode == -signal.SIGKILL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["match.npz"]
