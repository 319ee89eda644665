"""Inference requests through shared memory: the observation codec of the sample path on one host.

An actor group owns one block: a file in the run's shared-memory folder (tmpfs `/dev/shm` where
the OS has one) holding `SLOTS` slots. A slot holds every array of one inference request, laid
out by `RequestLayout` from the request's one description (`contract.request_layout`, of the
run's `envs.contract.observation_shapes` and LSTM width), each field 64-byte aligned. The game
writes its observations straight into a slot (`VectorGame.step(out=...)`); the request on the
ZeroMQ socket carries only the slot's address (`ADDRESS_KEYS` in its meta: block, slot, rows),
and the policy worker reads the slot in place, so observations and LSTM states are not copied
through sockets (the state is 4 x lstm_dim floats per row: 4 KiB at 256, about nine times the
quadrant observation). Across hosts (Ray) requests carry their arrays on the wire (`wire.py`).

Invariants:
- **One writer.** Only the actor that created a block writes it, and never a slot whose request
  is unanswered: three slots cover what a group keeps alive at once (the observation it acted
  on, the next episode's first one, the finished episode's last one). A reply to a request
  that was re-sent and then overwritten no longer matches its sequence number and is ignored.
- **Readers map read-only**, only files named by a plain name (`NAME_PATTERN`) inside the run's
  folder, and only when the file has exactly the size the contract gives for the rows claimed;
  anything else is a `ContractError` and the request is dropped. Nothing is unpickled: a slot
  is raw numbers, checked by `contract.check_request` like arrays from a socket.
- The creator unlinks its block when it closes; the controller removes the folder at the end
  of a run, so blocks of a worker that died do not outlive the run. A folder's name carries its
  controller's pid: the folders of a controller that was killed (its workers die with it) are
  removed by the next run on the host.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
import re
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from hns_train.distributed.contract import ContractError, request_layout
from hns_train.distributed.run_lock import owned_folder

SLOTS = 3
ALIGN = 64  # bytes; every field starts on a cache line
MAX_ROWS = 1 << 16  # rows a request may claim (a group is worlds x agent slots)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ADDRESS_KEYS = ("block", "slot", "rows")
OPEN_BLOCKS = 256  # mappings a reader keeps open (least recently used closed first)
FOLDER_PREFIX = "hns-rows-"


def shared_folder(base: str | None = None) -> str:
    """A new private folder for a run's blocks, named after this process: in /dev/shm where it
    exists (RAM), else in the temp folder (file pages are shared through the page cache all the
    same). Folders left by controllers that no longer run are removed first."""
    if base is None:
        shm = "/dev/shm"
        base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
    return str(owned_folder(FOLDER_PREFIX, base))


@dataclass(frozen=True)
class RequestLayout:
    """Where each array of an inference request of `rows` rows lies in a slot.

    fields: (wire name, dtype, full shape) of every array, in slot order: the request's
    `contract.request_layout`."""

    fields: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
    rows: int

    @classmethod
    def of(cls, obs_shapes: Mapping[str, tuple[int, ...]], lstm_dim: int, rows: int):
        if not 0 < rows <= MAX_ROWS:
            raise ContractError(f"a shared request holds 1..{MAX_ROWS} rows, got {rows}")
        layout = request_layout(obs_shapes, int(lstm_dim), int(rows))
        return cls(
            tuple((name, dtype, shape) for name, (dtype, shape) in layout.items()), int(rows)
        )

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """Where each field starts in a slot, and (last) where the slot ends."""
        sizes = (_aligned(math.prod(shape) * dtype.itemsize) for _, dtype, shape in self.fields)
        return tuple(itertools.accumulate(sizes, initial=0))

    @property
    def slot_bytes(self) -> int:
        return self.offsets[-1]

    @property
    def block_bytes(self) -> int:
        return SLOTS * self.slot_bytes

    def views(self, buffer, slot: int) -> dict[str, np.ndarray]:
        """The arrays of `slot` as views of `buffer` (read-only when the buffer is)."""
        base = slot * self.slot_bytes
        return {
            name: np.frombuffer(
                buffer, dtype, count=math.prod(shape), offset=base + offset
            ).reshape(shape)
            for (name, dtype, shape), offset in zip(self.fields, self.offsets[:-1], strict=True)
        }


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class SharedBlock:
    """The writer's side: a block of `SLOTS` request slots that one actor group fills."""

    def __init__(self, folder: str | os.PathLike, name: str, layout: RequestLayout) -> None:
        if not NAME_PATTERN.match(name):
            raise ValueError(f"block name {name!r} must match {NAME_PATTERN.pattern}")
        self.name = name
        self.layout = layout
        self.path = Path(folder) / name
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # Reserve the pages now: on a full tmpfs (Docker gives /dev/shm 64 MB) a write to
            # a sparse file would kill the writer with SIGBUS; here it is an OSError instead.
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, layout.block_bytes)
            else:
                os.ftruncate(fd, layout.block_bytes)
            self._map = mmap.mmap(fd, layout.block_bytes)
        except OSError:  # no room: leave no half-made block behind
            self.path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        self.slots = [layout.views(self._map, s) for s in range(SLOTS)]

    def address(self, slot: int) -> dict:
        """What a request's meta carries instead of its arrays."""
        return {"block": self.name, "slot": slot, "rows": self.layout.rows}

    def close(self) -> None:
        self.slots = []
        _close(self._map)
        self.path.unlink(missing_ok=True)


class SharedReader:
    """The reader's side (policy worker): the slots that requests name, mapped read-only."""

    def __init__(
        self, folder: str | os.PathLike, obs_shapes: Mapping[str, tuple[int, ...]], lstm_dim: int
    ) -> None:
        self.folder = Path(folder)
        self.obs_shapes = dict(obs_shapes)
        self.lstm_dim = lstm_dim
        # (block, rows) -> the read-only mapping and the views of its slots
        self._open: OrderedDict[tuple[str, int], tuple[mmap.mmap, list[dict]]] = OrderedDict()

    def read(self, meta: Mapping) -> dict[str, np.ndarray]:
        """The request arrays at the address in `meta` (read-only views); ContractError when the
        address names no block of this run that fits the contract."""
        name, slot, rows = (meta.get(k) for k in ADDRESS_KEYS)
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise ContractError(f"shared block name {name!r} is not a plain file name")
        if type(slot) is not int or not 0 <= slot < SLOTS:
            raise ContractError(f"shared slot {slot!r} is not in 0..{SLOTS - 1}")
        if type(rows) is not int:
            raise ContractError(f"shared rows {rows!r} is not an int")
        key = (name, rows)
        if key not in self._open:
            layout = RequestLayout.of(self.obs_shapes, self.lstm_dim, rows)
            buffer = self._map(name, layout)
            self._open[key] = (buffer, [layout.views(buffer, s) for s in range(SLOTS)])
            while len(self._open) > OPEN_BLOCKS:
                _close(self._open.popitem(last=False)[1][0])
        self._open.move_to_end(key)
        return dict(self._open[key][1][slot])

    def _map(self, name: str, layout: RequestLayout) -> mmap.mmap:
        try:
            fd = os.open(self.folder / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as err:
            raise ContractError(f"shared block {name!r} cannot be opened: {err.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size != layout.block_bytes:
                raise ContractError(
                    f"shared block {name!r} has {size} bytes; {layout.rows} rows of this run's "
                    f"contract take {layout.block_bytes}"
                )
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def close(self) -> None:
        while self._open:
            _close(self._open.popitem()[1][0])


def _close(buffer: mmap.mmap) -> None:
    # while a view of it is referenced the mapping stays; it is released with the last view
    with contextlib.suppress(BufferError):
        buffer.close()
