"""Sums over the trainer ranks of one host, through shared memory.

A gloo all-reduce sends every byte through the loopback TCP stack: in its ring each rank sends
and receives 2(N-1)/N of the tensor, and each hop is a copy into and out of the kernel, so a
rank's CPU per sum grows with the number of ranks N. Measured for the model's gradient
(1,623,406 floats, bench/pod_scale.py on a 2-core Xeon, 2026-11-29): 3.9 ms of a rank's CPU at
N=2, 10.5 ms at N=16; through shared memory 2.0 and 4.4 ms. On one host the ranks share memory:

1. each rank copies its tensor into its input file, in `/dev/shm`, which every rank maps;
2. barrier; rank r adds up the r-th of N slices of every input, in rank order, into its own
   output file;
3. barrier; each rank copies the N output slices into its tensor.

Inputs and outputs are separate files because a rank may write its next input while a slower
peer still copies its last output; a rank writes its next output only after the next first
barrier, which every peer reaches after its copies.

A rank reads and writes each element a fixed number of times whatever N is, and every rank ends
with the same bits (one summation order, rank 0 first). A small tensor (at most `SMALL_BYTES`:
flags, moments) takes one barrier instead: every rank adds up every input itself, the inputs in
two halves of a file used in turn, so a rank writes a half again only after the next small sum's
barrier, which every peer reaches after reading it. The barriers pass one byte per rank
through named pipes, to rank 0 and back: a waiting rank sleeps in the kernel instead of polling,
and the pipe's hand-off orders each rank's writes to its slot before the byte it sends. Every
wait is bounded by `pipeline.ddp_timeout_s`. Files are named `<tag>-r<rank>.{in,out,small,pipe}`;
a rank maps its peers' where no peer can have closed yet (the small-sum files at its first sum,
after a barrier; inputs and outputs between a large sum's barriers), removes its own at
`close`, and the controller removes a killed group's (`remove_files`). A rank keeps open its
own files and the pipes it writes: a few descriptors per peer at most.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import select
import time
from pathlib import Path

import torch

SHARED_MEMORY = Path("/dev/shm")
SLOTS = ("in", "out", "small")
SMALL_BYTES = 32 << 10  # a sum this small (each half of the "small" file) takes one barrier
_OPEN_RETRY_S = 0.005  # while a peer's pipe does not exist yet (it is still starting)


def remove_files(directory: Path, tag: str) -> int:
    """Remove every rank's files and pipe of the group `tag` (what killed ranks left); their
    number."""
    gone = 0
    for path in directory.glob(f"{tag}-r*"):
        try:
            path.unlink()
            gone += 1
        except FileNotFoundError:
            pass
    return gone


class HostSums:
    """One rank's side of the group's shared-memory sums (`all_sum`)."""

    def __init__(
        self,
        tag: str,
        rank: int,
        world_size: int,
        timeout_s: float,
        directory: Path = SHARED_MEMORY,
        small_bytes: int = SMALL_BYTES,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.small_bytes = small_bytes
        self._small_sums = 0  # small sums so far: which half of the "small" file is next
        self.prefix = Path(directory) / tag
        self._sends: dict[int, int] = {}  # peer rank -> write end of its pipe
        self._met = world_size == 1  # every peer's files exist and its small file is mapped
        self._views: dict[tuple[int, str, torch.dtype], torch.Tensor] = {}
        self._own = {  # this rank's input, output and small-sum files
            kind: os.open(self._path(rank, kind), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            for kind in SLOTS
        }
        os.ftruncate(self._own["small"], max(2 * small_bytes, 1))  # before a peer maps it
        os.mkfifo(self._path(rank, "pipe"), 0o600)
        # read and write: the pipe never reads as closed, and opening it never blocks
        self._pipe = os.open(self._path(rank, "pipe"), os.O_RDWR | os.O_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(self._pipe, select.POLLIN)

    def _path(self, rank: int, kind: str) -> Path:
        return Path(f"{self.prefix}-r{rank}.{kind}")

    # ------------------------------------------------------------------ the sum
    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` (on the CPU) becomes the sum of every rank's `tensor`, in place."""
        if tensor.device.type != "cpu":
            raise ValueError(f"shared-memory sums take CPU tensors, not {tensor.device}")
        flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()
        size = flat.numel()
        if size == 0:  # every rank sums the same shapes, so every rank skips it
            return tensor
        if not self._met:
            # Every rank has made its files: map the peers' small-sum files now, while no peer
            # can have closed (past a small sum's only barrier, one done with its sums may).
            # Inputs and outputs are mapped between a large sum's barriers, where none can.
            self._barrier()
            for r in range(self.world_size):
                self._slot(r, "small", torch.uint8, 2 * self.small_bytes)
            self._met = True
        if size * flat.element_size() <= self.small_bytes:
            self._small_sum(flat)
        else:
            self._large_sum(flat)
        if flat.data_ptr() != tensor.data_ptr():
            tensor.copy_(flat.view_as(tensor))
        return tensor

    def _small_sum(self, flat: torch.Tensor) -> None:
        start = self._small_sums % 2 * self.small_bytes
        self._small_sums += 1
        end = start + flat.numel() * flat.element_size()
        inputs = [
            self._slot(r, "small", torch.uint8, 2 * self.small_bytes)[start:end].view(flat.dtype)
            for r in range(self.world_size)
        ]
        inputs[self.rank].copy_(flat)
        self._barrier()  # every input is written
        total = inputs[0].clone()
        for part in inputs[1:]:
            total.add_(part)
        flat.copy_(total)

    def _large_sum(self, flat: torch.Tensor) -> None:
        n, size = self.world_size, flat.numel()
        bounds = [size * r // n for r in range(n + 1)]
        self._slot(self.rank, "in", flat.dtype, size).copy_(flat)
        out = self._slot(self.rank, "out", flat.dtype, size)
        self._barrier()  # every input holds its rank's tensor
        lo, hi = bounds[self.rank], bounds[self.rank + 1]
        inputs = [self._slot(r, "in", flat.dtype, size) for r in range(n)]
        outputs = [self._slot(r, "out", flat.dtype, size) for r in range(n)]
        acc = out[lo:hi]
        acc.copy_(inputs[0][lo:hi])
        for slot in inputs[1:]:
            acc.add_(slot[lo:hi])
        self._barrier()  # every output slice is written
        for r, slot in enumerate(outputs):
            part = slice(bounds[r], bounds[r + 1])
            flat[part].copy_(slot[part])

    def _slot(self, rank: int, kind: str, dtype: torch.dtype, count: int) -> torch.Tensor:
        """The first `count` elements of `rank`'s file `kind` as `dtype`. This rank's own files
        grow to hold them; a peer's input grew before the first barrier, its output before the
        first barrier too (every rank sums the same shapes in the same order)."""
        key = (rank, kind, dtype)
        view = self._views.get(key)
        if view is not None and view.numel() >= count:
            return view[:count]
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = count * itemsize
        own = rank == self.rank
        fd = self._own[kind] if own else os.open(self._path(rank, kind), os.O_RDWR)
        try:
            if own:
                os.ftruncate(fd, max(nbytes, os.fstat(fd).st_size))
            # whole elements only: a peer ahead of this rank may have grown it to any length
            length = os.fstat(fd).st_size // itemsize * itemsize
            if length < nbytes:
                raise RuntimeError(
                    f"rank {rank}'s {kind} file holds {length} bytes, {nbytes} needed: the "
                    "ranks' sums are out of step"
                )
            mapped = mmap.mmap(fd, length)  # the map keeps the file; the descriptor can go
        finally:
            if not own:
                os.close(fd)
        # a shorter, older map lives on while views of it do; the pages are the file's own
        view = torch.frombuffer(mapped, dtype=torch.uint8).view(dtype)
        self._views[key] = view
        return view[:count]

    # ------------------------------------------------------------------ the barrier
    def _barrier(self) -> None:
        if self.world_size == 1:
            return
        deadline = time.monotonic() + self.timeout_s
        if self.rank == 0:
            self._receive(self.world_size - 1, deadline)
            for peer in range(1, self.world_size):
                self._send(peer, deadline)
        else:
            self._send(0, deadline)
            self._receive(1, deadline)

    def _receive(self, count: int, deadline: float) -> None:
        while count:
            # poll, not select: select cannot wait on a descriptor numbered past 1023
            ready = self._poll.poll(max(deadline - time.monotonic(), 0) * 1e3)
            if not ready:
                raise TimeoutError(
                    f"rank {self.rank}: {count} of the group's {self.world_size} ranks did not "
                    f"reach the sum within pipeline.ddp_timeout_s={self.timeout_s:g}"
                )
            try:
                count -= len(os.read(self._pipe, count))
            except BlockingIOError:  # another wake-up took it; wait again
                continue

    def _send(self, peer: int, deadline: float) -> None:
        fd = self._sends.get(peer)
        while fd is None:
            try:
                fd = os.open(self._path(peer, "pipe"), os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:  # not made yet (ENOENT) or not open yet (ENXIO)
                if err.errno not in (errno.ENOENT, errno.ENXIO):
                    raise
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rank {self.rank}: rank {peer} did not open its end of the sums within "
                        f"pipeline.ddp_timeout_s={self.timeout_s:g}"
                    ) from None
                time.sleep(_OPEN_RETRY_S)
            else:
                self._sends[peer] = fd
        os.write(fd, b"\0")

    def close(self) -> None:
        """Close this rank's pipes and remove its files (views of the maps may outlive it)."""
        for fd in [*self._sends.values(), self._pipe, *self._own.values()]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._sends.clear()
        for kind in (*SLOTS, "pipe"):
            self._path(self.rank, kind).unlink(missing_ok=True)
