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
   Adam step (lr 3e-4, L2 weight decay 1e-6) after clipping the gradient norm to 5. On a CPU
   a minibatch's forward and backward run in passes of at most `cpu_pass_samples` (4,096),
   each pass's loss weighted by its share of the learned steps, so that their summed gradient
   is the minibatch's and its activations stay small enough for the heap to reuse them.
4. Observation statistics absorb the batch, after the gradient steps, so the step itself
   optimises against the same normalisation that produced the samples.

Loss = clipped surrogate (0.2) + 0.5 · ½(V̂ - R̂)² on normalised values (optionally clipped)
       - 0.01 · entropy summed over the 5 action heads.

Two kinds of batch, one rule: the pipeline's trainer passes chunks (host arrays, only the
learning policy's rows), a pod passes a `Rollout` of device tensors with every row of its worlds
and a `learn` mask; losses, advantage moments and all statistics are means over the learned
steps, so both take the same step from the same samples. Everything runs as tensor code on the
model's device, GAE included; `update_async` reads nothing back to the host (the statistics stay
on the device, with a `finite` flag for the whole state), and `update` reads them once.

Data parallelism (`sync`, a `RankSync`; None = one process, unchanged): each rank holds a part of
the batch, and every number that depends on the whole batch is made from sums over ranks, so
R ranks with 1/R of the batch each take the same step as one rank with all of it:
- PopArt and observation statistics absorb the whole batch's first and second moments;
- advantages are normalised with the minibatch's mean and std over all ranks;
- gradients are averaged weighted by each rank's element count, before the norm clip.
Every rank runs the same number of collectives per update (minibatches via `tensor_split`, empty
parts included), so no rank can wait for a collective another rank skips: one for the update's
small sums (PopArt's, the observations' and every minibatch's advantage moments, all known from
the batch before the first step, so one wake-up of every rank, not one per sum) and one per
minibatch for its gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from hns_train.agents.chunks import FIELD_DTYPES, Chunk, stack_chunks, take_streams
from hns_train.agents.config import PPOConfig
from hns_train.agents.normalizers import popart_fold
from hns_train.agents.policy import ActorCritic


def compute_gae(
    rewards,
    values,
    truncated,
    truncated_value,
    bootstrap_value,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (T, B) for time-major arrays or tensors, with truncation
    semantics: after a truncated step the next value is `truncated_value[t]` and the GAE sum
    restarts. Runs where the inputs are (tensors on their device; arrays on the CPU), with the
    running sum in float64, and never reads a value back to the host."""
    rewards = torch.as_tensor(rewards)
    device = rewards.device

    def f64(x):
        return torch.as_tensor(x, device=device).to(torch.float64)

    r, v = f64(rewards), f64(values)
    cut = torch.as_tensor(truncated, device=device).to(torch.bool)
    # every step's TD error at once; only the discounted running sum stays in the loop
    following = torch.cat([v[1:], f64(bootstrap_value).unsqueeze(0)])
    delta = r + gamma * torch.where(cut, f64(truncated_value), following) - v
    discount = (~cut).to(torch.float64) * (gamma * lam)
    running = torch.zeros(r.shape[1:], dtype=torch.float64, device=device)
    sums = torch.empty_like(r)
    for t in reversed(range(r.shape[0])):
        running = torch.addcmul(delta[t], discount[t], running, out=sums[t])
    advantages = sums.to(torch.float32)
    return advantages, advantages + v.to(torch.float32)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of x, over the elements where `mask` (same shape, bool or 0/1) is set; 0 when none."""
    if mask is None:
        return x.mean()
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def explained_variance(
    predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """1 - Var(target - predicted) / Var(target) over the masked elements; NaN when the target
    is constant."""
    predicted, target = predicted.to(torch.float64), target.to(torch.float64)

    def var(x):
        return masked_mean((x - masked_mean(x, mask)).square(), mask)

    v = var(target)
    return torch.where(v > 0, 1.0 - var(target - predicted) / v, torch.nan)


@dataclass
class Rollout(Chunk):
    """A training batch as time-major tensors on the learner's device: a `Chunk`'s fields
    (chunks.py) without `policy_version`, plus `learn`, the steps the loss and the statistics
    count.

    The pipeline's chunks hold only the learning policy's steps (`learn` None = every step);
    a pod's rollout holds every agent row of every world, and `learn` marks the rows the
    learning policy played while the agent was present."""

    policy_version: None = None  # the learner reads no version off its batch
    learn: torch.Tensor | None = None  # (T, B) bool

    @classmethod
    def from_chunk(cls, chunk: Chunk, model: ActorCritic) -> Rollout:
        """A (validated) chunk's arrays on the model's device, observations checked against its
        layout."""
        arrays = {
            f.name: np.asarray(getattr(chunk, f.name), FIELD_DTYPES[f.name])
            for f in fields(cls)
            if f.name not in ("obs", "policy_version", "learn")
        }
        return cls(
            obs=model.obs_to_tensors(chunk.obs, 2),
            **{name: torch.as_tensor(x, device=model.device) for name, x in arrays.items()},
        )


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
    learn: torch.Tensor | None = None  # (L, M) bool; None = every step

    def __len__(self) -> int:
        return self.state.shape[0]

    def select(self, index: torch.Tensor) -> Segments:
        return take_streams(self, index, lambda name: 0 if name == "state" else 1)


class RankSync(Protocol):
    """Sums over the ranks of a data-parallel group (distributed/ddp.py implements it)."""

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
            # one kernel per parameter for the whole step, not one per operation of it
            fused=_fused_adam(model.device),
        )
        self.version = 0

    def update(self, batch: Chunk | Sequence[Chunk] | Rollout) -> dict[str, float]:
        """One optimisation step on chunks (host arrays) or a `Rollout` (device tensors);
        returns mean statistics. The statistics are read back to the host once, at the end."""
        stats = self.update_async(batch)
        return dict(zip(stats, torch.stack(list(stats.values())).tolist(), strict=True))

    def update_async(self, batch: Chunk | Sequence[Chunk] | Rollout) -> dict[str, torch.Tensor]:
        """`update` with the statistics left on the device (0-d float64 tensors, one of them
        `finite`: 1 when every weight, normaliser and optimiser moment is finite). Nothing in
        it waits for the device, so a pod can launch its next rollout before reading them."""
        batch = self._as_rollout(batch)
        cfg = self.config
        advantages, returns = compute_gae(
            batch.rewards,
            batch.values,
            batch.truncated,
            batch.truncated_value,
            batch.bootstrap_value,
            cfg.gamma,
            cfg.gae_lambda,
        )
        learn, model = batch.learn, self.model
        segments = self._segments(batch, advantages, returns)
        # every epoch's minibatches, drawn now (the same number of parts on every rank, some
        # maybe empty under `sync`)
        indices = [
            index
            for _ in range(cfg.epochs)
            for index in torch.tensor_split(
                torch.randperm(len(segments), device=model.device), cfg.minibatches
            )
        ]
        # The small sums, from the batch alone; under `sync` one collective makes them the
        # whole batch's: the returns' (PopArt), the observations', each minibatch's advantages'.
        local = [_advantage_moments(segments, index) for index in indices]
        obs_sums = model.obs_norm.batch_sums(batch.obs, learn)
        small = [model.value_norm.sums(returns, learn), *obs_sums, *local]
        packed = torch.cat(small)
        if self.sync is not None:
            self.sync.all_sum(packed)
        value_sums, *whole = packed.split([len(part) for part in small])
        obs_sums, moments = whole[: len(obs_sums)], whole[len(obs_sums) :]
        # PopArt: the value statistics absorb the returns, the value head keeps its outputs
        popart_fold(model.value_norm, model.value_net.head, value_sums)

        history: list[torch.Tensor] = []
        names: list[str] = []
        for index, mine, all_ranks in zip(indices, local, moments, strict=True):
            if self.sync is None and index.numel() == 0:
                continue
            stats = self._minibatch_step(segments.select(index), mine[0], all_ranks)
            if stats is not None:
                names = list(stats)
                history.append(torch.stack(list(stats.values())))

        model.obs_norm.fold(obs_sums)
        self.version += 1
        out = dict(zip(names, torch.stack(history).mean(0), strict=True)) if history else {}
        value_mean, value_std = self.model.value_norm.mean_std()
        f64 = torch.float64
        out.update(
            explained_variance=explained_variance(batch.values, returns, learn),
            value_norm_mean=value_mean.to(f64),
            value_norm_std=value_std.to(f64),
            version=torch.tensor(float(self.version), dtype=f64, device=self.model.device),
            finite=self.finite(),
        )
        return out

    @torch.no_grad()
    def finite(self) -> torch.Tensor:
        """1.0 when every weight, buffer and optimiser moment is finite, else 0.0 (on the
        device, no host read): the largest |element| over all of them, NaN when any element is
        and inf when one is infinite, in one multi-tensor pass (not two operations a tensor)."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        for state in self.optimizer.state.values():
            tensors += [t for t in state.values() if torch.is_tensor(t)]
        tensors = [t for t in tensors if t.is_floating_point() and t.numel()]
        largest = nn.utils.get_total_norm(tensors, float("inf"), foreach=True)
        return largest.isfinite().to(torch.float64)

    def _minibatch_step(
        self, seg: Segments, count: torch.Tensor, moments: torch.Tensor
    ) -> dict[str, torch.Tensor] | None:
        """One Adam step on a minibatch (this rank's part of it under `sync`, maybe empty: then
        it only takes part in the collective and returns None); `count`: its learned steps here,
        `moments`: the whole minibatch's advantage moments (over all ranks)."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        stats = None
        if len(seg):
            # each pass's loss is a mean over its learned steps: weighted by its share of the
            # minibatch's, the passes' gradients and statistics sum to the whole minibatch's
            learned = torch.ones_like(seg.logp) if seg.learn is None else seg.learn.float()
            total = learned.sum().clamp(min=1.0)
            for index in self._passes(seg):
                part = seg if index is None else seg.select(index)
                share = (learned if index is None else learned[:, index]).sum() / total
                with self._autocast():
                    loss, part_stats = self._loss(part, moments)
                (loss * share).backward()
                part_stats = {k: v * share.to(v.dtype) for k, v in part_stats.items()}
                stats = part_stats if stats is None else _sum_stats(stats, part_stats)
        if self.sync is not None:
            self._average_gradients(weight=count, total=moments[0])
        grad_norm = nn.utils.clip_grad_norm_(
            self.model.parameters(), cfg.max_grad_norm, foreach=True
        )
        self.optimizer.step()
        if stats is not None:
            stats["grad_norm"] = grad_norm.detach().to(torch.float64)
        return stats

    def _passes(self, seg: Segments) -> list[torch.Tensor | None]:
        """The segments of each forward-and-backward pass over a minibatch: all at once
        ([None]), or on a CPU parts of at most `cpu_pass_samples` samples."""
        limit = self.config.cpu_pass_samples
        samples = len(seg) * seg.logp.shape[0]
        if self.model.device.type != "cpu" or limit == 0 or samples <= limit:
            return [None]
        parts = -(-samples // limit)
        return list(torch.arange(len(seg), device=self.model.device).tensor_split(parts))

    def _autocast(self):
        return torch.autocast(
            device_type=self.model.device.type,
            dtype=self.autocast_dtype or torch.bfloat16,
            enabled=self.autocast_dtype is not None,
        )

    def _average_gradients(self, weight: torch.Tensor, total: torch.Tensor) -> None:
        """grad = Σ_r n_r·g_r / Σ_r n_r: each rank's mean-loss gradient weighted by its count,
        which is the gradient of the mean loss over the whole minibatch."""
        params = list(self.model.parameters())
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
        )
        flat.mul_(weight.to(flat.dtype))
        self.sync.all_sum(flat)
        flat.div_(total.clamp(min=1.0).to(flat.dtype))
        offset = 0
        for p in params:
            size = p.numel()
            p.grad = flat[offset : offset + size].view_as(p).clone()
            offset += size

    def _as_rollout(self, batch: Chunk | Sequence[Chunk] | Rollout) -> Rollout:
        if not isinstance(batch, Rollout):
            batch = batch if isinstance(batch, Chunk) else stack_chunks(batch)
            batch.validate(len(self.model.action_sizes))
            batch = Rollout.from_chunk(batch, self.model)
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

    def _segments(
        self, batch: Rollout, advantages: torch.Tensor, returns: torch.Tensor
    ) -> Segments:
        n_seg, length = batch.lstm_state.shape[0], batch.segment_len

        def cut(x: torch.Tensor) -> torch.Tensor:
            # (T, B, ...) -> (n_seg, L, B, ...) -> (L, n_seg * B, ...): segment index = s * B + b
            rest = x.shape[2:]
            return (
                x.reshape(n_seg, length, x.shape[1], *rest)
                .transpose(0, 1)
                .reshape(length, -1, *rest)
            )

        state = batch.lstm_state
        return Segments(
            obs={k: cut(v) for k, v in batch.obs.items()},
            state=state.reshape(-1, *state.shape[2:]),
            episode_start=cut(batch.episode_start),
            actions=cut(batch.actions),
            logp=cut(batch.logp),
            values=cut(batch.values),
            advantages=cut(advantages),
            returns=cut(returns),
            learn=None if batch.learn is None else cut(batch.learn),
        )

    def _loss(
        self, seg: Segments, adv_moments: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`adv_moments`: (count, sum, sum of squares) of the learned advantages of the whole
        minibatch (over all ranks under `sync`), float64 on the device."""
        cfg = self.config
        model = self.model
        new = model.evaluate(seg.obs, seg.state, seg.episode_start, seg.actions)
        learn = seg.learn

        log_ratio = new.logp.float() - seg.logp
        ratio = log_ratio.exp()
        adv = seg.advantages
        if cfg.normalize_advantages:
            n, s1, s2 = adv_moments
            mean = s1 / n.clamp(min=1.0)
            std = ((s2 - n * mean.square()).clamp(min=0.0) / (n - 1).clamp(min=1.0)).sqrt()
            normalised = ((adv - mean) / (std + 1e-8)).to(adv.dtype)
            adv = torch.where(n > 1, normalised, adv)
        policy_loss = masked_mean(
            torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)),
            learn,
        )

        target = model.normalize_value(seg.returns)
        value_error = (new.value - target).square()
        if cfg.clip_value_loss:
            old = model.normalize_value(seg.values)
            clipped = old + (new.value - old).clamp(-cfg.value_clip, cfg.value_clip)
            value_error = torch.max(value_error, (clipped - target).square())
        value_loss = 0.5 * masked_mean(value_error, learn)

        entropy = masked_mean(new.entropy, learn)
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        with torch.no_grad():
            stats = {
                "loss": loss,
                "policy_loss": policy_loss,
                "value_loss": value_loss,
                "entropy": entropy,
                "approx_kl": masked_mean((ratio - 1) - log_ratio, learn),
                "clip_fraction": masked_mean(((ratio - 1).abs() > cfg.clip_coef).float(), learn),
            }
            stats = {k: v.detach().to(torch.float64) for k, v in stats.items()}
        return loss, stats

    # ----- resumable state: plain tensors and numbers only (torch.load(weights_only=True)) -----

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Weights, optimiser moments and version from `state`; the optimiser's settings stay
        this learner's own (`config.lr` ...), so a resume with a new lr, or a population member
        that copied another's state and then perturbed its settings, trains with its own."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group.update(
                lr=self.config.lr,
                weight_decay=self.config.weight_decay,
                eps=self.config.adam_eps,
                fused=_fused_adam(self.model.device),
            )
        self.version = int(state["version"])


def _sum_stats(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: a[k] + b[k] for k in a}


def _fused_adam(device: torch.device) -> bool | None:
    """Whether Adam runs its fused kernel on `device` (None: torch's own default there)."""
    return True if device.type in ("cpu", "cuda") else None


def _advantage_moments(seg: Segments, index: torch.Tensor) -> torch.Tensor:
    """(count, sum, sum of squares) of the learned advantages of the segments `index`,
    float64."""
    adv = seg.advantages.index_select(1, index).to(torch.float64)
    learn = None if seg.learn is None else seg.learn.index_select(1, index)
    m = torch.ones_like(adv) if learn is None else learn.to(torch.float64)
    return torch.stack([m.sum(), (m * adv).sum(), (m * adv.square()).sum()])
