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


def _kind(name: str, arr: np.ndarray, kinds: str, what: str) -> None:
    if arr.dtype.kind not in kinds:
        raise ContractError(f"{name} has dtype {arr.dtype}; expected {what}")


def _finite(name: str, arr: np.ndarray) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ContractError(f"{name} holds non-finite values (NaN or inf)")


def _shape(name: str, arr: np.ndarray, shape: tuple) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise ContractError(f"{name} has shape {tuple(arr.shape)}; expected {tuple(shape)}")


def _float(name: str, arr: np.ndarray, shape: tuple | None = None) -> None:
    _kind(name, arr, "f", "a float dtype")
    if shape is not None:
        _shape(name, arr, shape)
    _finite(name, arr)


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


def _actions(name: str, actions: np.ndarray, shape: tuple, sizes: Sequence[int]) -> None:
    _kind(name, actions, "iu", "an integer dtype")
    _shape(name, actions, shape)
    if actions.size and ((actions < 0).any() or (actions >= np.asarray(sizes)).any()):
        raise ContractError(f"{name} holds actions outside 0..{[s - 1 for s in sizes]}")


def check_request(arrays: Mapping[str, np.ndarray], layout, lstm_dim: int) -> dict[str, np.ndarray]:
    """An inference request (actor -> policy worker); returns its arrays on exactly the
    layout's observation keys (see `_observations`)."""
    obs = {k[4:]: v for k, v in arrays.items() if k.startswith("obs/")}
    extra = sorted(set(arrays) - {f"obs/{k}" for k in obs} - {"state", "episode_start", "code"})
    if extra:
        raise ContractError(f"unexpected arrays {extra} in an inference request")
    for name in ("state", "episode_start", "code"):
        if name not in arrays:
            raise ContractError(f"inference request lacks {name!r}")
    (rows,), obs = _observations(obs, layout, 1)
    _float("state", arrays["state"], (rows, 4, lstm_dim))
    _kind("episode_start", arrays["episode_start"], "b", "bool")
    _shape("episode_start", arrays["episode_start"], (rows,))
    code = arrays["code"]
    _kind("code", code, "iu", "an integer dtype")
    _shape("code", code, (rows,))
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
    for name in ("actions", "logp", "values", "state"):
        if name not in arrays:
            raise ContractError(f"inference reply lacks {name!r}")
    _actions("actions", arrays["actions"], (rows, len(action_sizes)), action_sizes)
    _float("logp", arrays["logp"], (rows,))
    _float("values", arrays["values"], (rows,))
    _float("state", arrays["state"], (rows, 4, lstm_dim))


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
    from hns_train.agents.chunks import Chunk

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
    _actions("actions", chunk.actions, (steps, B, len(action_sizes)), action_sizes)
    for name in ("logp", "values", "rewards", "truncated_value"):
        _float(name, getattr(chunk, name))
    _float("bootstrap_value", chunk.bootstrap_value)
    for name in ("episode_start", "truncated"):
        _kind(name, getattr(chunk, name), "b", "bool")
    _float("lstm_state", chunk.lstm_state, (steps // bptt_len, B, 4, lstm_dim))
    _kind("policy_version", chunk.policy_version, "iu", "an integer dtype")
    if chunk.policy_version.min() < 0:
        raise ContractError("policy_version holds negative versions")
    return chunk


def check_params(
    arrays: Mapping[str, np.ndarray], layout: Mapping[str, tuple[np.dtype, tuple]]
) -> None:
    """Parameters (trainer -> policy/eval): exactly the model's names and shapes, finite.

    `layout` is the model's `param_layout`; a float tensor needs float values, any other an
    integer or bool array."""
    missing = sorted(set(layout) - set(arrays))
    extra = sorted(set(arrays) - set(layout))
    if missing or extra:
        raise ContractError(
            f"parameters differ from the model: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    for name, (dtype, shape) in layout.items():
        arr = arrays[name]
        _shape(f"parameter {name}", arr, shape)
        if dtype.kind == "f":
            _kind(f"parameter {name}", arr, "f", "a float dtype")
        else:
            _kind(f"parameter {name}", arr, "iub", "an integer or bool dtype")
        _finite(f"parameter {name}", arr)


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
