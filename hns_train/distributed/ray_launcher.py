"""Ray launcher: the same worker classes as Ray actors, on an existing cluster or a local one.

`RayLauncher(cfg)` connects to `pipeline.ray_address` (or starts a local Ray with
`pipeline.ray_num_cpus` logical CPUs, no dashboard) and, before any worker starts, reserves two
placement groups:

- trainers: one bundle per rank, strategy PACK (ranks on as few nodes as possible: all-reduce
  traffic stays local; on GPUs one whole GPU per rank for nccl);
- policy, actor and eval workers: one bundle each, strategy SPREAD (simulation and inference use
  every node).

Every reservation is a fraction (`pipeline.ray_<kind>_cpus`, default 0.25-0.5; GPUs:
`ray_<kind>_gpus`, -1 = automatic: 1 per trainer and 0.25 per policy worker when the cluster has
GPUs, 0 otherwise). An actor holding whole CPUs can leave later tasks waiting forever on a small
cluster; the CPU fraction is a scheduling share, the worker still uses `torch_threads` threads.
Actors never reserve GPUs: their inference runs in policy workers, and they only step physics.

Endpoints: once the groups are placed the launcher knows each worker's node, so `addresses()`
gives tcp addresses on node IPs (free ports found by a tiny task on that node), the controller's
control socket on the driver's IP. Every socket of a Ray run is a CURVE socket (the controller
makes keys per run; see security.py).

Liveness: each worker runs `run_worker(spec)` inside one long actor call; the call returning or
failing (the process died, the node went away) is what `dead()` reports, so the controller's
heartbeats and restarts work exactly as with local processes. A restarted worker goes back into
its own bundle, so its endpoints stay valid. `join()` waits, kills what is left, removes the
placement groups, checks every actor is gone, and shuts Ray down if this launcher started it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import defaultdict
from typing import Any

from hns_train.config import RunConfig
from hns_train.distributed.streams import free_tcp_ports
from hns_train.distributed.worker import WorkerSpec, run_worker, worker_plan

log = logging.getLogger(__name__)
RESERVE_TIMEOUT_S = 120.0
MIN_BUNDLE_CPUS = 0.01  # a bundle may not be empty
AUTO = -1.0
AUTO_GPUS = {"trainer": 1.0, "policy": 0.25}
# Environment a worker process needs whatever the node's defaults (rendering backend, threads).
FORWARDED_ENV = ("MUJOCO_GL", "PYOPENGL_PLATFORM")


class _WorkerHost:
    """The Ray actor body: one worker, run to completion in one call."""

    def __init__(self, env: dict[str, str]) -> None:
        os.environ.update(env)  # before the worker imports mujoco

    def pid(self) -> int:
        """Its process id: an answer says the actor still lives (`_wait_gone`)."""
        return os.getpid()

    def run(self, spec: dict[str, Any]) -> None:
        run_worker(WorkerSpec(**spec))


def start_ray(p) -> tuple[Any, bool]:
    """(the `ray` module, whether this call connected it): connected to `pipeline.ray_address`,
    or to a new local Ray with `pipeline.ray_num_cpus` logical CPUs and no dashboard, unless
    this process is connected already."""
    try:
        import ray
    except ImportError:
        raise ValueError(
            "pipeline.launcher=ray needs Ray 2.60: pip install 'hns_train[cluster]'"
        ) from None
    if ray.is_initialized():
        return ray, False
    if p.ray_address:
        ray.init(address=p.ray_address, logging_level=logging.WARNING)
    else:
        # "local": a new instance even when another Ray runs on this machine. Without an
        # address, ray.init joins the newest cluster it finds under /tmp/ray (and then refuses
        # num_cpus), so a run would land on whichever cluster started last.
        ray.init(
            address="local",
            num_cpus=p.ray_num_cpus or None,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    return ray, True


class RayLauncher:
    scheme = "tcp"

    def __init__(self, cfg: RunConfig) -> None:
        self.ray, self.owns_ray = start_ray(cfg.pipeline)
        self.cfg = cfg
        self.host = self.ray.util.get_node_ip_address()  # the controller's node
        self._host_cls = self.ray.remote(_WorkerHost)
        self.actors: dict[str, Any] = {}
        self.runs: dict[str, Any] = {}
        self._finished: set[str] = set()
        self._groups: list[Any] = []
        self._slots: dict[str, tuple[Any, int]] = {}
        self._slot_ip: dict[str, str] = {}
        self._slot_node: dict[str, str] = {}
        try:
            self.resources = self._resources()
            self._reserve()
        except BaseException:
            self._release()
            raise

    # ------------------------------------------------------------------ reservations
    def _resources(self) -> dict[str, dict[str, float]]:
        p = self.cfg.pipeline
        has_gpus = self.ray.cluster_resources().get("GPU", 0) > 0
        out = {}
        for kind in worker_plan(self.cfg):  # every kind, none started included
            gpus = getattr(p, f"ray_{kind}_gpus", 0.0)
            if gpus == AUTO:
                gpus = AUTO_GPUS.get(kind, 0.0) if has_gpus and p.device != "cpu" else 0.0
            out[kind] = {"CPU": max(getattr(p, f"ray_{kind}_cpus"), MIN_BUNDLE_CPUS), "GPU": gpus}
        return out

    def _reserve(self) -> None:
        from ray.util.placement_group import placement_group, placement_group_table

        plan = [
            (["trainer"], "PACK"),
            (["policy", "actor", "eval"], "SPREAD"),
        ]
        count = worker_plan(self.cfg)
        for kinds, strategy in plan:
            kind_of = {f"{k}{i}": k for k in kinds for i in range(count[k])}
            if not kind_of:
                continue
            wanted = [self.resources[kind] for kind in kind_of.values()]
            bundles = [{k: v for k, v in res.items() if v > 0} for res in wanted]
            group = placement_group(bundles, strategy=strategy)
            self._groups.append(group)
            try:
                self.ray.get(group.ready(), timeout=RESERVE_TIMEOUT_S)
            except self.ray.exceptions.GetTimeoutError:
                raise ValueError(
                    f"Ray could not reserve {bundles} ({strategy}) within "
                    f"{RESERVE_TIMEOUT_S:.0f} s; the cluster has "
                    f"{self.ray.available_resources()} free. Lower pipeline.ray_*_cpus / "
                    "ray_*_gpus or the worker counts, or add nodes"
                ) from None
            table = placement_group_table(group)["bundles_to_node_id"]
            ips = {n["NodeID"]: n["NodeManagerAddress"] for n in self.ray.nodes() if n["Alive"]}
            for index, name in enumerate(kind_of):
                self._slots[name] = (group, index)
                self._slot_node[name] = table[index]
                self._slot_ip[name] = ips[table[index]]

    def addresses(self, owners: dict[str, str]) -> dict[str, str]:
        """A tcp address for each socket name, on the node its owner was placed on (the
        controller's on the driver's node): `make_endpoints`' `place`."""
        by_ip: dict[str, list[str]] = defaultdict(list)
        node_of_ip = {}
        for key, worker in owners.items():
            ip = self._slot_ip[worker] if worker else self.host
            by_ip[ip].append(key)
            if worker:
                node_of_ip.setdefault(ip, self._slot_node[worker])
        addr = {}
        for ip, keys in by_ip.items():
            ports = self._ports_on(ip, node_of_ip.get(ip), len(keys))
            addr.update({k: f"tcp://{ip}:{port}" for k, port in zip(keys, ports, strict=True)})
        return addr

    def _ports_on(self, ip: str, node_id: str | None, count: int) -> list[int]:
        if ip == self.host or node_id is None:
            return free_tcp_ports(ip, count)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self.ray.remote(free_tcp_ports).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        )
        return self.ray.get(task.remote(ip, count), timeout=60)

    # ------------------------------------------------------------------ launcher interface
    def start(self, spec: WorkerSpec) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if spec.name not in self._slots:
            raise ValueError(f"no Ray reservation for worker {spec.name!r}")
        group, index = self._slots[spec.name]
        res = self.resources[spec.kind]
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        actor = self._host_cls.options(
            num_cpus=res["CPU"],
            num_gpus=res["GPU"],
            max_restarts=0,  # the controller restarts workers, with a new incarnation
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=index
            ),
        ).remote(env)
        self.actors[spec.name] = actor
        self.runs[spec.name] = actor.run.remote(dataclasses.asdict(spec))
        self._finished.discard(spec.name)

    def step(self) -> None:
        time.sleep(0.01)

    def dead(self) -> list[str]:
        pending = {ref: name for name, ref in self.runs.items() if name not in self._finished}
        if pending:
            ready, _ = self.ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in ready:
                name = pending[ref]
                self._finished.add(name)
                try:
                    self.ray.get(ref, timeout=0)
                except Exception as err:
                    log.warning("%s: Ray actor ended with %s", name, type(err).__name__)
        return sorted(self._finished & set(self.runs))

    def kill(self, name: str) -> None:
        actor = self.actors.pop(name, None)
        self.runs.pop(name, None)
        self._finished.discard(name)
        if actor is not None:
            self.ray.kill(actor, no_restart=True)

    def join(self, timeout_s: float) -> None:
        try:
            refs = list(self.runs.values())
            if refs:
                self.ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            actors = list(self.actors.values())
            for name in list(self.actors):
                self.kill(name)
            self._wait_gone(actors)
        finally:
            self._release()

    def _wait_gone(self, actors: list, timeout_s: float = 10.0) -> None:
        """Every killed actor answers with an error (its process is gone) before we go on."""
        deadline = time.monotonic() + timeout_s
        for actor in actors:
            while time.monotonic() < deadline:
                try:
                    self.ray.get(actor.pid.remote(), timeout=1)
                except self.ray.exceptions.GetTimeoutError:
                    continue
                except Exception:
                    break
                time.sleep(0.05)

    def _release(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for group in self._groups:
            try:
                remove_placement_group(group)
            except Exception as err:  # the cluster is going away anyway
                log.warning("placement group not removed: %s", err)
        self._groups.clear()
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
