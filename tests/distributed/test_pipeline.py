"""The pipeline end to end: real workers, real ZeroMQ sockets, real processes, real PPO steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from waiting import alive, children_of, wait_for

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.agents.chunks import Chunk
from hns_train.agents.pool import PolicyPool
from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller
from hns_train.distributed.launchers import make_endpoints
from hns_train.distributed.streams import ControlServer, SampleSender
from hns_train.distributed.trainer import TrainerWorker
from hns_train.distributed.worker import WorkerSpec

ROOT = Path(__file__).resolve().parents[2]
SMOKE = CONFIG_DIR / "smoke.yaml"


def smoke(tmp_path, *overrides):
    return load_config(SMOKE, [f"runs_dir={tmp_path}", *overrides])


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_in_thread(controller: Controller) -> threading.Thread:
    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    return thread


def test_serial_run_trains_checkpoints_and_snapshots(tmp_path):
    cfg = smoke(tmp_path, "name=serial", "stop.versions=4")
    summary = Controller(cfg).run()
    assert summary.reason == "reached stop.versions=4"
    assert summary.version >= 4 and summary.frames > 0 and summary.episodes > 0
    run = tmp_path / "serial"
    ckpt = CheckpointDir(run / "checkpoints").latest()
    assert ckpt is not None and ckpt.meta["counters"]["version"] >= 4
    with PolicyPool(run / "pool") as pool:
        assert pool.versions()[:3] == [0, 2, 4]
    train = [r for r in records(run) if r["kind"] == "train"]
    assert train and train[-1]["version"] >= 4 and "loss/approx_kl" in train[-1]
    assert any("episode/hider_return" in r for r in train)
    # One process: no worker can say what its CPU time was, so no CPU figure is made up.
    assert not any(k.startswith("cpu/") for r in train for k in r)
    assert any(r.get("throughput/trained_fps", 0) > 0 for r in train)


@pytest.mark.slow
def test_local_run_restarts_a_killed_actor_and_keeps_training(tmp_path):
    cfg = smoke(tmp_path, "name=local", "pipeline.launcher=local", "stop.versions=0")
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    try:
        wait_for(lambda: controller.version >= 2, 240, "two optimisation steps")
        pid = controller.workers["actor0"].pid
        assert pid is not None and alive(pid)
        os.kill(pid, signal.SIGKILL)
        before = controller.version
        wait_for(lambda: controller.restarts >= 1, 60, "the actor's restart")
        new_pid = controller.workers["actor0"].pid
        wait_for(lambda: controller.workers["actor0"].pid != pid, 120, "the new actor's hello")
        wait_for(lambda: controller.version >= before + 2, 240, "training to go on")
        new_pid = controller.workers["actor0"].pid
        assert new_pid != pid and alive(new_pid)
    finally:
        controller.request_stop("test over")
        thread.join(120)
    assert not thread.is_alive()
    pids = [s.pid for s in controller.workers.values() if s.pid]
    assert pids and not any(alive(p) for p in pids), "worker processes outlived the run"
    # Each kind's CPU cost per unit of work is logged (workers in their own processes).
    train = [r for r in records(tmp_path / "local") if r["kind"] == "train"]
    for key in (
        "cpu/actor_ms_per_frame",
        "cpu/policy_us_per_row",
        "cpu/trainer_us_per_sample",
        "throughput/trained_fps",
    ):
        assert any(r.get(key, 0) > 0 for r in train), key


@pytest.mark.slow
def test_dead_trainer_stops_the_run_and_resume_continues_from_its_checkpoint(tmp_path):
    cfg = smoke(
        tmp_path,
        "name=resume",
        "pipeline.launcher=local",
        "stop.versions=0",
        "pipeline.restart_trainer=false",
    )
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    ckpts = CheckpointDir(tmp_path / "resume" / "checkpoints")
    try:
        # The trainer learns the run's frame count from the controller's counters messages
        # (one per logging interval), so the first checkpoints of a fast run may hold 0 frames.
        wait_for(
            lambda: (
                ckpts.steps()
                and ckpts.steps()[-1] >= 2
                and ckpts.latest().meta["counters"]["frames"] > 0
            ),
            240,
            "a checkpoint that knows the run's frames",
        )
        os.kill(controller.workers["trainer0"].pid, signal.SIGKILL)
        thread.join(120)
    finally:
        controller.request_stop("test over")
        thread.join(60)
    assert controller.error.startswith("trainer exited")
    saved = ckpts.steps()[-1]

    resumed = load_config(
        tmp_path / "resume" / "config.yaml",
        [f"stop.versions={saved + 2}", "pipeline.launcher=serial"],
    )
    summary = Controller(resumed, resume=True).run()
    assert summary.version >= saved + 2
    latest = ckpts.latest()
    assert latest.meta["counters"]["version"] >= saved + 2
    assert latest.meta["counters"]["frames"] > 0
    lines = records(tmp_path / "resume")
    marks = [i for i, r in enumerate(lines) if r["kind"] == "resume"]
    assert len(marks) == 1 and lines[marks[0]]["version"] == saved
    after = [r["frames"] for r in lines[marks[0] :] if r["kind"] == "train"]
    assert after == sorted(after) and after[0] >= lines[marks[0]]["frames"]


@pytest.mark.slow
def test_updates_longer_than_the_heartbeat_timeout_do_not_kill_the_trainer(tmp_path):
    cfg = smoke(
        tmp_path,
        "name=busy",
        "pipeline.launcher=local",
        "pipeline.heartbeat_s=0.2",
        "pipeline.heartbeat_timeout_s=1.5",
        "agent.network.embed_dim=128",
        "agent.network.attention_heads=4",
        "agent.network.dense_dim=256",
        "agent.network.lstm_dim=256",
        "agent.ppo.epochs=60",
        "stop.versions=2",
    )
    controller = Controller(cfg)
    summary = controller.run()
    assert not controller.error, controller.error
    assert summary.version >= 2 and summary.restarts == 0
    updates = [r["loss/version"] for r in records(tmp_path / "busy") if "loss/version" in r]
    assert updates, "no update statistics were logged"


@pytest.mark.slow
def test_sigint_checkpoints_and_leaves_no_process(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "hns_train.train",
        "--config",
        str(SMOKE),
        f"runs_dir={tmp_path}",
        "name=sigint",
        "pipeline.launcher=local",
        "stop.versions=0",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = tmp_path / "sigint"
    try:
        wait_for(
            lambda: any(r.get("version", 0) >= 1 for r in records(run)),
            240,
            "a first optimisation step",
        )
        workers = children_of(proc.pid)
        assert len(workers) >= 3
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.decode()
    assert proc.returncode == 0, text
    assert "signal SIGINT" in text
    assert CheckpointDir(run / "checkpoints").latest() is not None
    time.sleep(0.5)
    assert not [p for p in workers if alive(p)], "worker processes outlived the run"


def test_trainer_drops_stale_and_malformed_chunks(tmp_path):
    cfg = smoke(tmp_path, "name=stale", "pipeline.max_staleness=4", "pipeline.batch_chunks=64")
    run_dir = tmp_path / "stale"
    endpoints = make_endpoints(cfg, "inproc")
    control = ControlServer(endpoints["control"])
    trainer = TrainerWorker(WorkerSpec("trainer", 0, cfg.to_dict(), str(run_dir), endpoints))
    trainer.poll_ms = 50
    trainer.learner.ppo.version = 10
    sender = SampleSender(endpoints["samples"])
    from tests.synthetic import synthetic_chunk

    def chunk(version: int) -> Chunk:
        rng = np.random.default_rng(0)
        c = synthetic_chunk(trainer.learner.model, cfg.pipeline.chunk_len, 2, 10, rng)
        c.policy_version[:] = version
        return c

    for version in (3, 5, 6, 9, 10):
        assert sender.send("chunk", chunk(version).to_arrays(), timeout_ms=1000)
    assert sender.send("chunk", {"actions": np.zeros((3, 3), np.int64)}, timeout_ms=1000)
    deadline = time.monotonic() + 10
    while (trainer._received + trainer.samples.rejected) < 6 and time.monotonic() < deadline:
        trainer.step()
    assert trainer.samples.rejected == 1
    assert sorted(s.version for s in trainer.buffer) == [6, 9, 10]
    assert trainer._dropped_stale == 2  # versions 3 and 5 are more than 4 behind 10
    trainer.learner.ppo.version = 14  # now 6 and 9 are too old as well
    assert [s.version for s in trainer._usable()] == [10]
    assert trainer._reuse == [0, 0]  # they leave untrained, and the reuse metric says so
    sender.close()
    trainer.close()
    control.close()


def test_trainer_starts_no_update_that_would_end_after_the_stop(tmp_path):
    """With the time left under stop.minutes in its counters, the trainer skips an update it
    expects (by its last one) to end after the stop, so a run stops on time."""
    cfg = smoke(tmp_path, "name=deadline", "pipeline.batch_chunks=2", "pipeline.reuse=1")
    endpoints = make_endpoints(cfg, "inproc")
    control = ControlServer(endpoints["control"])
    spec = WorkerSpec("trainer", 0, cfg.to_dict(), str(tmp_path / "deadline"), endpoints)
    trainer = TrainerWorker(spec)
    trainer.poll_ms = 50
    sender = SampleSender(endpoints["samples"])
    from tests.synthetic import synthetic_chunk

    rng = np.random.default_rng(0)

    def feed(n: int) -> None:
        for _ in range(n):
            c = synthetic_chunk(trainer.learner.model, cfg.pipeline.chunk_len, 2, 10, rng)
            c.policy_version[:] = trainer.learner.version
            assert sender.send("chunk", c.to_arrays(), timeout_ms=1000)

    def counters(stop_in_s) -> None:
        meta = {"frames": 0, "episodes": 0, "wall_clock_s": 0.0, "stop_in_s": stop_in_s}
        control.send(spec.routing_id.encode(), "counters", meta=meta)
        deadline = time.monotonic() + 10
        while (trainer.learner._stop_at is None) != (stop_in_s is None):  # until it has arrived
            trainer.poll_control()
            assert time.monotonic() < deadline

    def steps(n: int) -> None:
        for _ in range(n):
            trainer.step()

    feed(2)
    steps(20)
    # the first update: no estimate
    assert trainer.learner.version == 1 and trainer.learner.last_update_s > 0
    counters(0.5 * trainer.learner.last_update_s)  # the stop comes before another update could end
    feed(2)
    steps(20)
    assert trainer.learner.version == 1 and len(trainer._usable()) >= 2  # ready, but it waited
    counters(None)  # no time limit (or plenty of time): it trains again
    steps(20)
    assert trainer.learner.version == 2
    sender.close()
    trainer.close()
    control.close()
