"""Launchers: where workers run. The controller talks to every launcher the same way.

- `SerialLauncher`: every worker in the controller's process, stepped in turn (`inproc://`
  sockets). Deterministic enough for tests and easy to debug with breakpoints.
- `LocalLauncher`: one process per worker with the spawn start method (never fork: MuJoCo GL
  contexts and ZeroMQ sockets do not survive it), `ipc://` or `tcp://` sockets.
- A Ray launcher implements the same methods with Ray actors (`ray_launcher.py`).

Interface: `start(spec)`, `step()` (serial: one round of work; others: nothing), `dead()` names
of workers whose process has exited, `kill(name)`, `join(timeout_s)` then force-kill stragglers,
and, for the Ray launcher, `addresses(owners)` placing the run's sockets (`make_endpoints`).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from pathlib import Path

from hns_train.config import RunConfig
from hns_train.distributed.security import RunKeys
from hns_train.distributed.streams import free_tcp_ports, is_loopback
from hns_train.distributed.worker import (
    Worker,
    WorkerSpec,
    build_worker,
    run_worker,
    worker_plan,
)


def run_keys(cfg: RunConfig) -> RunKeys | None:
    """Fresh CURVE keys for a cluster run (ray, or tcp on a non-loopback host, or
    `pipeline.encrypt`); None for one-host runs. Made per run and handed to the workers in
    their specs, never written to disk."""
    p = cfg.pipeline
    exposed = p.launcher == "ray" or (p.transport == "tcp" and not is_loopback(p.host))
    return RunKeys.generate() if exposed or p.encrypt else None


def make_endpoints(
    cfg: RunConfig,
    scheme: str,
    folder: Path | None = None,
    place: Callable[[dict[str, str]], dict[str, str]] | None = None,
) -> dict:
    """Bind and connect addresses of the controller, trainer and policy workers.

    scheme: `inproc` (serial), `ipc` (one host; sockets under `folder`) or `tcp`, on
    `pipeline.host` or, given `place` (the Ray launcher's `addresses`), on the node of each
    socket's owner.
    Samples: one endpoint per trainer rank (`samples[rank]`); actors connect to all of them
    (`samples`), and their PUSH sockets deal chunks out in turn to trainers with room, so every
    rank gets its share even with a single actor.
    """
    plan = worker_plan(cfg)
    # every socket by name, with the worker that binds it ("" for the controller's)
    owners = {"control": "", "params": "trainer0"}
    owners |= {f"inference{i}": f"policy{i}" for i in range(plan["policy"])}
    owners |= {f"samples{i}": f"trainer{i}" for i in range(plan["trainer"])}
    if place is not None:
        addr = place(owners)
    elif scheme == "inproc":
        addr = {n: f"inproc://{cfg.name}-{n}-{os.getpid()}" for n in owners}
    elif scheme == "ipc":
        assert folder is not None
        addr = {n: f"ipc://{folder / n}" for n in owners}
    else:  # tcp: the config allows no other transport
        host = cfg.pipeline.host
        try:
            ports = free_tcp_ports(host, len(owners))
        except OSError as err:  # not an address of this machine, or not an address at all
            raise ValueError(
                f"pipeline.host={host!r}: no port can be bound there ({err.strerror or err}); "
                "use an address of this machine (127.0.0.1 for one host)"
            ) from None
        addr = {n: f"tcp://{host}:{port}" for n, port in zip(owners, ports, strict=True)}
    # a socket's owner binds the address its peers connect to
    return {
        "control": addr["control"],
        "samples": [addr[f"samples{i}"] for i in range(plan["trainer"])],
        "params": addr["params"],
        "inference": [addr[f"inference{i}"] for i in range(plan["policy"])],
    }


class SerialLauncher:
    scheme = "inproc"

    def __init__(self, torch_threads: int = 1) -> None:
        import torch

        # Like every worker process of the local launcher: small batches on many threads only
        # contend (tens of times slower on a busy 2-core machine).
        torch.set_num_threads(torch_threads)
        self.workers: dict[str, Worker] = {}

    def start(self, spec: WorkerSpec) -> None:
        worker = build_worker(spec)
        worker.poll_ms = 0  # in one process a wait only delays the worker that would answer
        self.workers[spec.name] = worker

    def step(self) -> None:
        for worker in list(self.workers.values()):
            if not worker.stopped:
                worker.step()
                worker.poll_control()

    def dead(self) -> list[str]:
        return []

    def kill(self, name: str) -> None:
        worker = self.workers.pop(name, None)
        if worker is not None:
            worker.close()

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(not w.stopped for w in self.workers.values()) and time.monotonic() < deadline:
            self.step()
        for name in list(self.workers):
            self.kill(name)


class LocalLauncher:
    scheme = "ipc"

    def __init__(self) -> None:
        self.context = mp.get_context("spawn")
        self.processes: dict[str, mp.process.BaseProcess] = {}

    def start(self, spec: WorkerSpec) -> None:
        # The worker exits when this process does (worker.ParentWatch).
        spec = dataclasses.replace(spec, parent_pid=os.getpid())
        process = self.context.Process(target=run_worker, args=(spec,), name=spec.name)
        process.start()
        self.processes[spec.name] = process

    def step(self) -> None:
        time.sleep(0.01)

    def dead(self) -> list[str]:
        return [name for name, p in self.processes.items() if not p.is_alive()]

    def exit_code(self, name: str) -> int | None:
        p = self.processes.get(name)
        return None if p is None else p.exitcode

    def kill(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is not None and process.is_alive():
            process.kill()
            process.join(5)

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
        # Stragglers are killed: a worker has no SIGTERM handler, so a gentler signal would
        # end it the same way.
        for name in list(self.processes):
            self.kill(name)


def make_launcher(cfg: RunConfig):
    kind = cfg.pipeline.launcher
    if kind == "serial":
        return SerialLauncher(cfg.pipeline.torch_threads)
    if kind == "local":
        return LocalLauncher()
    from hns_train.distributed.ray_launcher import RayLauncher  # ray: the config allows no other

    return RayLauncher(cfg)
