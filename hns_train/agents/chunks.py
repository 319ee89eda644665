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
        per_stream = ("bootstrap_value", "policy_version")
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
    """

    def __init__(self, num_steps: int, bptt_len: int) -> None:
        if num_steps <= 0 or num_steps % bptt_len:
            raise ValueError(
                f"num_steps ({num_steps}) must be a positive multiple of bptt_len ({bptt_len})"
            )
        self.num_steps = num_steps
        self.bptt_len = bptt_len
        self._steps: list[dict] = []
        self._states: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def full(self) -> bool:
        return len(self._steps) == self.num_steps

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
        if len(self._steps) % self.bptt_len == 0:
            self._states.append(np.array(state, dtype=np.float32))
        truncated = np.asarray(truncated, dtype=bool)
        if truncated_value is None:
            if truncated.any():
                raise ValueError("truncated_value is required on steps where an episode ends")
            truncated_value = np.zeros(truncated.shape, np.float32)
        self._steps.append(
            {
                "obs": {k: np.array(v, dtype=np.float32) for k, v in obs.items()},
                "actions": np.array(actions, dtype=np.int64),
                "logp": logp,
                "values": values,
                "rewards": rewards,
                "episode_start": np.asarray(episode_start, dtype=bool),
                "truncated": truncated,
                "truncated_value": truncated_value,
            }
        )

    def finish(self, bootstrap_value: np.ndarray, policy_version: int | np.ndarray) -> Chunk:
        if not self.full:
            raise ValueError(f"chunk has {len(self._steps)} of {self.num_steps} steps")
        steps = self._steps
        batch = steps[0]["actions"].shape[0]
        chunk = Chunk(
            obs={k: np.stack([s["obs"][k] for s in steps]) for k in steps[0]["obs"]},
            actions=np.stack([s["actions"] for s in steps]),
            **{
                n: np.stack(
                    [np.asarray(s[n], np.float32 if n in _FLOAT_FIELDS else bool) for s in steps]
                )
                for n in STEP_FIELDS
            },
            bootstrap_value=np.asarray(bootstrap_value, np.float32).reshape(batch),
            lstm_state=np.stack(self._states),
            policy_version=np.broadcast_to(np.asarray(policy_version, np.int64), (batch,)).copy(),
        )
        self._steps, self._states = [], []
        return chunk.validate()
