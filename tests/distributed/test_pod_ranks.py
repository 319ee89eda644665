"""Many pods, one policy: four pod ranks on one host (`pipeline.backend=pod`,
`pipeline.n_trainers=4`). Every rank trains on its own rollout, all ranks stop at one version,
rank 0 alone writes checkpoints and snapshots, a killed rank restarts its whole group (four ranks
with a quarter of a batch each step like one rank with all of it: test_ddp.py). The pipeline's
chunk settings do not bind pods (16 ranks with `batch_chunks=8` start)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ddp import kill_a_rank_and_see_its_group_train_on
from test_pod_worker import pod_config

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.agents.pool import PolicyPool
from hns_train.config import CONFIG_DIR, ConfigError, load_config
from hns_train.distributed.controller import Controller

RANKS = 4
NAMES = [f"trainer{r}" for r in range(RANKS)]


def local_pods(tmp_path, *overrides):
    return pod_config(
        tmp_path, "pipeline.launcher=local", f"pipeline.n_trainers={RANKS}",
        "pipeline.ddp_timeout_s=60", *overrides,
    )  # fmt: skip


def test_pods_are_not_bound_by_the_pipelines_chunk_share():
    smoke = CONFIG_DIR / "smoke.yaml"
    ranks = ["pipeline.launcher=local", "pipeline.n_trainers=16", "pipeline.batch_chunks=8"]
    cfg = load_config(smoke, [*ranks, "pipeline.backend=pod"])
    assert cfg.pipeline.n_trainers == 16
    with pytest.raises(ConfigError, match=r"batch_chunks=8 must be a multiple of .*n_trainers=16"):
        load_config(smoke, ranks)  # trainers share chunks: still checked


@pytest.mark.slow
def test_four_pod_ranks_train_their_own_rollouts_and_stop_together(tmp_path):
    cfg = local_pods(tmp_path, "name=four", "stop.versions=3", "pipeline.checkpoint_every_s=0")
    controller = Controller(cfg)
    summary = controller.run()
    assert summary.reason == "reached stop.versions=3" and summary.restarts == 0
    states = [controller.workers[n] for n in NAMES]
    # one stop for all: every rank made the same updates and has left
    assert [s.last["version"] for s in states] == [3] * RANKS
    assert [s.totals["steps"] for s in states] == [3] * RANKS
    assert all(s.stopped and not Path(f"/proc/{s.pid}").exists() for s in states)
    # every rank's share: its own 4 worlds x 20 steps per update, trained on by that rank
    for s in states:
        assert s.totals["frames"] >= 3 * 4 * 20, s.spec.name
        assert 0 < s.totals["samples"] <= s.totals["frames"] * cfg.game_config().max_agents
    # where each rank's CPU went is reported, its collectives apart
    assert all(s.totals["collect_cpu_s"] > 0 and s.totals["sync_cpu_s"] > 0 for s in states)
    # one writer: rank 0's duties (checkpoints, snapshots) cost the others nothing
    assert states[0].totals["duties_cpu_s"] > 0
    assert max(s.totals["duties_cpu_s"] for s in states[1:]) < states[0].totals["duties_cpu_s"]
    run = tmp_path / "four"
    assert CheckpointDir(run / "checkpoints").steps() == [2, 3]
    with PolicyPool(run / "pool") as pool:
        assert pool.versions() == [0, 2]
    left = [p.name for p in run.rglob("*") if ".tmp" in p.name]
    assert not left, left


@pytest.mark.slow
def test_a_killed_pod_rank_restarts_its_group_of_four(tmp_path):
    cfg = local_pods(tmp_path, "name=regroup", "stop.versions=0", "pipeline.restart_trainer=true")
    kill_a_rank_and_see_its_group_train_on(cfg, NAMES, "trainer2")
