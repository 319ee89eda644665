"""Checkpoints without pickle: atomic single-file save, verified load, and a keep-newest-N folder.

A checkpoint file is an envelope around a `torch.save` payload:

    b"HNSCKPT1" | payload length (uint64 LE) | SHA-256 of the payload (32 bytes) | payload

The payload is a dict {"format", "format_version", "meta_json", "state"} where `state` is a
nested structure of tensors, numbers, strings, lists and dicts (state dicts of modules and
optimisers fit as they are; numpy arrays are turned into tensors on save) and `meta` is any
JSON-able dict, stored as JSON text. Loading checks magic, length and hash before anything is
parsed, then uses `torch.load(weights_only=True)`, so a truncated or corrupted file is detected
and a file holding an arbitrary pickled object is refused (`CheckpointError`, a ValueError):
reading a checkpoint can never run code.

Writes are atomic (`hns_train.atomic_file`): readers see the old file or the new one, never
half of one.

Public API:
- `save_checkpoint(path, state, meta=None) -> Path`, `load_checkpoint(path, map_location="cpu")
  -> Checkpoint(state, meta, path)`.
- `Counters(version, frames, episodes, wall_clock_s)`: the run's progress counters.
- `capture_rng_state(np_rng=None)` / `restore_rng_state(saved, np_rng=None)`: python, numpy
  (global and an optional Generator) and torch (CPU and CUDA) RNG states as tensors + JSON.
- `training_state(ppo, counters, config=None, np_rng=None) -> (state, meta)` and
  `restore_training(checkpoint, ppo, np_rng=None) -> Counters` (the config is `meta["config"]`):
  weights, optimiser moments, normalisers (buffers of `ActorCritic`), counters, RNG states, the
  network's kind and settings (`meta["network"]`, read by `network_kinds.network_config`) and
  the resolved config in one checkpoint.
- `CheckpointDir(folder, keep=3, prefix="ckpt_")`: `save(step, state, meta)` writes
  `<prefix><step>.pt` and prunes to the newest `keep`, after checking that the disk has room
  for `ROOM_FOR` checkpoints of its size (else `NoRoomError`, an OSError with errno ENOSPC, and
  nothing is written: a full disk never costs the newest good checkpoint); `room_problem(folder,
  size)` is that check; `latest()` returns the newest checkpoint that loads, skipping (with a
  logged warning) any that is truncated or corrupt; `steps()` lists the numbered files, named
  as `path_for` names them (ten digits; the pool lists its `snapshot_<version>.pt` files with
  one).
- `resolve_checkpoint(path) -> Path`: the checkpoint a file, a checkpoints folder or a run
  directory names (every command that takes one goes through it); ValueError says why none.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hns_train.agents.network_kinds import network_record
from hns_train.atomic_file import atomic_write_bytes

log = logging.getLogger(__name__)

MAGIC = b"HNSCKPT1"
HEADER = struct.Struct("<8sQ32s")  # magic, payload length, sha256
FORMAT = "hns_train.checkpoint"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt, of another format, or unsafe."""


class NoRoomError(OSError):
    """The disk of a checkpoint folder has no room for the checkpoints a run needs (ENOSPC)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror


ROOM_FOR = 2  # checkpoints a run must have room for: the next one, and the one after it


def disk_full(err: BaseException) -> bool:
    """Whether `err` says a write found the disk full (an OSError, or SQLite's own word)."""
    if isinstance(err, OSError):
        return err.errno == errno.ENOSPC
    return getattr(err, "sqlite_errorname", "") == "SQLITE_FULL"


@dataclass
class Checkpoint:
    state: dict[str, Any]
    meta: dict[str, Any]
    path: Path | None = None


# ----------------------------------------------------------------------------- single files


def _to_safe(value: Any, where: str) -> Any:
    """Copy `value` keeping only types `torch.load(weights_only=True)` accepts."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise ValueError(f"checkpoint state {where}: object arrays cannot be saved")
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise ValueError(f"checkpoint state {where}: key {k!r} must be str or int")
            out[k] = _to_safe(v, f"{where}/{k}")
        return out
    if isinstance(value, (list, tuple)):
        items = [_to_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    raise ValueError(
        f"checkpoint state {where}: {type(value).__name__} is not allowed; use tensors, numpy "
        "arrays, numbers, strings, None, lists, tuples and dicts"
    )


def save_checkpoint(
    path: str | os.PathLike, state: Mapping[str, Any], meta: Mapping[str, Any] | None = None
) -> Path:
    """Atomically write `state` (tensors etc.) and JSON-able `meta` to `path`."""
    return atomic_write_bytes(path, encode_checkpoint(state, meta))


def room_problem(folder: str | os.PathLike, checkpoint_bytes: int) -> str | None:
    """Why `folder` has no room for `ROOM_FOR` checkpoints of `checkpoint_bytes`, or None."""
    folder = Path(folder)
    on_disk = folder
    while not on_disk.exists() and on_disk != on_disk.parent:  # a folder not made yet
        on_disk = on_disk.parent
    free = shutil.disk_usage(on_disk).free
    needed = ROOM_FOR * checkpoint_bytes
    if free >= needed:
        return None
    mib = 1 << 20
    return (
        f"no room for checkpoints in {folder}: {free / mib:.1f} MiB free, {needed / mib:.1f} MiB "
        f"needed ({ROOM_FOR} checkpoints of {checkpoint_bytes / mib:.1f} MiB)"
    )


def encode_checkpoint(state: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of a checkpoint file: header and verified payload."""
    try:
        meta_json = json.dumps(dict(meta or {}), sort_keys=True)
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint meta must be JSON-serialisable: {e}") from e
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "meta_json": meta_json,
        "state": _to_safe(dict(state), "state"),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    header = HEADER.pack(MAGIC, len(body), hashlib.sha256(body).digest())
    return header + body


def _verified_body(path: Path) -> bytes:
    """The payload bytes after checking magic, length and SHA-256 (nothing is parsed)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from e
    if len(raw) < HEADER.size:
        raise CheckpointError(f"checkpoint {path} is truncated ({len(raw)} bytes)")
    magic, length, digest = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise CheckpointError(f"{path} is not an hns_train checkpoint (bad magic {magic!r})")
    body = raw[HEADER.size :]
    if len(body) != length:
        raise CheckpointError(
            f"checkpoint {path} is truncated or padded: payload has {len(body)} bytes, "
            f"header says {length}"
        )
    if hashlib.sha256(body).digest() != digest:
        raise CheckpointError(f"checkpoint {path} is corrupt (SHA-256 mismatch)")
    return body


def _read_payload(path: Path, map_location: Any) -> dict[str, Any]:
    body = _verified_body(path)
    try:
        payload = torch.load(io.BytesIO(body), map_location=map_location, weights_only=True)
    except Exception as e:  # UnpicklingError for disallowed globals, RuntimeError for bad zips
        raise CheckpointError(
            f"checkpoint {path} was refused by the safe loader (weights_only): {e}"
        ) from e
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} does not hold an {FORMAT} payload")
    if payload.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {payload.get('format_version')}; "
            f"this code reads version {FORMAT_VERSION}"
        )
    return payload


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> Checkpoint:
    """Verify and load a checkpoint; raises `CheckpointError` for anything but a valid file."""
    path = Path(path)
    payload = _read_payload(path, map_location)
    try:
        meta = json.loads(payload["meta_json"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} has unreadable metadata: {e}") from e
    state = payload.get("state")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} has no state dict")
    return Checkpoint(state=state, meta=meta, path=path)


# ----------------------------------------------------------------------------- training state


@dataclass
class Counters:
    """Progress of a run, on the paper's axes. `version` counts optimisation steps."""

    version: int = 0
    frames: int = 0
    episodes: int = 0
    wall_clock_s: float = 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counters:
        """The counters `data` holds, each as its field's type (a missing one: 0)."""
        return cls(**{f.name: type(f.default)(data.get(f.name, f.default)) for f in fields(cls)})


def capture_rng_state(np_rng: np.random.Generator | None = None) -> dict[str, Any]:
    """RNG states as tensors and JSON-able values (no pickled objects)."""
    # The global numpy RNG is captured on purpose: third-party code may still draw from it.
    legacy = np.random.get_state(legacy=False)  # noqa: NPY002
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy_global": {
            "key": torch.from_numpy(legacy["state"]["key"].astype(np.int64)),
            "pos": int(legacy["state"]["pos"]),
            "has_gauss": int(legacy["has_gauss"]),
            "gauss": float(legacy["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = list(torch.cuda.get_rng_state_all())
    if np_rng is not None:
        state["numpy_generator"] = json.dumps(np_rng.bit_generator.state)
    return state


def restore_rng_state(saved: Mapping[str, Any], np_rng: np.random.Generator | None = None) -> None:
    """Undo `capture_rng_state`: global python/numpy/torch RNGs, and `np_rng` when given."""
    py = saved["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["internal"]), py["gauss"]))
    legacy = saved["numpy_global"]
    np.random.set_state(  # noqa: NPY002
        (
            "MT19937",
            legacy["key"].numpy().astype(np.uint32),
            int(legacy["pos"]),
            int(legacy["has_gauss"]),
            float(legacy["gauss"]),
        )
    )
    torch.set_rng_state(saved["torch"].to(torch.uint8))
    if "torch_cuda" in saved and torch.cuda.is_available():
        cuda = [s.to(torch.uint8) for s in saved["torch_cuda"]]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            log.warning(
                "checkpoint has %d CUDA RNG states, this machine %d devices; CUDA RNG not restored",
                len(cuda),
                torch.cuda.device_count(),
            )
    if np_rng is not None:
        if "numpy_generator" not in saved:
            raise ValueError("checkpoint holds no numpy Generator state to restore into np_rng")
        np_rng.bit_generator.state = json.loads(saved["numpy_generator"])


def training_state(
    ppo: Any,
    counters: Counters,
    config: Mapping[str, Any] | None = None,
    np_rng: np.random.Generator | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, meta) for `save_checkpoint`: PPO (weights, normalisers, optimiser), RNG states;
    counters and the resolved config go into the JSON metadata."""
    counters = Counters(**asdict(counters))
    counters.version = int(ppo.version)  # the trainer's step count is the source of truth
    state = {"ppo": ppo.state_dict(), "rng": capture_rng_state(np_rng)}
    meta = {
        "kind": "training",
        "counters": asdict(counters),
        "config": None if config is None else dict(config),
        # the network the weights belong to (kind and settings): what a loader builds
        "network": network_record(ppo.model.config),
    }
    return state, meta


def restore_training(
    checkpoint: Checkpoint,
    ppo: Any,
    np_rng: np.random.Generator | None = None,
) -> Counters:
    """Load a `training_state` checkpoint into `ppo` (and the RNGs); returns its counters."""
    if checkpoint.meta.get("kind") != "training" or "ppo" not in checkpoint.state:
        raise ValueError(
            f"checkpoint {checkpoint.path} is not a training checkpoint "
            f"(kind={checkpoint.meta.get('kind')!r})"
        )
    ppo.load_state_dict(checkpoint.state["ppo"])
    if "rng" in checkpoint.state:
        restore_rng_state(checkpoint.state["rng"], np_rng)
    return Counters.from_dict(checkpoint.meta.get("counters", {}))


# ----------------------------------------------------------------------------- numbered folder


class CheckpointDir:
    """`run_dir/checkpoints`: numbered checkpoints `ckpt_<step>.pt`, the newest `keep` kept.
    With another `prefix` it lists other numbered files of this format (the pool's
    `snapshot_<version>.pt`); only `save` prunes."""

    def __init__(self, folder: str | os.PathLike, keep: int = 3, prefix: str = "ckpt_") -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.folder = Path(folder)
        self.keep = keep
        self.prefix = prefix
        # only the names `path_for` writes: ten digits, more without leading zeros
        self._name = re.compile(rf"{re.escape(prefix)}(\d{{10}}|[1-9]\d{{10,}})\.pt")
        self.skipped: list[str] = []
        self.folder.mkdir(parents=True, exist_ok=True)

    def path_for(self, step: int) -> Path:
        if step < 0:
            raise ValueError(f"checkpoint step must be >= 0, got {step}")
        return self.folder / f"{self.prefix}{int(step):010d}.pt"

    def steps(self) -> list[int]:
        """Steps of the numbered files present, oldest first (validity not checked). A file
        named at another width (`ckpt_2.pt`) is not listed: it would be opened as `path_for`'s
        name, which is not there (or is another file)."""
        found = (self._name.fullmatch(p.name) for p in self.folder.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def save(
        self, step: int, state: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> Path:
        """Write `ckpt_<step>.pt` and prune; with no room for `ROOM_FOR` checkpoints of its
        size, raise `NoRoomError` before writing anything (the newest good one is kept)."""
        data = encode_checkpoint(state, {**dict(meta or {}), "step": step})
        problem = room_problem(self.folder, len(data))
        if problem:
            raise NoRoomError(problem)
        path = atomic_write_bytes(self.path_for(step), data)
        self.prune()
        return path

    def newest_size(self) -> int | None:
        """Bytes of the newest numbered file (the size the next checkpoint will have)."""
        for step in reversed(self.steps()):
            try:
                return self.path_for(step).stat().st_size
            except OSError:
                continue
        return None

    def prune(self) -> None:
        """Delete all but the newest `keep` numbered files; if none of those verifies, the
        newest older file that does is kept too, so a bad write never costs the last good one."""
        steps = self.steps()
        kept, doomed = steps[-self.keep :], steps[: -self.keep]
        if not doomed:
            return
        if self.newest_valid(kept) is None:
            rescue = self.newest_valid(doomed)
            doomed = [s for s in doomed if s != rescue]
        for step in doomed:
            self.path_for(step).unlink(missing_ok=True)

    def newest_valid(self, steps: list[int]) -> int | None:
        """The newest of `steps` whose file verifies (its header and SHA-256; nothing loaded);
        the reasons newer ones failed are kept in `skipped` (newest first)."""
        self.skipped = []
        for step in reversed(steps):
            try:
                _verified_body(self.path_for(step))
                return step
            except CheckpointError as e:
                self.skipped.append(str(e))
        return None

    def latest(self, map_location: Any = "cpu") -> Checkpoint | None:
        """The newest checkpoint that loads; broken ones are skipped with a warning."""
        for step in reversed(self.steps()):
            path = self.path_for(step)
            try:
                return load_checkpoint(path, map_location)
            except CheckpointError as e:
                log.warning("skipping unusable checkpoint: %s", e)
        return None


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint file `path` names: the file itself, else the newest one that verifies in a
    checkpoints folder or a run directory's `checkpoints/`. Where there is none, ValueError says
    what is there instead (nothing, no checkpoint files, or why each file is unusable); a
    caller adds what its user can do about it."""
    path = Path(path)
    if path.is_file():
        return path
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if not folder.is_dir():
        raise ValueError(f"{path}: no such file or directory")
    found = CheckpointDir(folder)
    step = found.newest_valid(found.steps())
    if step is None:
        why = "; ".join(found.skipped) or "no checkpoint files named ckpt_<10-digit step>.pt"
        raise ValueError(f"{folder}: no usable checkpoint: {why}")
    if found.skipped:
        log.warning("skipping unusable checkpoints newer than %s", found.path_for(step))
    return found.path_for(step)
