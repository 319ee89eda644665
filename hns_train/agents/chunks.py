"""The sample-chunk format: what actors produce and the trainer consumes (numpy only).

A `Chunk` holds T consecutive steps of B agent streams, TIME-MAJOR: every per-step array is
(T, B, ...). Stacking chunks concatenates along B (`stack_chunks`), so a training batch is
itself a `Chunk`. T must be a multiple of the BPTT length L (80 = 8 x 10 by default).

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

STEP_FIELDS = ("logp", "values", "rewards", "episode_start", "truncated", "truncated_value")
_FLOAT_FIELDS = ("logp", "values", "rewards", "truncated_value")
PER_STREAM_FIELDS = ("bootstrap_value", "policy_version")  # (B,): made by `finish`


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
    out["actions"] = (np.dtype(np.int64), (T, B, num_actions))
    for name in STEP_FIELDS:
        out[name] = (f32 if name in _FLOAT_FIELDS else np.dtype(bool), (T, B))
    out["bootstrap_value"] = (f32, (B,))
    out["lstm_state"] = (f32, (T // bptt_len, B, *map(int, state_shape)))
    out["policy_version"] = (np.dtype(np.int64), (B,))
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
        if self.actions.ndim != 3 or self.actions.shape[2] != num_actions:
            raise ValueError(f"actions must be (T, B, {num_actions}), got {self.actions.shape}")
        if not np.issubdtype(self.actions.dtype, np.integer):
            raise ValueError(f"actions must be integers, got {self.actions.dtype}")
        tb = self.actions.shape[:2]
        for name in STEP_FIELDS:
            if getattr(self, name).shape != tb:
                raise ValueError(
                    f"{name} must have shape (T, B) = {tb}, got {getattr(self, name).shape}"
                )
        for key, value in self.obs.items():
            if value.shape[:2] != tb:
                raise ValueError(f"obs['{key}'] must start with (T, B) = {tb}, got {value.shape}")
        if self.bootstrap_value.shape != tb[1:]:
            raise ValueError(
                f"bootstrap_value must be (B,) = {tb[1:]}, got {self.bootstrap_value.shape}"
            )
        if self.policy_version.shape != tb[1:]:
            raise ValueError(
                f"policy_version must be (B,) = {tb[1:]}, got {self.policy_version.shape}"
            )
        s = self.lstm_state.shape
        if len(s) != 4 or s[1] != tb[1] or s[2] != 4 or s[0] == 0 or tb[0] % s[0]:
            raise ValueError(
                f"lstm_state must be (T/L, B, 4, H) with T = {tb[0]} a multiple of L, got {s}"
            )
        if not np.array_equal(self.episode_start[1:], self.truncated[:-1]):
            raise ValueError("episode_start[t+1] must equal truncated[t] inside a chunk")
        return self

    def select(self, columns: np.ndarray) -> Chunk:
        """The chunk restricted to agent streams `columns` (indices along B)."""
        per_stream = PER_STREAM_FIELDS
        return Chunk(
            obs={k: v[:, columns] for k, v in self.obs.items()},
            **{
                f.name: getattr(self, f.name)[columns]
                if f.name in per_stream
                else getattr(self, f.name)[:, columns]
                for f in fields(self)
                if f.name != "obs"
            },
        )

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
    per_step_axis = 1  # (T, B, ...) and lstm_state (T/L, B, 4, H)
    return Chunk(
        obs={k: np.concatenate([c.obs[k] for c in chunks], per_step_axis) for k in chunks[0].obs},
        **{
            f.name: np.concatenate(
                [getattr(c, f.name) for c in chunks],
                0 if f.name in ("bootstrap_value", "policy_version") else per_step_axis,
            )
            for f in fields(Chunk)
            if f.name != "obs"
        },
    )


class ChunkRecorder:
    """Builds one `Chunk` step by step for a fixed set of B agent streams.

    Per step, call `add` with what the actor knows after `env.step`: the observation the agent
    acted on, the state it was given (before any episode-start reset), the act outputs, and the
    reward / truncation that followed. After `num_steps` steps, `finish` returns the chunk.
    Each step is copied once, into the chunk's own (T, B, ...) arrays; a new chunk gets new
    arrays, so a finished one may still be on its way (zero-copy sends) while the next fills.
    """

    def __init__(self, num_steps: int, bptt_len: int) -> None:
        if num_steps <= 0 or num_steps % bptt_len:
            raise ValueError(
                f"num_steps ({num_steps}) must be a positive multiple of bptt_len ({bptt_len})"
            )
        self.num_steps = num_steps
        self.bptt_len = bptt_len
        self._t = 0
        self._buf: dict = {}

    def __len__(self) -> int:
        return self._t

    @property
    def full(self) -> bool:
        return self._t == self.num_steps

    def add(
        self,
        *,
        obs: Mapping[str, np.ndarray],
        state: np.ndarray,
        episode_start: np.ndarray,
        actions: np.ndarray,
        logp: np.ndarray,
        values: np.ndarray,
        rewards: np.ndarray,
        truncated: np.ndarray,
        truncated_value: np.ndarray | None = None,
    ) -> None:
        if self.full:
            raise ValueError("chunk is full: call finish() first")
        truncated = np.asarray(truncated, dtype=bool)
        if truncated_value is None:
            if truncated.any():
                raise ValueError("truncated_value is required on steps where an episode ends")
            truncated_value = np.zeros(truncated.shape, np.float32)
        t = self._t
        if t == 0:
            self._buf = self._new_arrays(obs, np.shape(state), np.shape(actions))
        buf = self._buf
        if set(obs) != set(buf["obs"]):
            raise ValueError(
                f"step {t} has observation keys {sorted(obs)}, not {sorted(buf['obs'])}"
            )
        if t % self.bptt_len == 0:
            buf["lstm_state"][t // self.bptt_len] = state
        for key, value in obs.items():
            buf["obs"][key][t] = value
        buf["actions"][t] = actions
        step = (logp, values, rewards, episode_start, truncated, truncated_value)
        for name, value in zip(STEP_FIELDS, step, strict=True):
            buf[name][t] = value
        self._t += 1

    def _new_arrays(self, obs: Mapping[str, np.ndarray], state_shape, action_shape) -> dict:
        obs_shapes = {k: np.shape(v)[1:] for k, v in obs.items()}
        layout = chunk_layout(
            obs_shapes,
            self.num_steps,
            action_shape[0],
            self.bptt_len,
            state_shape[1:],
            action_shape[1],
        )
        arrays = {
            name: np.empty(shape, dtype)
            for name, (dtype, shape) in layout.items()
            if name not in PER_STREAM_FIELDS
        }
        return {"obs": {k: arrays.pop(f"obs/{k}") for k in obs}, **arrays}

    def finish(self, bootstrap_value: np.ndarray, policy_version: int | np.ndarray) -> Chunk:
        if not self.full:
            raise ValueError(f"chunk has {self._t} of {self.num_steps} steps")
        buf, self._buf, self._t = self._buf, {}, 0
        batch = buf["actions"].shape[1]
        chunk = Chunk(
            **buf,
            bootstrap_value=np.asarray(bootstrap_value, np.float32).reshape(batch),
            policy_version=np.broadcast_to(np.asarray(policy_version, np.int64), (batch,)).copy(),
        )
        return chunk.validate()
