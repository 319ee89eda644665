"""`ActorCritic`: policy + omniscient value network, their normalisers, and batched acting.

Both teams and all teammates share these parameters (the `is_hider` feature tells them apart).
The policy network sees the visible entities, the value network every existing one; their
weights are separate. Both are of the kind `NetworkConfig.kind` names (the paper's entity
network by default; `agents/network_kinds.py` builds and checks them), built here and nowhere
else. Everything a policy worker needs to act is in this module's
`state_dict` (weights and normaliser statistics, plain tensors).

Recurrent state: one float32 array of shape (B, 4, lstm_dim) per agent batch, rows
[policy h, policy c, value h, value c]; `initial_state(B)` is zeros. `act` zeroes the state of
agents whose `episode_start` flag is set before it processes their step, exactly as training
does, so acting step by step and replaying the chunk as a sequence agree.

Actions: int64 (B, 5) = x force, y force, z torque bins (11 each), grab (2), lock (2). Log-probs
and entropies are sums over the 5 independent categorical heads. Values are returned
de-normalised (in reward units); the value head itself predicts PopArt-normalised values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hns_train.agents.config import NetworkConfig
from hns_train.agents.network_kinds import build_network
from hns_train.agents.networks import LSTMState
from hns_train.agents.normalizers import EmaMeanStd, ObsNormalizer
from hns_train.agents.observations import ObsLayout

# The logit a head narrower than the widest is padded with: finite, so 0 times its log-probability
# is 0, not NaN; exp(PAD_LOGIT - x) is exactly 0 in float32 for every logit x above -9,896.
PAD_LOGIT = -1e4


class ActOutput(NamedTuple):
    """Host arrays from `act`, device tensors from `act_tensors`."""

    actions: np.ndarray  # (B, 5) int64
    logp: np.ndarray  # (B,) float32
    values: np.ndarray  # (B,) float32, de-normalised
    state: np.ndarray  # (B, 4, lstm_dim) float32, after this step


class Evaluation(NamedTuple):
    logp: torch.Tensor  # (T, N)
    entropy: torch.Tensor  # (T, N)
    value: torch.Tensor  # (T, N), normalised


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class ActorCritic(nn.Module):
    """Policy and value networks with observation and value normalisation."""

    def __init__(
        self,
        obs_shapes: Mapping,
        config: NetworkConfig | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.config = config or NetworkConfig()
        self.layout = ObsLayout.from_shapes(obs_shapes)
        self.action_sizes = self.config.action_sizes
        # head_columns[j, h]: the column of logits holding head h's logit j, or one past the
        # last (the padding `head_log_probs` appends) where head h has fewer than the widest
        sizes = self.action_sizes
        columns = torch.full((max(sizes), len(sizes)), sum(sizes))
        for h, (start, size) in enumerate(zip(np.cumsum((0,) + sizes[:-1]), sizes, strict=True)):
            columns[:size, h] = torch.arange(start, start + size)
        self.register_buffer("head_columns", columns, persistent=False)
        self.obs_norm = ObsNormalizer(self.layout, self.config)
        self.value_norm = EmaMeanStd(
            (), self.config.value_norm_beta, self.config.value_norm_min_var
        )
        policy_outputs = sum(self.action_sizes)
        # the network kind the config names (`agent.network.kind`), each checked against the
        # interface PPO and this class use (network_kinds.py)
        self.policy_net = build_network(self.layout, self.config, policy_outputs, "visible_mask")
        self.value_net = build_network(self.layout, self.config, 1, "exists_mask")
        self.to(default_device() if device is None else torch.device(device))

    @property
    def device(self) -> torch.device:
        return self.value_norm.debias.device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def initial_state(self, batch_size: int) -> np.ndarray:
        return np.zeros((batch_size, 4, self.config.lstm_dim), dtype=np.float32)

    # ----- tensors in, tensors out (used by training) -----

    def obs_to_tensors(
        self, obs: Mapping[str, np.ndarray], batch_ndim: int
    ) -> dict[str, torch.Tensor]:
        """Validate against the layout and move to the device as float32 (arrays, or tensors
        already on a device: those are not copied when they are float32 on this one)."""
        self.layout.check(obs, batch_ndim)
        return {
            k: torch.as_tensor(obs[k], dtype=torch.float32, device=self.device)
            for k in self.layout.shapes
        }

    def forward_sequence(
        self,
        obs: Mapping[str, torch.Tensor],
        state: torch.Tensor,
        episode_start: torch.Tensor,
        value: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Raw observations (T, N, ...), state (N, 4, H), episode_start (T, N) bool ->
        policy logits (T, N, 37), normalised values (T, N), state after the last step.
        `value=False`: the policy network alone, values None and the value network's half of
        the state as given."""
        logits, values, rows = self.run_networks(obs, state, episode_start, value)
        return logits, values, torch.stack(rows, dim=1)

    def run_networks(
        self,
        obs: Mapping[str, torch.Tensor],
        state: torch.Tensor,
        episode_start: torch.Tensor,
        value: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...]]:
        """`forward_sequence` with the state after as its four rows (policy h, c, value h, c),
        each (N, H), not yet put together."""
        obs = self.obs_norm(obs)
        logits, policy_state = self.policy_net(obs, _pair(state, 0), episode_start)
        if not value:
            return logits, None, (*policy_state, *_pair(state, 2))
        values, value_state = self.value_net(obs, _pair(state, 2), episode_start)
        return logits, values.squeeze(-1), (*policy_state, *value_state)

    def evaluate(
        self,
        obs: Mapping[str, torch.Tensor],
        state: torch.Tensor,
        episode_start: torch.Tensor,
        actions: torch.Tensor,
    ) -> Evaluation:
        """Log-probs of `actions` (T, N, 5), entropies and normalised values along a sequence."""
        logits, value, _ = self.forward_sequence(obs, state, episode_start)
        logp, entropy = self.log_prob_entropy(logits, actions)
        return Evaluation(logp, entropy, value)

    def split_logits(self, logits: torch.Tensor) -> list[torch.Tensor]:
        return list(logits.split(self.action_sizes, dim=-1))

    def head_log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits (..., 37) -> every head's log-probabilities side by side, (..., 5, 11): a
        head narrower than the widest is padded with logits of `PAD_LOGIT`, whose
        probabilities are exactly 0, so each head is one row of one softmax. The softmax runs
        action-major, over the outermost axis of (11, 5, ...) (on a CPU about 8x faster than
        over a last axis of 11); the result is a view of that in the order above."""
        padded = F.pad(logits, (0, 1), value=PAD_LOGIT)
        by_action = padded.movedim(-1, 0)[self.head_columns]  # (11, 5, ...)
        return by_action.log_softmax(0).movedim((0, 1), (-1, -2))

    def log_prob_entropy(
        self, logits: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sums over the heads of log π(action) and of the entropy: (...) each."""
        log_probs = self.head_log_probs(logits)
        logp = _action_log_prob(log_probs, actions)
        # a padding column adds 0 · PAD_LOGIT: exactly 0, and finite gradients
        entropy = -(log_probs.exp() * log_probs).sum((-2, -1))
        return logp, entropy

    def denormalize_value(self, value: torch.Tensor) -> torch.Tensor:
        mean, std = self.value_norm.mean_std()
        return value * std + mean

    def normalize_value(self, value: torch.Tensor) -> torch.Tensor:
        mean, std = self.value_norm.mean_std()
        return (value - mean) / std

    # ----- tensors in, tensors out, on the device (used by pods) -----

    @torch.no_grad()
    def act_tensors(
        self,
        obs: Mapping[str, torch.Tensor],
        state: torch.Tensor,
        episode_start: torch.Tensor,
        deterministic: bool = False,
        value: bool = True,
    ) -> ActOutput:
        """One step for a batch of B agents, every input and output a tensor on the model's
        device (no host read): obs (B, ...), state (B, 4, H), episode_start (B,) bool.
        `value=False` (rows nobody learns from: opponents) runs the policy network alone: the
        values are 0 and the value network's half of the state is kept."""
        tensors = {k: v.unsqueeze(0) for k, v in self.obs_to_tensors(obs, 1).items()}
        # The networks run in inference mode: no version counters and no view records, an
        # eighth of an act of one row. What is returned is computed outside it, since a caller
        # may write to it in place, which an inference tensor refuses.
        with torch.inference_mode():
            logits, values, rows = self.run_networks(
                tensors, state.to(torch.float32), episode_start.unsqueeze(0), value
            )
        new_state = torch.stack(rows, dim=1)
        batch = new_state.shape[0]
        values = self.denormalize_value(values[0]) if value else new_state.new_zeros(batch)
        log_probs = self.head_log_probs(logits[0])  # (B, 5, 11)
        actions = log_probs.argmax(-1) if deterministic else _sample_actions(log_probs)
        logp = _action_log_prob(log_probs, actions)
        return ActOutput(actions, logp.float(), values.float(), new_state.float())

    @torch.no_grad()
    def value_tensors(self, obs: Mapping[str, torch.Tensor], state: torch.Tensor) -> torch.Tensor:
        """De-normalised values (B,) of one step from the value network alone, continuing
        `state` (B, 4, H) (no episode start): V(final observation) for truncated episodes."""
        tensors = self.obs_norm({k: v.unsqueeze(0) for k, v in self.obs_to_tensors(obs, 1).items()})
        starts = torch.zeros((1, state.shape[0]), dtype=torch.bool, device=self.device)
        value, _ = self.value_net(tensors, _pair(state.to(torch.float32), 2), starts)
        return self.denormalize_value(value[0].squeeze(-1)).float()

    # ----- numpy in, numpy out (used by actors and policy workers) -----

    @torch.no_grad()
    def act(
        self,
        obs: Mapping[str, np.ndarray],
        state: np.ndarray | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> ActOutput:
        """One step for a batch of B agents: obs (B, ...), state (B, 4, H) or None (zeros),
        episode_start (B,) or None (no resets) -> actions, log-probs, values, new state, as
        host arrays (observations may be tensors on the device already)."""
        batch = self.layout.check(obs, 1)[0]
        if state is None:
            state = self.initial_state(batch)
        if np.shape(state) != (batch, 4, self.config.lstm_dim):
            raise ValueError(
                f"state has shape {np.shape(state)}; expected ({batch}, 4, {self.config.lstm_dim})"
            )
        starts = (
            np.zeros(batch, dtype=bool)
            if episode_start is None
            else np.asarray(episode_start, bool)
        )
        if starts.shape != (batch,):
            raise ValueError(f"episode_start has shape {starts.shape}; expected ({batch},)")
        out = self.act_tensors(
            obs,
            torch.as_tensor(np.asarray(state, np.float32), device=self.device),
            torch.as_tensor(starts, device=self.device),
            deterministic,
        )
        return ActOutput(*(x.cpu().numpy() for x in out))


def _sample_actions(log_probs: torch.Tensor) -> torch.Tensor:
    """One action per head and row from `head_log_probs` (..., 5, 11): the first action whose
    cumulative probability exceeds a uniform draw scaled to the head's total, one draw per head
    (a multinomial draws one exponential per action, about 8x the time on a CPU).

    An action of probability 0 is never the first to exceed the draw, since its cumulative
    probability is its predecessor's. Padding adds exact zeros, so a head's total is the
    cumulative probability of its last action, and a draw u · total with u < 1 rounds to below
    the total for every float total: the count never reaches the padding."""
    cumulative = log_probs.exp().cumsum(-1)
    draw = torch.rand_like(cumulative[..., :1]) * cumulative[..., -1:]
    return (cumulative <= draw).sum(-1)


def _action_log_prob(log_probs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log π(actions) summed over the heads: `head_log_probs` (..., 5, 11), actions (..., 5)."""
    return log_probs.gather(-1, actions.unsqueeze(-1)).sum((-2, -1))


def _pair(state: torch.Tensor, first: int) -> LSTMState:
    return state[:, first], state[:, first + 1]
