"""Several trainers, one policy: R ranks with parts of a batch step like one rank with all of it.

Real torch.distributed (gloo) between spawned processes, rendezvous through a TCPStore that this
test hosts the way the controller does. Then the pipeline end to end with two trainer workers.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from waiting import run_spawned

from hns_train.agents import PPO, ActorCritic, NetworkConfig, PPOConfig
from hns_train.agents.chunks import stack_chunks
from hns_train.distributed.ddp import make_store, rendezvous_info
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import synthetic_chunk
from tests.tolerances import ADAM_STEP, TEST_THREADS, assert_same_update, step_gap

SHAPES = observation_shapes(make_config("quadrant"))
NET = NetworkConfig(embed_dim=32, attention_heads=2, dense_dim=32, lstm_dim=32)
PPO_CFG = PPOConfig(epochs=2, minibatches=1)
# Columns per chunk. Two ranks: rank 0 trains on the first `SPLIT` chunks, rank 1 on the rest;
# four ranks: one chunk each.
WIDTHS = {"halves": (4, 4, 4, 4), "uneven": (6, 2, 3, 5)}
SPLIT = 2


def part_of(rank: int, ranks: int) -> slice:
    if ranks == 2:
        return slice(0, SPLIT) if rank == 0 else slice(SPLIT, None)
    return slice(rank, rank + 1)


STEPS = 2  # optimisation steps: the second one sees the first one's normaliser statistics


@functools.cache
def batches(kind: str) -> list[list]:
    """STEPS lists of chunks, made by a fixed-seed model (same on every process)."""
    torch.manual_seed(1)
    model = ActorCritic(SHAPES, NET, device="cpu")
    rng = np.random.default_rng(7)
    return [
        [synthetic_chunk(model, 10, b, 10, rng, episode_len=7) for b in WIDTHS[kind]]
        for _ in range(STEPS)
    ]


@pytest.fixture(autouse=True)
def one_thread():
    """Two cores shared by everyone: one torch thread per process here (as conftest's)."""
    before = torch.get_num_threads()
    torch.set_num_threads(TEST_THREADS)
    yield
    torch.set_num_threads(before)


def train(kind: str, sync=None, part: slice = slice(None)) -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    model = ActorCritic(SHAPES, NET, device="cpu")
    ppo = PPO(model, PPO_CFG, sync=sync)
    for chunks in batches(kind):
        ppo.update(stack_chunks(chunks[part]))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _rank(rank: int, ranks: int, info: dict, out: str) -> None:
    from hns_train.distributed.ddp import DataParallel

    torch.set_num_threads(TEST_THREADS)
    group = DataParallel(rank, info, torch.device("cpu"), "gloo", timeout_s=60)
    try:
        part = part_of(rank, ranks)
        result = {f"{kind}/{k}": v for kind in WIDTHS for k, v in train(kind, group, part).items()}
        torch.save(result, f"{out}/rank{rank}.pt")
    finally:
        group.close()


def run_ranks(tmp_path: Path, n: int, sums: str = "gloo") -> list[dict[str, torch.Tensor]]:
    """`n` ranks training on their parts; `sums`: gloo's all-reduce, or the ranks' shared
    memory (a folder of the run's, as the controller gives on one host)."""
    store, port = make_store("127.0.0.1", timeout_s=60)
    folder = None
    if sums == "shared_memory":
        folder = tmp_path / "shared"
        folder.mkdir()
    info = rendezvous_info("127.0.0.1", port, n, generation=0, folder=folder and str(folder))
    codes = run_spawned(_rank, [(r, n, info, str(tmp_path)) for r in range(n)])
    del store
    assert codes == [0] * n, f"rank exit codes {codes}"
    assert folder is None or not any(folder.iterdir()), "a rank left its shared-memory files"
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(n)]


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("n", "sums"),
    [
        (2, "gloo"),
        (2, "shared_memory"),
        pytest.param(4, "shared_memory", marks=pytest.mark.slow),
    ],
)
def test_ranks_with_parts_of_the_batch_take_the_whole_batch_step(tmp_path, n, sums):
    """Two ranks with half the batch each; four (as pods on a node) with a quarter each; the
    sums through gloo (ranks on several hosts) or through one host's shared memory."""
    ranks = run_ranks(tmp_path, n, sums)
    torch.manual_seed(3)
    model = ActorCritic(SHAPES, NET, device="cpu")
    initial = model.state_dict()
    parameters = {name for name, _ in model.named_parameters()}
    for kind in WIDTHS:
        whole = train(kind)
        got0 = {name: ranks[0][f"{kind}/{name}"] for name in whole}
        for name in whole:
            # Ranks stay bit-identical: they apply the same averaged gradient.
            assert all(torch.equal(got0[name], r[f"{kind}/{name}"]) for r in ranks[1:]), (
                f"{kind}: ranks disagree on {name}"
            )
        assert_same_update(got0, whole, initial, parameters)
        # The step did move the weights (so the comparison above is not trivially true) ...
        moved = max(
            float((whole[k] - initial[k]).abs().max())
            for k in whole
            if k.endswith("weight") and "norm" not in k
        )
        assert moved > 1e-4
        # ... and one rank training alone on its half takes a step the tolerance tells apart.
        alone = train(kind, part=slice(0, SPLIT))
        gap = max(step_gap(alone[k], whole[k], initial[k]) for k in parameters)
        assert gap > 10 * ADAM_STEP.norm_rtol, f"{kind}: half the batch alone gives the same step"


def test_backend_choice_is_checked():
    """A name the config does not know is refused there; nccl needs CUDA trainers."""
    from hns_train.config import CONFIG_DIR, ConfigError, load_config
    from hns_train.distributed.ddp import choose_backend

    with pytest.raises(ConfigError, match="pipeline.ddp_backend='mpi' is not one of"):
        load_config(CONFIG_DIR / "smoke.yaml", ["pipeline.ddp_backend=mpi"])
    assert choose_backend("auto", torch.device("cpu")) == "gloo"
    with pytest.raises(ValueError, match="ddp_backend"):
        choose_backend("nccl", torch.device("cpu"))


@pytest.mark.slow
def test_two_trainer_workers_train_one_policy_in_the_pipeline(tmp_path):

    from hns_train.agents.checkpoint import CheckpointDir
    from hns_train.config import CONFIG_DIR, load_config
    from hns_train.distributed.controller import Controller

    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [f"runs_dir={tmp_path}", "name=ddp", "pipeline.launcher=local", "pipeline.n_trainers=2"],
    )
    controller = Controller(cfg)
    summary = controller.run()
    assert summary.reason == "reached stop.versions=4", summary.reason
    last = {n: controller.workers[n].last for n in ("trainer0", "trainer1")}
    # Both ranks reached the same version in lockstep; a step needs every rank's share of chunks.
    assert last["trainer0"]["version"] == last["trainer1"]["version"] == summary.version >= 4
    ckpt = CheckpointDir(tmp_path / "ddp" / "checkpoints").latest()
    assert ckpt is not None and ckpt.meta["counters"]["version"] == summary.version
    pids = [s.pid for s in controller.workers.values() if s.pid]
    assert len(pids) == 4 and not any(Path(f"/proc/{p}").exists() for p in pids)


@pytest.mark.slow
def test_a_dead_rank_restarts_the_whole_group_from_the_checkpoint(tmp_path):
    from hns_train.config import CONFIG_DIR, load_config

    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [
            f"runs_dir={tmp_path}",
            "name=regroup",
            "pipeline.launcher=local",
            "pipeline.n_trainers=2",
            "pipeline.restart_trainer=true",
            "pipeline.ddp_timeout_s=30",
            "stop.versions=0",
        ],
    )
    kill_a_rank_and_see_its_group_train_on(cfg, ["trainer0", "trainer1"], "trainer1")


def kill_a_rank_and_see_its_group_train_on(cfg, ranks: list[str], victim: str) -> None:
    """Train `cfg` to a checkpoint, SIGKILL the rank `victim`: the controller restarts once, every
    rank is a new process (a rank cannot rejoin a running group), and the group trains together
    past where it was, the ranks agreeing on the version."""
    import os
    import signal
    import threading

    from waiting import wait_for

    from hns_train.distributed.controller import Controller

    controller = Controller(cfg)
    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: controller.version >= 2, 240, "a checkpoint at version 2")
        old = {n: controller.workers[n].pid for n in ranks}
        os.kill(old[victim], signal.SIGKILL)
        wait_for(lambda: controller.restarts >= 1, 90, "the restart")
        wait_for(
            lambda: all(controller.workers[n].pid not in (None, old[n]) for n in ranks),
            120,
            "every rank to say hello again",
        )
        target = controller.version + 2
        wait_for(lambda: controller.version >= target, 240, "training to go on")
        # the ranks sum through the run's shared memory; the killed generation's files are gone
        shared = Path(controller.endpoints["shared_rows"])
        names = {p.name for p in shared.iterdir()}
        assert not {n for n in names if n.startswith("sums-g0-")}, names
        assert {f"sums-g1-r{r}.in" for r in range(len(ranks))} <= names, names
    finally:
        controller.request_stop("test over")
        thread.join(120)
    assert not thread.is_alive() and not controller.error
    assert controller.restarts == 1
    last = [controller.workers[n].last["version"] for n in ranks]
    assert len(set(last)) == 1 and last[0] >= target


@pytest.mark.slow
def test_a_rank_waiting_for_a_slow_peer_is_not_taken_for_a_silent_one(tmp_path, caplog):
    """Two pods: the one that ends its rollout first waits in the ranks' agreement for the other.
    The other is made slow while alive (stopped again and again, each time for less than the
    heartbeat timeout, and let go until it heartbeats); the waiting rank says it is busy before
    the wait, so neither is restarted as silent."""
    import contextlib
    import logging
    import os
    import signal
    import threading
    import time

    from waiting import wait_for

    from hns_train.config import CONFIG_DIR, load_config
    from hns_train.distributed.controller import Controller

    caplog.set_level(logging.WARNING, logger="hns_train.distributed.controller")
    timeout_s = 5
    # Heartbeats between nearly all steps: a rollout of this tiny run is shorter than a second,
    # and without them the update's `busy` would still stand when the wait begins; with the
    # rollouts and updates of real runs, which take seconds, a heartbeat always comes between.
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [f"runs_dir={tmp_path}", "name=slow", "pipeline.launcher=local", "pipeline.backend=pod",
         "pipeline.n_trainers=2", "pod.worlds=4", "agent.ppo.epochs=1", "agent.ppo.minibatches=1",
         "stop.versions=0", "pipeline.heartbeat_s=0.02",
         f"pipeline.heartbeat_timeout_s={timeout_s}"],
    )  # fmt: skip
    controller = Controller(cfg)
    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: controller.version >= 1, 240, "a first update")
        slow = controller.workers["trainer1"]
        pid, version = slow.pid, controller.version
        end = time.monotonic() + 3 * timeout_s
        while time.monotonic() < end and not controller.restarts:
            seen = slow.last_seen
            with contextlib.suppress(ProcessLookupError):  # restarted: the loop ends
                os.kill(pid, signal.SIGSTOP)
                time.sleep(timeout_s - 2)
                seen = slow.last_seen  # what it sent before the stop has arrived by now
                os.kill(pid, signal.SIGCONT)
            # let go only until its next message: a step or two, so its rollout takes long
            deadline = time.monotonic() + 60
            while slow.last_seen == seen and time.monotonic() < deadline:
                time.sleep(0.002)
        silent = [r.getMessage() for r in caplog.records if " silent " in r.getMessage()]
        assert controller.restarts == 0 and not silent, silent
        wait_for(lambda: controller.version > version + 1, 120, "training to go on")
    finally:
        controller.request_stop("test over")
        thread.join(120)
    assert not thread.is_alive() and not controller.error


def test_mixed_precision_step_stays_close_to_the_float32_step():
    """bf16 autocast (what trainers use on GPUs) changes the step only by rounding; the weights,
    optimiser and statistics stay float32/float64. Checked here on CPU autocast."""
    chunks = stack_chunks(batches("halves")[0])
    torch.manual_seed(3)
    initial = ActorCritic(SHAPES, NET, device="cpu").state_dict()
    result = {}
    for dtype in (None, torch.bfloat16):
        torch.manual_seed(3)
        model = ActorCritic(SHAPES, NET, device="cpu")
        stats = PPO(model, PPO_CFG, autocast_dtype=dtype).update(chunks)
        assert all(np.isfinite(v) for v in stats.values())
        assert all(v.dtype in (torch.float32, torch.float64) for v in model.state_dict().values())
        result[dtype] = model.state_dict()
    full, mixed = result[None], result[torch.bfloat16]
    step = max(float((full[k] - initial[k]).abs().max()) for k in full)
    gap = max(float((full[k] - mixed[k]).abs().max()) for k in full)
    assert 0 < gap < 0.25 * step, (gap, step)
