"""Running statistics: observation normalisation and PopArt value normalisation.

Both use `EmaMeanStd`: an exponential moving average (β = 0.99999) of the mean and second
moment, with the Adam-style debiasing term 1 - β^n. One update = one batch (not one sample).
The debiased average therefore equals the exact mean of the batch statistics for the first
≈1/(1-β) = 100k updates and only then starts to forget: an exact running mean that turns into
an EMA by itself, with no switch-over constant. Before the first update mean = 0 and std = 1.
Statistics are float64 buffers, so they travel with `state_dict` and 1 - β keeps its precision.
A batch is folded in from its sums (`EmaMeanStd.sums`: Σw·x, Σw·x², Σw; `fold_batch`); several
ranks that train one model add theirs up first (`reduce`), so every rank folds in the whole
batch.

Observation normalisation (`ObsNormalizer`): per feature, i.e. the last axis of every non-mask
key; entity rows of one type share statistics (slots are interchangeable) and only rows that
exist this episode (spoof mask) contribute. Normalised values are clipped to [-5, 5]; masks pass
through untouched. The trainer updates it, so actors and learner always use the same numbers.

Value normalisation (`popart_update`): the value head predicts (V - μ) / σ. When μ, σ move, the
head's weight and bias are rescaled so that σ·head(x) + μ is unchanged (van Hasselt et al. 2016).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from hns_train.agents.config import NetworkConfig
from hns_train.agents.observations import ObsLayout

# Sums a tensor in place over the ranks of a data-parallel group (`ppo.RankSync.all_sum`), so
# the statistics fold in the whole batch's moments; the same on every rank.
Reduce = Callable[[torch.Tensor], object]


class EmaMeanStd(nn.Module):
    """Debiased EMA of mean and variance over all but the trailing `shape` dims."""

    def __init__(self, shape: tuple[int, ...], beta: float, min_var: float) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.beta = beta
        self.min_var = min_var
        self.register_buffer("biased_mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("biased_sq", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("debias", torch.zeros((), dtype=torch.float64))

    def sums(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """(Σ w·x, Σ w·x², Σ w) over the rows, per trailing feature, packed in one float64
        tensor of 2·features + 1: what `fold` takes, and what ranks add up. `weight` (x's
        leading dims, 0/1) drops rows, e.g. absent entities."""
        x = x.to(torch.float64).reshape((-1,) + self.shape)
        w = torch.ones(len(x), dtype=x.dtype, device=x.device) if weight is None else weight
        w = w.to(torch.float64).reshape(-1, *([1] * len(self.shape)))
        moments = [(w * x).sum(0).reshape(-1), (w * x.square()).sum(0).reshape(-1)]
        return torch.cat([*moments, w.sum().reshape(1)])

    @torch.no_grad()
    def fold(self, sums: torch.Tensor) -> None:
        """Fold in the batch whose `sums` these are; with no rows nothing changes (a `where`,
        not an `if`: no host read of the device's count)."""
        total = sums[-1]
        mean, sq = (
            (part / total.clamp(min=1e-300)).reshape(self.shape)
            for part in sums[:-1].split(self.biased_mean.numel())
        )
        b = self.beta
        new = [
            self.biased_mean * b + (1 - b) * mean,
            self.biased_sq * b + (1 - b) * sq,
            self.debias * b + (1 - b),
        ]
        for buffer, value in zip((self.biased_mean, self.biased_sq, self.debias), new, strict=True):
            buffer.copy_(torch.where(total > 0, value, buffer))

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Current (mean, std) as float32; (0, 1) before the first update.

        Kept until a buffer changes (in place: its version counter moves; or replaced, as
        `.to(device)` does): every act and every training step reads them, and they change
        only when a batch is folded in or a state is loaded. A torch.distributed collective
        writes in place without moving the counter: the one that writes buffers,
        `DataParallel.broadcast_state`, runs before the first read."""
        buffers = (self.biased_mean, self.biased_sq, self.debias)
        versions = [b._version for b in buffers]
        cached = self.__dict__.get("_mean_std_cache")
        if (
            cached is not None
            and cached[1] == versions
            and all(a is b for a, b in zip(cached[0], buffers, strict=True))
        ):
            return cached[2]
        with torch.no_grad():
            result = self._mean_std()
        self.__dict__["_mean_std_cache"] = (buffers, versions, result)
        return result

    def _mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        seen = self.debias > 0
        d = self.debias.clamp(min=1e-300)
        mean = self.biased_mean / d
        var = (self.biased_sq / d - mean.square()).clamp(min=self.min_var)
        mean = torch.where(seen, mean, torch.zeros_like(mean))
        std = torch.where(seen, var.sqrt(), torch.ones_like(var))
        return mean.float(), std.float()


class ObsNormalizer(nn.Module):
    """Per-feature running normalisation of every non-mask observation key."""

    def __init__(self, layout: ObsLayout, config: NetworkConfig) -> None:
        super().__init__()
        self.clip = config.obs_clip
        self.stats = nn.ModuleDict(
            {
                key: EmaMeanStd(
                    layout.shapes[key][-1:], config.obs_norm_beta, config.obs_norm_min_var
                )
                for key in layout.feature_keys
            }
        )
        # Entity features count only where the entity exists, not the zero padding of absent ones.
        self.row_weight = {s.kind.key: s.kind.exists_mask for s in layout.entities}

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(obs)
        for key, stat in self.stats.items():
            mean, std = stat.mean_std()
            out[key] = ((obs[key] - mean) / std).clamp(-self.clip, self.clip)
        return out

    def row_weights(
        self, key: str, obs: Mapping[str, torch.Tensor], steps: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Which rows of `obs[key]` count: entity rows where the entity exists, and only on the
        `steps` (the batch's leading dims, bool) that are trained on; None = all."""
        weight_key = self.row_weight.get(key)
        weight = None if weight_key is None else obs[weight_key].to(torch.float32)
        if steps is None:
            return weight
        s = steps.to(torch.float32)
        if weight is None:
            return s
        return weight * s.reshape(*s.shape, *([1] * (weight.dim() - s.dim())))

    @torch.no_grad()
    def update(
        self,
        obs: Mapping[str, torch.Tensor],
        steps: torch.Tensor | None = None,
        reduce: Reduce | None = None,
    ) -> None:
        """Fold in a batch; `steps` (the leading dims, bool): only those rows count."""
        fold_batch(list(self.stats.values()), self.batch_sums(obs, steps), reduce)

    @torch.no_grad()
    def batch_sums(
        self, obs: Mapping[str, torch.Tensor], steps: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Every statistic's sums of a batch, in `stats` order: what `fold` takes."""
        return [
            stat.sums(obs[key], self.row_weights(key, obs, steps))
            for key, stat in self.stats.items()
        ]

    @torch.no_grad()
    def fold(self, sums: Sequence[torch.Tensor]) -> None:
        """Fold in a batch from its `batch_sums` (over every rank where several train)."""
        fold_batch(list(self.stats.values()), sums)


@torch.no_grad()
def fold_batch(
    stats: Sequence[EmaMeanStd], sums: Sequence[torch.Tensor], reduce: Reduce | None = None
) -> None:
    """Fold each statistic's batch `sums` (`EmaMeanStd.sums`) into it; `reduce` (in place)
    first turns them into the whole batch's over several ranks, every statistic's sums packed
    in one tensor (one collective)."""
    packed = torch.cat(list(sums))
    if reduce is not None:
        reduce(packed)
    for stat, part in zip(stats, packed.split([len(p) for p in sums]), strict=True):
        stat.fold(part)


@torch.no_grad()
def popart_update(
    stats: EmaMeanStd,
    head: nn.Linear,
    targets: torch.Tensor,
    weight: torch.Tensor | None = None,
    reduce: Reduce | None = None,
) -> None:
    """Update the value statistics with `targets` (those where `weight` is set) and rescale
    `head` to preserve its de-normalised outputs: σ' (W' x + b') + μ' = σ (W x + b) + μ."""
    sums = stats.sums(targets, weight)
    if reduce is not None:
        reduce(sums)
    popart_fold(stats, head, sums)


@torch.no_grad()
def popart_fold(stats: EmaMeanStd, head: nn.Linear, sums: torch.Tensor) -> None:
    """`popart_update` from the targets' `sums` (`EmaMeanStd.sums`, over every rank where
    several train)."""
    old_mean, old_std = stats.mean_std()
    stats.fold(sums)
    new_mean, new_std = stats.mean_std()
    head.weight.mul_(old_std / new_std)
    head.bias.mul_(old_std).add_(old_mean - new_mean).div_(new_std)
