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
from hns_train.eval.policies import load_policy_file

SMOKE = CONFIG_DIR / "smoke.yaml"


def pod_config(tmp_path, *overrides):
    return load_config(
        SMOKE,
        [f"runs_dir={tmp_path}", "pipeline.backend=pod", "pod.worlds=4",
         "agent.ppo.epochs=1", "agent.ppo.minibatches=1", *overrides],
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
    # A pod receives no chunks and trains on each rollout once: the pipeline trainer's buffer,
    # staleness and reuse are left out, not filled with constants.
    assert all(
        {"queue/trainer_buffer", "staleness/mean", "reuse/mean"}.isdisjoint(r) for r in train
    )

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


def test_the_seed_fixes_the_initial_network_and_the_whole_pod_run(tmp_path):
    """A pod run repeats itself from its seed: initial weights, sampled actions, updates (and
    stops at exactly stop.versions, however late the controller's heartbeat sees it)."""

    def weights(name: str, seed: int) -> tuple[dict, dict]:
        cfg = pod_config(
            tmp_path, f"name={name}", f"seed={seed}", "pipeline.launcher=serial", "stop.versions=2"
        )
        Controller(cfg).run()
        run = tmp_path / name
        untrained = load_policy_file(run / "pool" / "snapshot_0000000000.pt").state_dict
        [final] = CheckpointDir(run / "checkpoints").steps()
        assert final == 2
        trained = load_policy_file(CheckpointDir(run / "checkpoints").latest().path).state_dict
        return untrained, trained

    def same(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    untrained, trained = weights("a", seed=5)
    again_untrained, again_trained = weights("b", seed=5)
    other_untrained, _ = weights("c", seed=6)
    assert same(untrained, again_untrained) and same(trained, again_trained)
    assert not same(trained, untrained)
    assert not same(untrained, other_untrained)
