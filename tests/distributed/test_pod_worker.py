"""Pods in real runs (`pipeline.backend=pod`): the controller, checkpoints, pool snapshots,
metrics and resume work as with the pipeline; two pods train one policy as DDP ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.agents.pool import PolicyPool
from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller

SMOKE = CONFIG_DIR / "smoke.yaml"


def pod_config(tmp_path, *overrides):
    return load_config(
        SMOKE,
        [f"runs_dir={tmp_path}", "pipeline.backend=pod", "pod.worlds=4", "pod.epochs=1",
         "pod.minibatches=1", *overrides],
    )  # fmt: skip


def train_records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def test_a_pod_run_counts_checkpoints_snapshots_and_resumes(tmp_path):
    cfg = pod_config(tmp_path, "name=pod", "stop.versions=4")
    controller = Controller(cfg)
    assert [s.kind for s in controller.specs()] == ["trainer"]  # no actors, no policy workers
    summary = controller.run()
    assert summary.reason == "reached stop.versions=4"
    # 4 worlds x 20 steps per rollout, one rollout per version; horizon 20: 4 episodes each
    assert summary.frames >= 4 * 80 and summary.episodes >= 4 * 4
    run = tmp_path / "pod"
    ckpt = CheckpointDir(run / "checkpoints").latest()
    assert ckpt.meta["counters"]["version"] >= 4
    with PolicyPool(run / "pool") as pool:
        assert pool.versions()[:3] == [0, 2, 4]
    train = train_records(run)
    assert any("episode/hider_return" in r for r in train)
    assert any(r.get("throughput/trained_fps", 0) > 0 for r in train)
    assert any("pod/sim_ms_per_frame" in r and "loss/approx_kl" in r for r in train)

    resumed = load_config(run / "config.yaml", ["stop.versions=6"])
    summary = Controller(resumed, resume=True).run()
    assert summary.version >= 6 and summary.frames > ckpt.meta["counters"]["frames"]
    assert CheckpointDir(run / "checkpoints").latest().meta["counters"]["version"] >= 6


@pytest.mark.slow
def test_two_pods_train_one_policy(tmp_path):
    cfg = pod_config(
        tmp_path, "name=ddp", "pipeline.launcher=local", "pipeline.n_trainers=2", "stop.versions=3"
    )
    summary = Controller(cfg).run()
    assert summary.reason == "reached stop.versions=3" and summary.restarts == 0
    # both ranks simulate: frames of two pods' worlds per version
    assert summary.frames >= 2 * 4 * 20 * 3
    ckpt = CheckpointDir(tmp_path / "ddp" / "checkpoints").latest()
    weights = ckpt.state["ppo"]["model"]
    assert all(torch.isfinite(v).all() for v in weights.values() if v.is_floating_point())
