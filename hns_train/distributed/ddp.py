"""Several trainer workers for one policy: torch.distributed group, whole-batch sums, agreed stop.

Rendezvous goes through the controller: it hosts a `torch.distributed.TCPStore` and hands its
address to every trainer in `spec.endpoints["ddp"]` (host, port, world size, generation). The
trainer's index is its rank. Each generation (a fresh start of all trainers after one died) uses
its own key prefix in the store, so a restarted group never meets the keys of the last one.

Collectives:
- the main group (`pipeline.ddp_backend`: auto = nccl on CUDA, gloo on CPU) carries gradients and
  normaliser moments, through `DataParallel.all_sum`, the `agents.ppo.RankSync` hook; gloo ranks
  that share a host (the local launcher, `pipeline.shared_memory`) sum through shared memory
  instead (`host_sums.py`), in the run's shared folder that `endpoints["ddp"]` names;
- a gloo side group carries the per-iteration flags (`agree`), so they never touch the GPU.

Every collective is bounded by `pipeline.ddp_timeout_s` (the process group's timeout): a rank whose
peer died or hangs raises instead of waiting forever, its process exits and the controller sees it.
A rank waiting for a slower peer is alive but silent: before such a wait (an update, or the first
agreement after a start, an update or a rollout) it says `busy` to the controller (learner.py).

Stop without a hang: a rank never leaves on its own. Each loop iteration every rank all-reduces
(MAX) two flags, [stop requested, not enough samples]; a stop requested on any rank stops every
rank at the same iteration, before any rank could enter an update the others skip. Ranks train
only when every rank has its share of the batch (`batch_chunks / n_trainers` chunks).

Every rank counts the wall and CPU seconds it spends in the agreement and the sums
(`take_collective_s`), so a pod can tell its time in collectives from simulating and learning.

Where only one copy must exist (parameter publishing, checkpoints, pool snapshots) rank 0 does it.
At start rank 0 broadcasts the model's state, so all ranks begin from the same weights and
normalisers even when they were initialised differently.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hns_train.distributed.host_sums import HostSums

log = logging.getLogger(__name__)


def make_store(host: str, timeout_s: float) -> tuple[dist.TCPStore, int]:
    """The controller's rendezvous store and its port, listening on `host` only.

    TCPStore itself would listen on every interface, unauthenticated; so the listening socket
    is made here, bound to `host`: 127.0.0.1 for one-host runs (the local launcher), the
    controller node's own address for Ray clusters, whose trainers may be on other nodes."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.bind((host.strip("[]"), 0))
        sock.listen(128)
        store = dist.TCPStore(
            host,
            sock.getsockname()[1],
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
            master_listen_fd=sock.fileno(),
        )
    except BaseException:
        sock.close()
        raise
    # The store closes this descriptor when it goes: the socket object lets go of it, or its
    # own close would meet a closed descriptor (EBADF, printed at every clean stop) or, worse,
    # one the number was reused for.
    sock.detach()
    return store, store.port


def rendezvous_info(
    host: str, port: int, world_size: int, generation: int, folder: str | None = None
) -> dict[str, Any]:
    """What the controller puts into `endpoints["ddp"]` (plain data: it crosses processes).
    `folder`: the run's shared-memory folder when every rank runs on this host, where gloo ranks
    then sum (`host_sums.py`, files named by `sums_tag`)."""
    return {
        "host": host,
        "port": int(port),
        "world_size": int(world_size),
        "generation": generation,
        "folder": folder,
    }


def sums_tag(generation: int) -> str:
    """The name of a generation's shared-memory sums in the run's folder."""
    return f"sums-g{int(generation)}"


def choose_backend(name: str, device: torch.device) -> str:
    """The collective backend for trainers on `device` (the config has checked the name)."""
    if name == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if name == "nccl" and device.type != "cuda":
        raise ValueError("pipeline.ddp_backend=nccl needs CUDA trainers; use gloo on CPU")
    return name


def rank_device(device: torch.device, rank: int) -> torch.device:
    """One GPU per rank: `cuda` without an index becomes cuda:(rank mod visible GPUs)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", rank % max(torch.cuda.device_count(), 1))
    return device


class DataParallel:
    """This trainer's membership of the group: rank, world size, flags, teardown, and the
    `agents.ppo.RankSync` hook (`all_sum`)."""

    def __init__(
        self,
        rank: int,
        info: dict[str, Any],
        device: torch.device,
        backend: str = "auto",
        timeout_s: float = 120.0,
    ) -> None:
        self.rank = int(rank)
        self.world_size = int(info["world_size"])
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"trainer rank {rank} outside 0..{self.world_size - 1}")
        self.backend = choose_backend(backend, device)
        self.device = device
        timeout = timedelta(seconds=timeout_s)
        client = dist.TCPStore(info["host"], int(info["port"]), is_master=False, timeout=timeout)
        store = dist.PrefixStore(f"hns/g{int(info.get('generation', 0))}", client)
        kwargs = {"device_id": device} if self.backend == "nccl" else {}
        dist.init_process_group(
            self.backend,
            store=store,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timeout,
            **kwargs,
        )
        self._flags = (
            dist.new_group(backend="gloo", timeout=timeout) if self.backend != "gloo" else None
        )
        # where collectives run: gloo reduces on the CPU
        self.collective_device = device if self.backend == "nccl" else torch.device("cpu")
        # ranks of one host sum through shared memory: a rank's CPU per sum stays flat in N
        self.host_sums = None
        if self.backend == "gloo" and info.get("folder"):
            self.host_sums = HostSums(
                sums_tag(info.get("generation", 0)),
                self.rank,
                self.world_size,
                timeout_s,
                directory=Path(info["folder"]),
            )
        self._spent = {"collective_s": 0.0, "collective_cpu_s": 0.0}

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self._spent["collective_s"] += time.perf_counter() - wall
            self._spent["collective_cpu_s"] += time.process_time() - cpu

    def take_collective_s(self) -> dict[str, float]:
        """Wall and process CPU seconds in the agreement and the sums since the last call
        (`collective_s`, `collective_cpu_s`): waits for slower peers included."""
        out = dict(self._spent)
        self._spent = dict.fromkeys(out, 0.0)
        return out

    def agree(self, stop: bool, ready: bool) -> tuple[bool, bool]:
        """(stop on every rank, every rank ready): two 0/1 flags, positive after a MAX
        all-reduce, or a shared-memory sum, where any rank raised them."""
        flags = torch.tensor([float(stop), float(not ready)])
        with self._timed():
            if self.host_sums is not None:
                self.host_sums.all_sum(flags)
            else:
                dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._flags)
        return bool(flags[0] > 0), not bool(flags[1] > 0)

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        with self._timed():
            if self.host_sums is not None:  # gloo ranks: through the CPU, as gloo's own
                return self.collective(tensor, self.host_sums.all_sum)
            return self.collective(tensor, lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM))

    def collective(self, tensor: torch.Tensor, op: Callable[[torch.Tensor], Any]) -> torch.Tensor:
        """`op(tensor)` in place, through a copy on `collective_device` when it lies elsewhere."""
        if tensor.device == self.collective_device:
            op(tensor)
            return tensor
        moved = tensor.to(self.collective_device)
        op(moved)
        tensor.copy_(moved)
        return tensor

    @torch.no_grad()
    def broadcast_state(self, module: torch.nn.Module) -> None:
        """Every tensor of `module.state_dict()` (weights and normaliser buffers) from rank 0."""
        for tensor in module.state_dict().values():
            self.collective(tensor, lambda t: dist.broadcast(t, src=0))

    def close(self) -> None:
        """Leave the group (after an agreed stop every rank gets here; nothing is pending; a
        second call finds no group)."""
        if self.host_sums is not None:
            self.host_sums.close()
            self.host_sums = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as err:  # a peer already gone: nothing left to tear down cleanly
                log.warning("leaving the trainer group: %s", err)
