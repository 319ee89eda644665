"""The run's message contract, checked where each message is received.

`wire.decode` guarantees a well-formed message (header, dtypes, buffer sizes); this module checks
that a well-formed message is also *right* for this run before anything uses it: the keys,
dtypes and shapes the run's config implies (observation layout, LSTM size, chunk length, action
sizes), finite floats, integer codes and counters in range, and the types of every heartbeat
field the controller reads. A message that fails raises `ContractError` naming the field and
what was expected; a receiver hands its check to its stream (`streams`, `check=`), which drops
the message, counts it, and logs through a `DropLog` (at most one line per `DropLog.every_s`
seconds per receiver, with the count of drops since the last line), so a flood of bad messages
can neither crash a worker nor fill a disk with log lines.

Each message is described once, and that description is what it is checked against and what
sizes it before a run starts (`message_sizes.py`): the arrays of a request and a reply by
`request_layout` and `reply_layout`, of a chunk by `agents.chunks.chunk_layout`, of parameters
by `param_layout` (all checked by one field check, `_fields`); the fields of control messages
by a table of rules (`HEARTBEAT_FIELDS`, checked by `check_fields`).

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
from collections.abc import Callable, Mapping, Sequence
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


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _names_to(value: Any, ok: Callable[[Any], bool]) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and ok(v) for k, v in value.items())


def _leaderboard(board: Any) -> bool:
    return board is None or (
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
    )


# What a field of a control message must be: (test, the words of the error when it fails).
Rule = tuple[Callable[[Any], bool], str]
COUNT: Rule = (lambda v: type(v) is int and v >= 0, "an int >= 0")
VERSION: Rule = (lambda v: type(v) is int and v >= -1, "an int >= -1")  # -1: none yet
NUMBER: Rule = (_number, "a finite number")
SECONDS: Rule = (lambda v: _number(v) and v >= 0, "a finite number >= 0")
NUMBER_OR_NONE: Rule = (lambda v: v is None or _number(v), "a finite number or None")
SECONDS_OR_NONE: Rule = (lambda v: v is None or SECONDS[0](v), "a finite number >= 0 or None")
NUMBERS: Rule = (lambda v: isinstance(v, list) and all(map(_number, v)), "a list of finite numbers")
PATHS: Rule = (
    lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "a list of paths",
)

# The fields of each worker kind's heartbeat (see each worker's `counters()`); any may be left
# out. `stat_sums` has one number per statistic of the run; paths lie inside the run directory.
HEARTBEAT_FIELDS: dict[str, dict[str, Rule]] = {
    "actor": {
        **dict.fromkeys(("frames", "episodes", "chunks", "queued_chunks"), COUNT),
        **dict.fromkeys(("physics_warnings", "resent", "rejected"), COUNT),
        "version_seen": VERSION,
        "stat_sums": NUMBERS,
    },
    "policy": {
        "version": VERSION,
        **dict.fromkeys(("rows", "batches", "forwards", "rejected"), COUNT),
        **dict.fromkeys(("unknown_snapshots", "snapshot_loads"), COUNT),
        "busy_s": SECONDS,
    },
    "trainer": {
        **dict.fromkeys(("version", "steps", "received", "dropped_stale", "rejected"), COUNT),
        **dict.fromkeys(("buffer", "skipped_updates", "samples", "new_samples"), COUNT),
        "update_s": SECONDS,
        "staleness": NUMBER_OR_NONE,
        "reuse": SECONDS_OR_NONE,
        "stats": (lambda v: _names_to(v, _number), "a map of names to finite numbers"),
        "stat_sums": NUMBERS,
        # a pod (pod_worker.py) also reports what actors do
        **dict.fromkeys(("frames", "episodes", "physics_warnings"), COUNT),
        **dict.fromkeys(("sim_s", "act_s", "learn_s", "sync_s"), SECONDS),
        **dict.fromkeys(
            ("collect_cpu_s", "learn_cpu_s", "sync_cpu_s", "duties_cpu_s", "setup_cpu_s"), SECONDS
        ),
    },
    "eval": {
        "version": VERSION,
        "matches": COUNT,
        "rounds": COUNT,
        "round_s": SECONDS,
        "rating": (
            lambda v: _names_to(v, lambda x: isinstance(x, list) and len(x) == 2 and NUMBERS[0](x)),
            "a map of names to [mu, sigma] pairs of finite numbers",
        ),
        "win_rate": (
            lambda v: _names_to(v, lambda x: _number(x) and 0 <= x <= 1),
            "a map of names to rates in [0, 1]",
        ),
        "new_videos": PATHS,
        "new_replays": PATHS,
        "leaderboard": (_leaderboard, "{columns, rows}"),
    },
}
# every heartbeat; cpu_s: process CPU seconds since the previous heartbeat (worker.py)
HEARTBEAT_COMMON: dict[str, Rule] = {"time": NUMBER, "cpu_s": SECONDS}


def check_fields(meta: Mapping, fields: Mapping[str, Rule], required: Sequence[str] = ()) -> None:
    """Each of `fields` that `meta` holds keeps its rule; the `required` ones are there."""
    for key in required:
        if key not in meta:
            raise ContractError(f"{key!r} is missing")
    for key, (ok, what) in fields.items():
        if key in meta and not ok(meta[key]):
            raise ContractError(f"{key}={short_repr(meta[key])} must be {what}")


def check_hello(meta: Mapping) -> None:
    pid: Rule = (lambda v: type(v) is int and v >= 1, "an int >= 1")
    check_fields(meta, {"pid": pid, "incarnation": COUNT}, required=["pid"])


def check_heartbeat(kind: str, meta: Mapping, run_dir: str | Path, n_stats: int) -> None:
    """The counters of one worker kind's heartbeat (`HEARTBEAT_FIELDS`)."""
    fields = HEARTBEAT_FIELDS.get(kind, {})
    check_fields(meta, {**HEARTBEAT_COMMON, **fields})
    sums = meta.get("stat_sums") if "stat_sums" in fields else None
    if sums is not None and len(sums) != n_stats:
        raise ContractError(f"stat_sums has {len(meta['stat_sums'])} numbers; expected {n_stats}")
    root = Path(run_dir).resolve()
    for key in [k for k, rule in fields.items() if rule is PATHS]:
        for p in meta.get(key, []):
            if not Path(p).resolve().is_relative_to(root):
                raise ContractError(
                    f"{key} names {short_repr(p)}, outside the run directory {root}"
                )


def check_counters(meta: Mapping) -> None:
    """The run's counters (controller -> trainer)."""
    fields = {"frames": COUNT, "episodes": COUNT, "wall_clock_s": SECONDS}
    # stop_in_s: None without stop.minutes; < 0 once past it
    check_fields(meta, {**fields, "stop_in_s": NUMBER_OR_NONE}, required=list(fields))
