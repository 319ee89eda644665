"""The Ray launcher end to end: the smoke run on a local Ray instance and on a simulated
two-node cluster, with real optimisation steps, a worker restart and a clean shutdown."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from waiting import alive, wait_for

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller

ray = pytest.importorskip("ray")


def smoke(tmp_path, *overrides):
    return load_config(
        CONFIG_DIR / "smoke.yaml",
        [
            f"runs_dir={tmp_path}",
            "pipeline.launcher=ray",
            "pipeline.heartbeat_timeout_s=60",
            *overrides,
        ],
    )


def parent(pid: int) -> int:
    """The parent of process `pid`: for a Ray worker, the raylet of its node."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ray_processes() -> list[int]:
    """Live Ray daemons (gcs_server, raylet) started by this test process."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = parent(int(stat.parent.name))
            exe = (stat.parent / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"/ray/core/src/" in exe and alive(int(stat.parent.name)):
            out.append(int(stat.parent.name))
    return out


def check_trained(controller: Controller, summary, run_dir: Path) -> None:
    assert summary.version >= 4 and summary.frames > 0 and summary.episodes > 0
    ckpt = CheckpointDir(run_dir / "checkpoints").latest()
    assert ckpt is not None and ckpt.meta["counters"]["version"] == summary.version
    trainer = controller.workers["trainer0"].last
    assert trainer["stats"] and "approx_kl" in trainer["stats"]
    # A Ray run is a cluster run: tcp on node addresses, every socket with the run's keys.
    assert controller.security is not None
    assert controller.endpoints["control"].startswith("tcp://")
    assert all(e.startswith("tcp://") for e in controller.endpoints["inference"])


def test_smoke_run_on_a_local_ray_instance(tmp_path):
    cfg = smoke(tmp_path, "name=ray", "pipeline.ray_num_cpus=2")
    controller = Controller(cfg)
    assert ray.is_initialized() and controller.launcher.owns_ray and ray_processes()
    summary = controller.run()
    assert summary.reason == "reached stop.versions=4", summary.reason
    check_trained(controller, summary, tmp_path / "ray")
    pids = {name: worker.pid for name, worker in controller.workers.items()}
    assert set(pids) == {"trainer0", "policy0", "actor0"} and None not in pids.values()
    # Clean shutdown: the worker actors and the Ray instance this run started are gone.
    assert not ray.is_initialized()
    wait_for(lambda: not any(alive(pid) for pid in pids.values()), 30, "workers to exit")
    wait_for(lambda: not ray_processes(), 30, "Ray daemons to exit")


@pytest.fixture
def two_nodes():
    """A simulated two-node cluster (one logical CPU each), always torn down."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_a_run_without_an_address_starts_its_own_ray_beside_a_running_cluster():
    """Ray joins the newest cluster on the machine when given no address; a run that asked for
    its own instance (and `ray_num_cpus`) must not land on another test's or user's cluster."""
    from ray.cluster_utils import Cluster

    from hns_train.distributed.ray_launcher import start_ray

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False}
    )
    try:
        cfg = smoke(Path("/nonexistent"), "pipeline.ray_num_cpus=1")
        module, owns = start_ray(cfg.pipeline)
        assert owns and module.is_initialized()
        # the cluster has 3 CPUs; the run's own instance has the 1 it asked for
        assert module.cluster_resources()["CPU"] == 1
        assert module.get_runtime_context().gcs_address != cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_two_node_cluster_packs_trainers_restarts_a_worker_and_releases_everything(
    tmp_path, two_nodes
):
    cfg = smoke(
        tmp_path,
        "name=cluster",
        f"pipeline.ray_address={two_nodes.address}",
        "pipeline.n_trainers=2",
        "stop.versions=0",
    )
    controller = Controller(cfg)
    assert not controller.launcher.owns_ray
    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: controller.version >= 1, 240, "a first optimisation step")
        killed = controller.workers["actor0"].pid  # from its hello
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: controller.restarts >= 1, 90, "the actor's restart")
        # a worker still starting when the run stops is killed, and has no placement then
        wait_for(lambda: controller.workers["actor0"].connected, 120, "the new actor's hello")
        before = controller.version
        wait_for(lambda: controller.version >= max(before, 4) + 1, 240, "training to go on")
        # each worker's node as the machine shows it: its process is a child of that node's raylet
        nodes = {name: parent(worker.pid) for name, worker in list(controller.workers.items())}
    finally:
        controller.request_stop("test over")
        thread.join(180)
    assert not thread.is_alive()
    assert controller.stop_reason == "test over" and not controller.error
    summary = controller.summary()
    check_trained(controller, summary, tmp_path / "cluster")
    # PACK: both ranks share a node; SPREAD: the run used both nodes.
    assert nodes["trainer0"] == nodes["trainer1"]
    assert len(set(nodes.values())) == 2
    assert controller.workers["actor0"].pid != killed
    # Nothing left running or reserved on a cluster the run did not start.
    pids = [worker.pid for worker in controller.workers.values()] + [killed]
    wait_for(lambda: not any(alive(p) for p in pids), 30, "workers to exit")
    wait_for(lambda: ray.available_resources().get("CPU", 0) == 2.0, 30, "reservations released")


@pytest.mark.slow
def test_pod_ranks_on_two_nodes_train_one_policy(tmp_path, two_nodes):
    """Pods as DDP ranks across hosts: one whole CPU per rank on two one-CPU nodes puts one
    rank on each, so their agreement and gradient sums cross between the nodes."""
    cfg = smoke(
        tmp_path, "name=pods", f"pipeline.ray_address={two_nodes.address}",
        "pipeline.backend=pod", "pod.worlds=4", "agent.ppo.epochs=1", "agent.ppo.minibatches=1",
        "pipeline.n_trainers=2", "pipeline.ray_trainer_cpus=1", "stop.versions=3",
    )  # fmt: skip
    controller = Controller(cfg)
    nodes = {}

    def where() -> bool:
        nodes.update({n: parent(w.pid) for n, w in list(controller.workers.items()) if w.pid})
        return len(nodes) == 2

    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    try:
        wait_for(where, 240, "both ranks' hello")
        thread.join(300)
    finally:
        controller.request_stop("test over")
        thread.join(120)
    assert not thread.is_alive() and not controller.error
    assert controller.stop_reason == "reached stop.versions=3" and controller.restarts == 0
    assert nodes["trainer0"] != nodes["trainer1"]  # one rank per node
    ranks = [controller.workers[n] for n in ("trainer0", "trainer1")]
    assert [r.last["version"] for r in ranks] == [3, 3]
    assert all(r.totals["frames"] >= 3 * 4 * 20 and r.totals["sync_cpu_s"] > 0 for r in ranks)
