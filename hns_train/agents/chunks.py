"""The sample-chunk format: what actors produce and the trainer consumes (numpy only).

A `Chunk` holds T consecutive steps of B agent streams, TIME-MAJOR: every per-step array is
(T, B, ...). Stacking chunks concatenates along B (`stack_chunks`), so a training batch is
itself a `Chunk`. T must be a multiple of the BPTT length L (80 = 8 x 10 by default). PPO's
batch, `ppo.Rollout`, is a `Chunk` of device tensors (a pod's rollouts are made as one).

field            shape            meaning
obs[key]         (T, B, ...)      raw observation o_t, keys and shapes as in observations.py
actions          (T, B, 5) int64  a_t
logp             (T, B)           log pi(a_t | o_<=t) at rollout time, summed over the 5 heads
values           (T, B)           V(o_<=t) at rollout time, de-normalised (reward units)
rewards          (T, B)           r_t, received after a_t
episode_start    (T, B) bool      o_t is the first observation of an episode (LSTM reset)
truncated        (T, B) bool      the episode ended after step t (the horizon was reached)
truncated_value  (T, B)           V(final observation of that episode); read only where truncated
bootstrap_value  (B,)             V(o_T), the observation after the last step; read only where
                                  truncated[T-1] is False
lstm_state       (T/L, B, 4, H)   recurrent state before steps 0, L, 2L, ... (before any reset),
                                  rows [policy h, policy c, value h, value c]
policy_version   (B,) int64       trainer version of the parameters that produced the column

Why `truncated_value`: the game never terminates, it is cut at the horizon, so the last reward
of an episode must be bootstrapped from the value of the episode's final observation. Gymnasium
auto-reset hands the next episode's first observation to the actor, so the actor evaluates the
final observation once (`ActorCritic.act(final_obs, state)`, continuing the finished episode's
LSTM state) and stores it here. Chunks may thus cross episode boundaries anywhere. A true
terminal state, if a future preset has one, is `truncated` with `truncated_value` 0.
Consistency rule checked by `validate`: episode_start[t+1] == truncated[t].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

STEP_FIELDS = ("logp", "values", "rewards", "episode_start", "truncated", "truncated_value")
PER_STREAM_FIELDS = ("bootstrap_value", "policy_version")  # (B,): made by `finish`
# the dtype of every field of a chunk but `obs` (float32 observations), on the wire and as the
# learner's tensors (`ppo.Rollout.from_chunk`)
FIELD_DTYPES = {
    "actions": np.dtype(np.int64),
    **{name: np.dtype(np.float32) for name in ("logp", "values", "rewards", "truncated_value")},
    **{name: np.dtype(bool) for name in ("episode_start", "truncated")},
    "bootstrap_value": np.dtype(np.float32),
    "lstm_state": np.dtype(np.float32),
    "policy_version": np.dtype(np.int64),
}


def chunk_layout(
    obs_shapes: Mapping[str, Sequence[int]],
    num_steps: int,
    batch: int,
    bptt_len: int,
    state_shape: Sequence[int],
    num_actions: int,
) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, shape) of every array of a chunk of T = `num_steps` steps and B = `batch`
    streams, named as in `Chunk.to_arrays`: what `ChunkRecorder` allocates and what a chunk
    weighs on the wire (`distributed/message_sizes.py`). `obs_shapes` and `state_shape` are per
    stream (without T and B)."""
    T, B = num_steps, batch
    f32 = np.dtype(np.float32)
    out = {f"obs/{k}": (f32, (T, B, *map(int, s))) for k, s in obs_shapes.items()}
    shapes = {"actions": (T, B, num_actions), **{name: (T, B) for name in STEP_FIELDS}}
    shapes.update(bootstrap_value=(B,), lstm_state=(T // bptt_len, B, *map(int, state_shape)))
    shapes["policy_version"] = (B,)
    for name, shape in shapes.items():
        out[name] = (FIELD_DTYPES[name], shape)
    return out


@dataclass
class Chunk:
    obs: dict[str, np.ndarray]
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    episode_start: np.ndarray
    truncated: np.ndarray
    truncated_value: np.ndarray
    bootstrap_value: np.ndarray
    lstm_state: np.ndarray
    policy_version: np.ndarray

    @property
    def num_steps(self) -> int:
        return self.actions.shape[0]

    @property
    def batch_size(self) -> int:
        return self.actions.shape[1]

    @property
    def segment_len(self) -> int:
        """BPTT length L implied by how often the LSTM state was stored."""
        return self.num_steps // self.lstm_state.shape[0]

    def validate(self, num_actions: int = 5) -> Chunk:
        """Raise ValueError naming the first inconsistent field; return self."""
        if self.actions.ndim != 3 or not np.issubdtype(self.actions.dtype, np.integer):
            raise ValueError(
                f"actions must be (T, B, {num_actions}) integers, got {self.actions.shape} "
                f"{self.actions.dtype}"
            )
        T, B = self.actions.shape[:2]
        s = self.lstm_state.shape
        if len(s) != 4 or s[2] != 4 or s[0] == 0 or T % s[0]:
            raise ValueError(
                f"lstm_state must be (T/L, B, 4, H) with T = {T} a multiple of L, got {s}"
            )
        obs_shapes = {k: v.shape[2:] for k, v in self.obs.items()}
        layout = chunk_layout(obs_shapes, T, B, T // s[0], s[2:], num_actions)
        for name, value in self.to_arrays().items():
            if value.shape != layout[name][1]:
                raise ValueError(
                    f"{name} must have shape {layout[name][1]} (T = {T}, B = {B}), "
                    f"got {value.shape}"
                )
        if not np.array_equal(self.episode_start[1:], self.truncated[:-1]):
            raise ValueError("episode_start[t+1] must equal truncated[t] inside a chunk")
        return self

    def select(self, columns: Any) -> Chunk:
        """The chunk restricted to agent streams `columns` (indices along B: an index array,
        or an index tensor on the device of a `ppo.Rollout`'s tensors)."""
        return take_streams(self, columns, stream_axis)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat name -> array dict (observations as 'obs/<key>') for the wire format."""
        out = {f"obs/{k}": v for k, v in self.obs.items()}
        out.update({f.name: getattr(self, f.name) for f in fields(self) if f.name != "obs"})
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Chunk:
        names = [f.name for f in fields(cls) if f.name != "obs"]
        missing = [n for n in names if n not in arrays]
        if missing:
            raise ValueError(f"chunk arrays are missing {missing}")
        obs = {k[4:]: np.asarray(v) for k, v in arrays.items() if k.startswith("obs/")}
        return cls(obs=obs, **{n: np.asarray(arrays[n]) for n in names})


def stack_chunks(chunks: Sequence[Chunk]) -> Chunk:
    """Concatenate chunks of equal length T along the batch axis."""
    if not chunks:
        raise ValueError("stack_chunks needs at least one chunk")
    if len(chunks) == 1:
        return chunks[0]
    lengths = {c.num_steps for c in chunks}
    if len(lengths) != 1:
        raise ValueError(f"chunks of different lengths cannot be stacked: {sorted(lengths)}")
    keys = set(chunks[0].obs)
    for c in chunks:
        if set(c.obs) != keys:
            raise ValueError(
                f"chunks have different observation keys: {sorted(keys)} vs {sorted(c.obs)}"
            )
    arrays = [c.to_arrays() for c in chunks]
    return Chunk.from_arrays(
        {k: np.concatenate([a[k] for a in arrays], stream_axis(k)) for k in arrays[0]}
    )


def stream_axis(name: str) -> int:
    """The axis of the agent streams in a chunk's array `name` (as `Chunk.to_arrays` names
    it): 0 for the per-stream fields, 1 for the per-step ones (T, B, ...) and lstm_state."""
    return 0 if name in PER_STREAM_FIELDS else 1


def take_streams(batch: Any, index: Any, axis: Callable[[str], int]) -> Any:
    """A copy of `batch` (a dataclass of arrays or tensors: a `Chunk`, a `ppo.Rollout` or
    `ppo.Segments`) holding only the columns `index` of every array, along the axis
    `axis(field name)` gives (1 for time-major fields)."""

    def take(name: str, x: Any) -> Any:
        if isinstance(x, dict):
            return {k: take(name, v) for k, v in x.items()}
        if x is None:
            return None
        select = getattr(x, "index_select", None)  # a tensor
        return np.take(x, index, axis(name)) if select is None else select(axis(name), index)

    return type(batch)(**{f.name: take(f.name, getattr(batch, f.name)) for f in fields(batch)})


class ChunkRecorder:
    """Records T steps of B agent streams in the chunk layout: the one place where a step, an
    episode end (`truncated`, `truncated_value`) and the bootstrap at the cut are written, for
    the actor's chunks (numpy arrays) and the pod's rollouts (tensors on its device, pod.py).

    Per step, `record_inputs` takes what the streams act on (the observation, the recurrent
    state they were given before any episode-start reset, whether the step starts an episode)
    and `record_outputs` what followed (the act outputs and the reward); `end_episodes` marks
    the streams whose episode ended with the step just recorded, with V(final observation).
    After `num_steps` steps, `take` (arrays of any kind) or `finish` (a numpy `Chunk`) closes
    the chunk with V(o_T) as its bootstrap value, read only where the last step is not cut.

    Storage: by default every chunk gets new numpy arrays, allocated at its first step, each
    step copied in once, so a finished chunk may still be on its way (zero-copy sends) while the
    next fills. With `new_array(dtype, shape)` (tensors on a device) the arrays are allocated
    at the first step and reused by every chunk: what `take` returns is valid until the next.
    """

    def __init__(
        self,
        num_steps: int,
        bptt_len: int,
        num_actions: int = 5,
        new_array: Callable[[np.dtype, tuple[int, ...]], Any] | None = None,
    ) -> None:
        if num_steps <= 0 or num_steps % bptt_len:
            raise ValueError(
                f"num_steps ({num_steps}) must be a positive multiple of bptt_len ({bptt_len})"
            )
        self.num_steps = num_steps
        self.bptt_len = bptt_len
        self.num_actions = num_actions
        self._new_array = new_array or (lambda dtype, shape: np.empty(shape, dtype))
        self._reuse = new_array is not None
        self._t = 0
        self._buf: dict = {}

    def __len__(self) -> int:
        return self._t

    @property
    def full(self) -> bool:
        return self._t == self.num_steps

    def clear(self) -> None:
        """Forget the steps recorded so far: the next one is step 0 of a new chunk."""
        self._t = 0

    def record_inputs(self, obs: Mapping[str, Any], state: Any, episode_start: Any) -> None:
        """Step t's inputs: observations (B, ...), recurrent states (B, 4, H), starts (B,)."""
        if self.full:
            raise ValueError("chunk is full: call finish() or take() first")
        t = self._t
        if not self._buf:
            self._buf = self._allocate(obs, tuple(state.shape))
        buf = self._buf
        if set(obs) != set(buf["obs"]):
            raise ValueError(
                f"step {t} has observation keys {sorted(obs)}, not {sorted(buf['obs'])}"
            )
        for key, value in obs.items():
            buf["obs"][key][t] = value
        if t % self.bptt_len == 0:
            buf["lstm_state"][t // self.bptt_len] = state
        buf["episode_start"][t] = episode_start

    def record_outputs(self, actions: Any, logp: Any, values: Any, rewards: Any) -> None:
        """Step t's outputs and the reward that followed; no episode ends with it (yet)."""
        buf, t = self._buf, self._t
        if not buf:
            raise ValueError("record_inputs() comes before record_outputs()")
        buf["actions"][t] = actions
        buf["logp"][t] = logp
        buf["values"][t] = values
        buf["rewards"][t] = rewards
        buf["truncated"][t] = False
        buf["truncated_value"][t] = 0.0
        self._t = t + 1

    def end_episodes(self, final_values: Any, rows: Any = None) -> None:
        """Streams `rows` (an index array or tensor; None: all) ended their episode with the
        step just recorded; `final_values` is V(final observation) of each."""
        if self._t == 0:
            raise ValueError("no step recorded for an episode to end with")
        t = self._t - 1
        if rows is None:
            self._buf["truncated"][t] = True
            self._buf["truncated_value"][t] = final_values
        else:
            self._buf["truncated"][t][rows] = True
            self._buf["truncated_value"][t][rows] = final_values

    def _allocate(self, obs: Mapping[str, Any], state_shape: tuple[int, ...]) -> dict:
        layout = chunk_layout(
            {k: tuple(v.shape[1:]) for k, v in obs.items()},
            self.num_steps,
            state_shape[0],
            self.bptt_len,
            state_shape[1:],
            self.num_actions,
        )
        arrays = {
            name: self._new_array(dtype, shape)
            for name, (dtype, shape) in layout.items()
            if name not in PER_STREAM_FIELDS
        }
        return {"obs": {k: arrays.pop(f"obs/{k}") for k in obs}, **arrays}

    def take(self, bootstrap_value: Any) -> dict[str, Any]:
        """The full chunk's fields (as `Chunk`'s, without `policy_version`), V(o_T) of each
        stream as `bootstrap_value`; the next step starts a new chunk."""
        if not self.full:
            raise ValueError(f"chunk has {self._t} of {self.num_steps} steps")
        buf, self._t = self._buf, 0
        if not self._reuse:
            self._buf = {}
        return {**buf, "bootstrap_value": bootstrap_value}

    def finish(self, bootstrap_value: np.ndarray, policy_version: int | np.ndarray) -> Chunk:
        """The full chunk as a validated numpy `Chunk`."""
        arrays = self.take(bootstrap_value)
        batch = arrays["actions"].shape[1]
        arrays["bootstrap_value"] = np.asarray(bootstrap_value, np.float32).reshape(batch)
        version = np.broadcast_to(np.asarray(policy_version, np.int64), (batch,)).copy()
        return Chunk(**arrays, policy_version=version).validate()
