"""PPO with GAE, PopArt value normalisation and truncated BPTT over chunk segments (spec §7).

One `PPO.update(chunks)` is one optimisation step of the trainer (the version number counts
them) and runs, in this order:
1. GAE (γ 0.998, λ 0.95) over each whole chunk, in reward units, from the rollout-time values,
   bootstrapping from `truncated_value` where an episode was cut and from `bootstrap_value`
   after the last step (see chunks.py).
2. PopArt: value statistics absorb the batch's returns, the value head is rescaled so its
   de-normalised outputs are unchanged, and targets are normalised with the new statistics.
3. Each chunk is cut into T/L segments of L = 10 steps; each segment replays from the LSTM state
   stored at rollout time, zeroing it at episode starts, and gradients flow only inside it.
   `epochs` passes over `minibatches` random minibatches of segments; each minibatch is one
   Adam step (lr 3e-4, L2 weight decay 1e-6) after clipping the gradient norm to 5.
4. Observation statistics absorb the batch, after the gradient steps, so the step itself
   optimises against the same normalisation that produced the samples.

Loss = clipped surrogate (0.2) + 0.5 · ½(V̂ - R̂)² on normalised values (optionally clipped)
       - 0.01 · entropy summed over the 5 action heads.

Data parallelism (`sync`, a `RankSync`; None = one process, unchanged): each rank holds a part of
the batch, and every number that depends on the whole batch is made from sums over ranks, so
R ranks with 1/R of the batch each take the same step as one rank with all of it:
- PopArt and observation statistics absorb the whole batch's first and second moments;
- advantages are normalised with the minibatch's mean and std over all ranks;
- gradients are averaged weighted by each rank's element count, before the norm clip.
Every rank runs the same number of collectives per update (minibatches via `tensor_split`, empty
parts included), so no rank can wait for a collective another rank skips.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from hns_train.agents.chunks import Chunk, stack_chunks
from hns_train.agents.config import PPOConfig
from hns_train.agents.policy import ActorCritic


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    truncated: np.ndarray,
    truncated_value: np.ndarray,
    bootstrap_value: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns (T, B) for time-major arrays, with truncation semantics:
    after a truncated step the next value is `truncated_value[t]` and the GAE sum restarts."""
    steps = rewards.shape[0]
    advantages = np.zeros(rewards.shape, dtype=np.float32)
    running = np.zeros(rewards.shape[1:], dtype=np.float64)
    for t in reversed(range(steps)):
        next_value = values[t + 1] if t + 1 < steps else bootstrap_value
        next_value = np.where(truncated[t], truncated_value[t], next_value)
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * np.where(truncated[t], 0.0, running)
        advantages[t] = running
    return advantages, advantages + values.astype(np.float32)


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - predicted) / Var(target); NaN when the target is constant."""
    var = np.var(target)
    return float("nan") if var == 0 else float(1.0 - np.var(target - predicted) / var)


@dataclass
class Segments:
    """M = (T/L)·B segments of L steps, time-major, on the model's device."""

    obs: dict[str, torch.Tensor]  # (L, M, ...)
    state: torch.Tensor  # (M, 4, H)
    episode_start: torch.Tensor  # (L, M) bool
    actions: torch.Tensor  # (L, M, 5)
    logp: torch.Tensor  # (L, M)
    values: torch.Tensor  # (L, M), rollout-time, de-normalised
    advantages: torch.Tensor  # (L, M)
    returns: torch.Tensor  # (L, M), de-normalised

    def __len__(self) -> int:
        return self.state.shape[0]

    def select(self, index: torch.Tensor) -> Segments:
        return Segments(
            obs={k: v[:, index] for k, v in self.obs.items()},
            state=self.state[index],
            **{
                name: getattr(self, name)[:, index]
                for name in ("episode_start", "actions", "logp", "values", "advantages", "returns")
            },
        )


class RankSync(Protocol):
    """Sums over the ranks of a data-parallel group (distributed/ddp.py implements it)."""

    world_size: int

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replace `tensor` in place by its sum over all ranks and return it."""
        ...


class PPO:
    """Trainer for an `ActorCritic`: `update(chunks) -> statistics`, plus resumable state.

    `sync`: a `RankSync` when several ranks train one model on parts of each batch.
    `autocast_dtype`: e.g. torch.bfloat16 to run the loss's forward pass in mixed precision
    (parameters, optimiser and statistics stay float32/float64).
    """

    def __init__(
        self,
        model: ActorCritic,
        config: PPOConfig | None = None,
        sync: RankSync | None = None,
        autocast_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = model
        self.config = config or PPOConfig()
        self.sync = sync
        self.autocast_dtype = autocast_dtype
        self.optimizer = torch.optim.Adam(
            model.parameters(),
            lr=self.config.lr,
            weight_decay=self.config.weight_decay,
            eps=self.config.adam_eps,
        )
        self.version = 0

    def update(self, chunks: Chunk | Sequence[Chunk]) -> dict[str, float]:
        """One optimisation step on a batch of chunks; returns mean statistics."""
        batch = self._as_batch(chunks)
        advantages, returns = self._gae(batch)
        returns_t = torch.as_tensor(returns, device=self.model.device)
        if self.sync is None:
            self.model.update_value_normalizer(returns_t)
        else:
            self.model.update_value_normalizer(self._whole_batch_moments([(returns_t, None)])[0])
        segments = self._segments(batch, advantages, returns)

        cfg = self.config
        history: list[dict[str, float]] = []
        for _ in range(cfg.epochs):
            order = torch.randperm(len(segments), device=self.model.device)
            if self.sync is None:
                parts = order.chunk(cfg.minibatches)
            else:  # the same number of parts on every rank, some maybe empty
                parts = torch.tensor_split(order, cfg.minibatches)
            for index in parts:
                stats = self._minibatch_step(segments.select(index))
                if stats is not None:
                    history.append(stats)

        obs = self.model.obs_to_tensors(batch.obs, 2)
        if self.sync is None:
            self.model.update_obs_normalizer(obs)
        else:
            self._update_obs_normalizer_synced(obs)
        self.version += 1
        summary = (
            {k: float(np.mean([h[k] for h in history])) for k in history[0]} if history else {}
        )
        value_mean, value_std = self.model.value_norm.mean_std()
        summary.update(
            explained_variance=explained_variance(batch.values, returns),
            value_norm_mean=float(value_mean),
            value_norm_std=float(value_std),
            version=float(self.version),
        )
        return summary

    def _minibatch_step(self, seg: Segments) -> dict[str, float] | None:
        """One Adam step on a minibatch (this rank's part of it under `sync`)."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        if self.sync is None:
            with self._autocast():
                loss, stats = self._loss(seg)
            loss.backward()
        else:
            # Whole-minibatch element count and advantage moments, in one collective.
            adv = seg.advantages.to(torch.float64)
            head = torch.stack([adv.new_tensor(adv.numel()), adv.sum(), adv.square().sum()])
            n, s1, s2 = self.sync.all_sum(head).tolist()
            stats = None
            if adv.numel():
                mean = s1 / max(n, 1.0)
                std = float(np.sqrt(max(s2 - n * mean * mean, 0.0) / max(n - 1, 1.0)))
                with self._autocast():
                    loss, stats = self._loss(seg, adv_moments=(mean, std, n))
                loss.backward()
            self._average_gradients(weight=adv.numel(), total=n)
        grad_norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm))
        self.optimizer.step()
        if stats is not None:
            stats["grad_norm"] = grad_norm
        return stats

    def _autocast(self):
        return torch.autocast(
            device_type=self.model.device.type,
            dtype=self.autocast_dtype or torch.bfloat16,
            enabled=self.autocast_dtype is not None,
        )

    def _average_gradients(self, weight: int, total: float) -> None:
        """grad = Σ_r n_r·g_r / Σ_r n_r: each rank's mean-loss gradient weighted by its count,
        which is the gradient of the mean loss over the whole minibatch."""
        params = list(self.model.parameters())
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
        )
        flat.mul_(float(weight))
        self.sync.all_sum(flat)
        flat.div_(max(total, 1.0))
        offset = 0
        for p in params:
            size = p.numel()
            p.grad = flat[offset : offset + size].view_as(p).clone()
            offset += size

    @torch.no_grad()
    def _whole_batch_moments(
        self, items: list[tuple[torch.Tensor, torch.Tensor | None]], features: Sequence[int] = ()
    ) -> list[torch.Tensor | None]:
        """For each (x, row weight): two rows whose mean and second moment per trailing feature
        equal those of the (weighted) rows of x over all ranks; None where no rank has a row.

        Feeding the two rows to an `EmaMeanStd` folds in exactly the whole batch's moments, so
        the normalisers' own update rules (and PopArt's rescaling) apply unchanged.
        """
        sums = []
        for i, (x, w) in enumerate(items):
            width = features[i] if features else 1
            x = x.to(torch.float64).reshape(-1, width)
            w = torch.ones(len(x), dtype=torch.float64, device=x.device) if w is None else w
            w = w.to(torch.float64).reshape(-1, 1)
            sums.append(torch.cat([(w * x).sum(0), (w * x.square()).sum(0), w.sum().reshape(1)]))
        packed = self.sync.all_sum(torch.cat(sums))
        out, offset = [], 0
        for i in range(len(items)):
            width = features[i] if features else 1
            s1, s2 = packed[offset : offset + width], packed[offset + width : offset + 2 * width]
            total = packed[offset + 2 * width]
            offset += 2 * width + 1
            if total <= 0:
                out.append(None)
                continue
            mean = s1 / total
            sd = (s2 / total - mean.square()).clamp(min=0).sqrt()
            rows = torch.stack([mean + sd, mean - sd])
            out.append(rows if features else rows.reshape(-1))
        return out

    @torch.no_grad()
    def _update_obs_normalizer_synced(self, obs: dict[str, torch.Tensor]) -> None:
        """`update_obs_normalizer` with the whole batch's statistics (the same weighting: entity
        rows count where their entity exists)."""
        norm = self.model.obs_norm
        keys = list(norm.stats.keys())
        items, widths = [], []
        for key in keys:
            weight_key = norm.row_weight.get(key)
            items.append((obs[key], None if weight_key is None else obs[weight_key]))
            widths.append(obs[key].shape[-1])
        for key, rows in zip(keys, self._whole_batch_moments(items, widths), strict=True):
            if rows is not None:
                norm.stats[key].update(rows)

    @torch.no_grad()
    def evaluate_loss(self, chunks: Chunk | Sequence[Chunk]) -> dict[str, float]:
        """The update's loss terms on the whole batch, without changing anything."""
        batch = self._as_batch(chunks)
        advantages, returns = self._gae(batch)
        _, stats = self._loss(self._segments(batch, advantages, returns))
        return stats

    def _as_batch(self, chunks: Chunk | Sequence[Chunk]) -> Chunk:
        batch = chunks if isinstance(chunks, Chunk) else stack_chunks(chunks)
        batch.validate(len(self.model.action_sizes))
        if batch.segment_len != self.config.bptt_len:
            raise ValueError(
                f"chunk stores the LSTM state every {batch.segment_len} steps; "
                f"expected bptt_len = {self.config.bptt_len}"
            )
        if batch.lstm_state.shape[3] != self.model.config.lstm_dim:
            raise ValueError(
                f"lstm_state has width {batch.lstm_state.shape[3]}; "
                f"expected lstm_dim = {self.model.config.lstm_dim}"
            )
        return batch

    def _gae(self, batch: Chunk) -> tuple[np.ndarray, np.ndarray]:
        return compute_gae(
            batch.rewards,
            batch.values,
            batch.truncated,
            batch.truncated_value,
            batch.bootstrap_value,
            self.config.gamma,
            self.config.gae_lambda,
        )

    def _segments(self, batch: Chunk, advantages: np.ndarray, returns: np.ndarray) -> Segments:
        n_seg, length = batch.lstm_state.shape[0], batch.segment_len
        device = self.model.device

        def cut(x: np.ndarray | torch.Tensor) -> torch.Tensor:
            # (T, B, ...) -> (n_seg, L, B, ...) -> (L, n_seg * B, ...): segment index = s * B + b
            x = torch.as_tensor(x, device=device)
            rest = x.shape[2:]
            return (
                x.reshape(n_seg, length, x.shape[1], *rest)
                .transpose(0, 1)
                .reshape(length, -1, *rest)
            )

        obs = self.model.obs_to_tensors(batch.obs, 2)
        state = torch.as_tensor(batch.lstm_state, dtype=torch.float32, device=device)
        return Segments(
            obs={k: cut(v) for k, v in obs.items()},
            state=state.reshape(-1, *state.shape[2:]),
            episode_start=cut(batch.episode_start.astype(bool)),
            actions=cut(batch.actions.astype(np.int64)),
            logp=cut(batch.logp.astype(np.float32)),
            values=cut(batch.values.astype(np.float32)),
            advantages=cut(advantages),
            returns=cut(returns),
        )

    def _loss(
        self, seg: Segments, adv_moments: tuple[float, float, float] | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """`adv_moments`: (mean, std, count) of the advantages over all ranks' minibatch parts;
        None = this minibatch's own."""
        cfg = self.config
        model = self.model
        new = model.evaluate(seg.obs, seg.state, seg.episode_start, seg.actions)

        log_ratio = new.logp.float() - seg.logp
        ratio = log_ratio.exp()
        adv = seg.advantages
        if adv_moments is not None:
            mean, std, count = adv_moments
            if cfg.normalize_advantages and count > 1:
                adv = (adv - mean) / (std + 1e-8)
        elif cfg.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = torch.max(
            -adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
        ).mean()

        target = model.normalize_value(seg.returns)
        value_error = (new.value - target).square()
        if cfg.clip_value_loss:
            old = model.normalize_value(seg.values)
            clipped = old + (new.value - old).clamp(-cfg.value_clip, cfg.value_clip)
            value_error = torch.max(value_error, (clipped - target).square())
        value_loss = 0.5 * value_error.mean()

        entropy = new.entropy.mean()
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        with torch.no_grad():
            stats = {
                "loss": float(loss),
                "policy_loss": float(policy_loss),
                "value_loss": float(value_loss),
                "entropy": float(entropy),
                "approx_kl": float(((ratio - 1) - log_ratio).mean()),
                "clip_fraction": float(((ratio - 1).abs() > cfg.clip_coef).float().mean()),
            }
        return loss, stats

    # ----- resumable state: plain tensors and numbers only (torch.load(weights_only=True)) -----

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
