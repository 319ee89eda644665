"""A smoke training's logs: the offline wandb run, metrics.jsonl, and `compare` on the run."""

from __future__ import annotations

import json
import os
import struct
import zlib

import pytest
from wandb_runs import offline_runs, read_offline_run

from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller
from hns_train.envs.stats import STAT_KEYS
from hns_train.envs.tasks import stat_keys
from hns_train.eval.compare import run_compare

AXES = ("episodes", "frames", "hours", "version")


def test_smoke_training_writes_an_offline_wandb_run_that_compare_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [f"runs_dir={tmp_path}", "name=logged", "logging.wandb=offline", "stop.versions=6"],
    )
    summary = Controller(cfg).run()
    assert summary.version >= 6
    run_dir = tmp_path / "logged"

    runs = offline_runs(run_dir)
    experiment = [read_offline_run(r) for r in runs]
    main = [r for r in experiment if r["config"].get("name") == "logged"]
    assert len(main) == 1, [r["config"].get("name") for r in experiment]
    history = main[0]["history"]
    assert history, "no rows logged"
    for row in history:
        assert all(axis in row for axis in AXES), sorted(row)
    keys = set().union(*history)
    assert {f"episode/{k}" for k in STAT_KEYS} <= keys
    assert "loss/approx_kl" in keys and "throughput/env_fps" in keys
    assert max(row["version"] for row in history) >= 5
    defined = {m.get("name"): m for m in main[0]["metrics"]}
    assert "episodes" in defined or any(
        m.get("step_metric") == "episodes" for m in defined.values()
    )
    assert any(r["run_id"] == "rapid-reference" for r in experiment)

    png = tmp_path / "compare.png"
    table = run_compare(run_dir, out=png, width=640, height=480)
    assert "Rapid" in table and "132.3" in table and "logged" in table
    assert f"{os.cpu_count()} CPU cores" in table  # the controller recorded its hardware
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (640, 480)
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0]


@pytest.mark.parametrize("backend", ["c", "pod"])
def test_a_tasks_own_statistics_reach_the_metrics(tmp_path, backend):
    """Lock and return's `boxes_locked` and `returned` travel from the game's infos through the
    actors' (or the pod's) heartbeats into metrics.jsonl, after the game's own statistics."""
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [f"runs_dir={tmp_path}", "name=task", f"pipeline.backend={backend}", "pod.worlds=4",
         "game.preset=lock_and_return", "stop.versions=3"],
    )  # fmt: skip
    keys = stat_keys(cfg.game_config())
    assert keys == (*STAT_KEYS, "boxes_locked", "returned")
    assert Controller(cfg).run().version >= 3
    lines = (tmp_path / "task" / "metrics.jsonl").read_text().splitlines()
    train = [r for r in map(json.loads, lines) if r["kind"] == "train" and "episode/returned" in r]
    assert train, "no record with the task's statistics"
    for record in train:
        assert 0.0 <= record["episode/returned"] <= 1.0
        assert 0.0 <= record["episode/boxes_locked"] <= 1.0  # the task's one box
        assert record["episode/hider_return"] == record["episode/hider_return"]  # not NaN
