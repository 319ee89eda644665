"""The run's message contract, checked where each message is received.

`wire.decode` guarantees a well-formed message (header, dtypes, buffer sizes); this module checks
that a well-formed message is also *right* for this run before anything uses it: the keys,
dtypes and shapes the run's config implies (observation layout, LSTM size, chunk length, action
sizes), finite floats, integer codes and counters in range, and the types of every heartbeat
field the controller reads. A message that fails raises `ContractError` naming the field and
what was expected; receivers drop it, count it, and log through a `DropLog` (at most one line
per `DropLog.every_s` seconds per receiver, with the count of drops since the last line), so a
flood of bad messages can neither crash a worker nor fill a disk with log lines.

| stream    | receiver       | check                                                        |
|-----------|----------------|--------------------------------------------------------------|
| inference | policy worker  | `check_request`: layout, state (rows, 4, H), codes >= -3     |
| inference | actor          | `check_reply`: actions in range, finite logp/values/state    |
| samples   | trainer        | `check_chunk`: exact obs keys, T = chunk_len, H, finite      |
| params    | policy, eval   | `check_params`: the model's names, shapes and finite values  |
| control   | controller     | `check_heartbeat` / `check_hello` per worker kind            |
| control   | trainer        | `check_counters`                                              |
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hns_train.agents.opponents import NOOP
from hns_train.distributed.wire import short_repr

log = logging.getLogger(__name__)

MIN_CODE = NOOP  # the most negative controller code on the wire
DROP_LOG_EVERY_S = 10.0
RECENT_REASONS = 16  # reasons a DropLog keeps for inspection


class ContractError(ValueError):
    """A well-formed message that does not fit the run's contract; the text names the field."""


class DropLog:
    """Counts dropped messages of one receiver and logs them at a bounded rate.

    The first drop is logged at once; later ones at most every `every_s` seconds, as one line
    carrying how many were dropped since the previous line and the latest reason."""

    def __init__(self, what: str, every_s: float = DROP_LOG_EVERY_S) -> None:
        self.what = what
        self.every_s = every_s
        self.total = 0
        self.recent: deque[str] = deque(maxlen=RECENT_REASONS)  # newest last
        self._unlogged = 0
        self._last_line = -math.inf

    def drop(self, reason: str, peer: Any = None) -> None:
        self.total += 1
        self._unlogged += 1
        self.recent.append(reason)
        now = time.monotonic()
        if now - self._last_line < self.every_s:
            return
        who = f" from {peer!r}" if peer is not None else ""
        log.warning(
            "%s: dropped %d message(s) since the last report (%d in all); latest%s: %s",
            self.what,
            self._unlogged,
            self.total,
            who,
            reason,
        )
        self._unlogged = 0
        self._last_line = now


# ----------------------------------------------------------------------------- arrays

# the dtype kinds an array may have where a layout says float, bool or integer
_KINDS = {
    "f": ("f", "a float dtype"),
    "b": ("b", "bool"),
    "i": ("iu", "an integer dtype"),
    "u": ("iu", "an integer dtype"),
}


def request_layout(
    obs_shapes: Mapping[str, Sequence[int]], lstm_dim: int, rows: int
) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, shape) of every array of an inference request of `rows` agent rows, in the order
    a shared-memory slot holds them (`shared_rows.RequestLayout`): the observations (float32,
    per-row shapes `obs_shapes`), the LSTM states, the episode-start flags and the controller
    codes."""
    f32 = np.dtype(np.float32)
    out = {f"obs/{k}": (f32, (rows, *map(int, s))) for k, s in obs_shapes.items()}
    out["state"] = (f32, (rows, 4, lstm_dim))
    out["episode_start"] = (np.dtype(np.bool_), (rows,))
    out["code"] = (np.dtype(np.int64), (rows,))
    return out


def reply_layout(
    rows: int, lstm_dim: int, n_actions: int
) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, shape) of every array of the reply to an inference request of `rows` rows."""
    f32 = np.dtype(np.float32)
    return {
        "actions": (np.dtype(np.int64), (rows, n_actions)),
        "logp": (f32, (rows,)),
        "values": (f32, (rows,)),
        "state": (f32, (rows, 4, lstm_dim)),
    }


def _kind(name: str, arr: np.ndarray, kinds: str, what: str) -> None:
    if arr.dtype.kind not in kinds:
        raise ContractError(f"{name} has dtype {arr.dtype}; expected {what}")


def _finite(name: str, arr: np.ndarray) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ContractError(f"{name} holds non-finite values (NaN or inf)")


def _fields(
    arrays: Mapping[str, np.ndarray],
    layout: Mapping[str, tuple[np.dtype, tuple]],
    what: str,
    prefix: str = "",
) -> None:
    """Each array `layout` names is in `arrays` (else `what` lacks it), with the layout's dtype
    kind and exact shape, and finite where it is float."""
    for name, (dtype, shape) in layout.items():
        if name not in arrays:
            raise ContractError(f"{what} lacks {name!r}")
        arr, label = arrays[name], prefix + name
        _kind(label, arr, *_KINDS[dtype.kind])
        if tuple(arr.shape) != tuple(shape):
            raise ContractError(f"{label} has shape {tuple(arr.shape)}; expected {tuple(shape)}")
        _finite(label, arr)


def _observations(
    obs: Mapping[str, np.ndarray], layout, batch_ndim: int
) -> tuple[tuple[int, ...], dict[str, np.ndarray]]:
    """(batch shape, the observations on exactly the layout's keys).

    Entity types with zero rows in this game may come along empty (the layout allows that);
    they are left out of what is returned, so that batches of messages always stack."""
    try:
        batch = layout.check(obs, batch_ndim)
    except ValueError as err:
        raise ContractError(str(err)) from None
    kept = {k: obs[k] for k in layout.shapes}
    for key, value in kept.items():
        _kind(f"obs/{key}", value, "fiub", "a numeric dtype")
        _finite(f"obs/{key}", value)
    return batch, kept


def _action_range(actions: np.ndarray, sizes: Sequence[int]) -> None:
    if actions.size and ((actions < 0).any() or (actions >= np.asarray(sizes)).any()):
        raise ContractError(f"actions holds actions outside 0..{[s - 1 for s in sizes]}")


def check_request(arrays: Mapping[str, np.ndarray], layout, lstm_dim: int) -> dict[str, np.ndarray]:
    """An inference request (actor -> policy worker); returns its arrays on exactly the
    layout's observation keys (see `_observations`)."""
    obs = {k[4:]: v for k, v in arrays.items() if k.startswith("obs/")}
    extra = sorted(set(arrays) - {f"obs/{k}" for k in obs} - {"state", "episode_start", "code"})
    if extra:
        raise ContractError(f"unexpected arrays {extra} in an inference request")
    (rows,), obs = _observations(obs, layout, 1)
    _fields(arrays, request_layout({}, lstm_dim, rows), "inference request")
    code = arrays["code"]
    if code.size and code.min() < MIN_CODE:
        raise ContractError(f"code holds {int(code.min())}; controller codes are >= {MIN_CODE}")
    return {
        **{f"obs/{k}": v for k, v in obs.items()},
        **{k: arrays[k] for k in ("state", "episode_start", "code")},
    }


def check_reply(
    arrays: Mapping[str, np.ndarray], rows: int, lstm_dim: int, action_sizes: Sequence[int]
) -> None:
    """An inference reply (policy worker -> actor) for a request of `rows` rows."""
    _fields(arrays, reply_layout(rows, lstm_dim, len(action_sizes)), "inference reply")
    _action_range(arrays["actions"], action_sizes)


def check_chunk(
    arrays: Mapping[str, np.ndarray],
    layout,
    *,
    chunk_len: int,
    bptt_len: int,
    lstm_dim: int,
    action_sizes: Sequence[int],
):
    """A sample chunk (actor -> trainer); returns the `Chunk`."""
    from hns_train.agents.chunks import Chunk, chunk_layout

    try:
        chunk = Chunk.from_arrays(arrays).validate(len(action_sizes))
    except (KeyError, ValueError) as err:
        raise ContractError(str(err)) from None
    steps, B = chunk.actions.shape[:2]
    if steps != chunk_len:
        raise ContractError(f"chunk has {steps} steps; pipeline.chunk_len is {chunk_len}")
    if B < 1:
        raise ContractError("chunk has no agent columns")
    _, chunk.obs = _observations(chunk.obs, layout, 2)
    expected = chunk_layout({}, steps, B, bptt_len, (4, lstm_dim), len(action_sizes))
    _fields(chunk.to_arrays(), expected, "chunk")
    _action_range(chunk.actions, action_sizes)
    if chunk.policy_version.min() < 0:
        raise ContractError("policy_version holds negative versions")
    return chunk


def check_params(message: Any, layout: Mapping[str, tuple[np.dtype, tuple]]) -> Any:
    """A parameter message (trainer -> policy/eval), as its stream's `check`: exactly the model's
    names and shapes, finite; returns the message. Any version passes, older ones too: a
    restarted trainer publishes from its last checkpoint.

    `layout` is the model's `param_layout`; a float tensor needs float values, an integer one
    integer values."""
    arrays = message.arrays
    missing = sorted(set(layout) - set(arrays))
    extra = sorted(set(arrays) - set(layout))
    if missing or extra:
        raise ContractError(
            f"parameters differ from the model: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    _fields(arrays, layout, "parameters", prefix="parameter ")
    return message


def state_dict_to_arrays(state: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A state dict as a parameter message's arrays: float tensors as float32, integer counters
    as int64; the receiver rebuilds tensors on its own device (`policy.load_params`)."""
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def param_layout(model: torch.nn.Module) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, shape) of every array of a parameter message of `model`."""
    arrays = state_dict_to_arrays(model.state_dict())
    return {name: (a.dtype, a.shape) for name, a in arrays.items()}


# ----------------------------------------------------------------------------- control


def _int(meta: Mapping, key: str, low: int | None = 0, required: bool = False) -> None:
    if key not in meta:
        if required:
            raise ContractError(f"{key!r} is missing")
        return
    value = meta[key]
    if type(value) is not int or (low is not None and value < low):
        bound = "" if low is None else f" >= {low}"
        raise ContractError(f"{key}={short_repr(value)} must be an int{bound}")


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _num(meta: Mapping, key: str, low: float | None = None, optional_none: bool = False) -> None:
    if key not in meta or (optional_none and meta[key] is None):
        return
    value = meta[key]
    if not _number(value) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low}"
        raise ContractError(f"{key}={short_repr(value)} must be a finite number{bound}")


def _numbers(meta: Mapping, key: str, length: int | None = None) -> None:
    if key not in meta:
        return
    value = meta[key]
    if not isinstance(value, list) or not all(_number(v) for v in value):
        raise ContractError(f"{key} must be a list of finite numbers, got {short_repr(value)}")
    if length is not None and len(value) != length:
        raise ContractError(f"{key} has {len(value)} numbers; expected {length}")


def _str_map(meta: Mapping, key: str, check, what: str) -> None:
    if key not in meta:
        return
    value = meta[key]
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and check(v) for k, v in value.items()
    ):
        raise ContractError(f"{key} must map names to {what}, got {short_repr(value)}")


def check_hello(meta: Mapping) -> None:
    _int(meta, "pid", 1, required=True)
    _int(meta, "incarnation", 0)


def check_heartbeat(kind: str, meta: Mapping, run_dir: str | Path, n_stats: int) -> None:
    """The counters of one worker kind's heartbeat (see each worker's `counters()`)."""
    _num(meta, "time")
    _num(meta, "cpu_s", 0.0)  # process CPU seconds since the previous heartbeat (worker.py)
    if kind == "actor":
        for key in (
            "frames",
            "episodes",
            "chunks",
            "queued_chunks",
            "physics_warnings",
            "resent",
            "rejected",
        ):
            _int(meta, key)
        _int(meta, "version_seen", -1)
        _numbers(meta, "stat_sums", n_stats)
    elif kind == "policy":
        _int(meta, "version", -1)
        for key in ("rows", "batches", "forwards", "rejected"):
            _int(meta, key)
        for key in ("unknown_snapshots", "snapshot_loads"):
            _int(meta, key)
        _num(meta, "busy_s", 0.0)
    elif kind == "trainer":
        for key in (
            "version",
            "steps",
            "received",
            "dropped_stale",
            "rejected",
            "buffer",
            "skipped_updates",
            "samples",
            "new_samples",
        ):
            _int(meta, key)
        _num(meta, "update_s", 0.0)
        _num(meta, "staleness", optional_none=True)
        _num(meta, "reuse", 0.0, optional_none=True)
        _str_map(meta, "stats", _number, "finite numbers")
        _numbers(meta, "stat_sums", n_stats)
        if "frames" in meta:  # a pod (pod_worker.py) also reports what actors do
            for key in ("frames", "episodes", "physics_warnings"):
                _int(meta, key)
            for key in ("sim_s", "act_s", "learn_s"):
                _num(meta, key, 0.0)
    elif kind == "eval":
        _int(meta, "version", -1)
        _int(meta, "matches")
        _int(meta, "rounds")
        _num(meta, "round_s", 0.0)
        _str_map(
            meta,
            "rating",
            lambda v: isinstance(v, list) and len(v) == 2 and all(_number(x) for x in v),
            "[mu, sigma] pairs of finite numbers",
        )
        _str_map(meta, "win_rate", lambda v: _number(v) and 0 <= v <= 1, "rates in [0, 1]")
        _paths(meta, "new_videos", run_dir)
        _paths(meta, "new_replays", run_dir)
        board = meta.get("leaderboard")
        if board is not None and not (
            isinstance(board, dict)
            and isinstance(board.get("columns"), list)
            and isinstance(board.get("rows"), list)
            and all(isinstance(c, str) for c in board["columns"])
            and all(
                isinstance(r, list)
                and len(r) == len(board["columns"])
                and all(v is None or type(v) is str or _number(v) for v in r)
                for r in board["rows"]
            )
        ):
            raise ContractError(f"leaderboard must be {{columns, rows}}, got {short_repr(board)}")


def _paths(meta: Mapping, key: str, run_dir: str | Path) -> None:
    """File paths a worker reports must lie inside the run directory."""
    if key not in meta:
        return
    value = meta[key]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ContractError(f"{key} must be a list of paths, got {short_repr(value)}")
    root = Path(run_dir).resolve()
    for p in value:
        if not Path(p).resolve().is_relative_to(root):
            raise ContractError(f"{key} names {short_repr(p)}, outside the run directory {root}")


def check_counters(meta: Mapping) -> None:
    """The run's counters (controller -> trainer)."""
    _int(meta, "frames", required=True)
    _int(meta, "episodes", required=True)
    if "wall_clock_s" not in meta:
        raise ContractError("'wall_clock_s' is missing")
    _num(meta, "wall_clock_s", 0.0)
    _num(meta, "stop_in_s", optional_none=True)  # None without stop.minutes; < 0 once past it
