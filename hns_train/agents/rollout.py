"""`RolloutBuffer`: a pod's T steps x R agent rows, preallocated on the learner's device.

The same fields as the sample chunk (chunks.py), in the same time-major layout, so a full
buffer is a `ppo.Rollout` without a copy: obs[key] (T, R, ...), actions (T, R, 5), logp, values,
rewards, episode_start, truncated, truncated_value (T, R), lstm_state (T/L, R, 4, H) stored
before steps 0, L, 2L, ... (before any episode-start reset), bootstrap_value (R,), plus `learn`
(T, R): the steps the learning policy played for a present agent (opponent rows and absent
agents are stored, for fixed shapes, but not trained on).

Rows are the worlds' agent slots, world-major (row = world * A + agent). Writing a step is a
handful of device copies into slot t; nothing is allocated after construction, nothing is read
back to the host.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from hns_train.agents.ppo import Rollout


class RolloutBuffer:
    def __init__(
        self,
        obs_shapes: Mapping[str, tuple[int, ...]],
        rows: int,
        steps: int,
        bptt_len: int,
        lstm_dim: int,
        n_actions: int,
        device: torch.device | str,
    ) -> None:
        if steps <= 0 or steps % bptt_len:
            raise ValueError(
                f"steps ({steps}) must be a positive multiple of bptt_len ({bptt_len})"
            )
        self.steps, self.rows, self.bptt_len = steps, rows, bptt_len
        T, R = steps, rows

        def z(*shape, dtype=torch.float32):
            return torch.zeros(shape, dtype=dtype, device=device)

        self.obs = {k: z(T, R, *shape) for k, shape in obs_shapes.items()}
        self.actions = z(T, R, n_actions, dtype=torch.int64)
        self.logp, self.values, self.rewards = z(T, R), z(T, R), z(T, R)
        self.truncated_value = z(T, R)
        self.episode_start = z(T, R, dtype=torch.bool)
        self.truncated = z(T, R, dtype=torch.bool)
        self.learn = z(T, R, dtype=torch.bool)
        self.lstm_state = z(T // bptt_len, R, 4, lstm_dim)
        self.bootstrap_value = z(R)

    def store_inputs(
        self,
        t: int,
        obs: Mapping[str, torch.Tensor],
        state: torch.Tensor,
        episode_start: torch.Tensor,
    ) -> None:
        """What row r acted on at step t: its observation (R, ...), its recurrent state before
        the step (kept every `bptt_len` steps) and whether the step starts an episode."""
        for key, value in obs.items():
            self.obs[key][t].copy_(value)
        if t % self.bptt_len == 0:
            self.lstm_state[t // self.bptt_len].copy_(state)
        self.episode_start[t].copy_(episode_start)

    def store_outputs(
        self,
        t: int,
        actions: torch.Tensor,
        logp: torch.Tensor,
        values: torch.Tensor,
        rewards: torch.Tensor,
        learn: torch.Tensor,
    ) -> None:
        self.actions[t].copy_(actions)
        self.logp[t].copy_(logp)
        self.values[t].copy_(values)
        self.rewards[t].copy_(rewards)
        self.learn[t].copy_(learn)
        self.truncated[t].zero_()

    def store_truncation(self, t: int, rows: torch.Tensor, final_values: torch.Tensor) -> None:
        """Rows (an index tensor) whose episode ended with step t, and V(final observation)."""
        self.truncated[t].index_fill_(0, rows, True)
        self.truncated_value[t].index_copy_(0, rows, final_values)

    def rollout(self, bootstrap_value: torch.Tensor) -> Rollout:
        """The full buffer as PPO's batch (views, no copy): valid until the next store."""
        self.bootstrap_value.copy_(bootstrap_value)
        return Rollout(
            obs=self.obs,
            actions=self.actions,
            logp=self.logp,
            values=self.values,
            rewards=self.rewards,
            episode_start=self.episode_start,
            truncated=self.truncated,
            truncated_value=self.truncated_value,
            bootstrap_value=self.bootstrap_value,
            lstm_state=self.lstm_state,
            learn=self.learn,
        )
