"""The paper's entity-attention + LSTM network (spec §6), used for both policy and value.

One `EntityNetwork` maps a sequence of (already normalised) observations to outputs:

    lidar (R,) --circular conv 9x3, ReLU, flatten--> (9R,)
    self vector s = observation_self ‖ lidar features                        (10 + 9R = 280)
    self token     = ReLU(dense_128(s))
    entity token i = ReLU(dense_128,type(row_i ‖ s))      one dense layer per entity type
    one residual block: x + W_o · MHA(LayerNorm(x)), 4 heads x 32, over [self, entities]
    features = [self token out ‖ masked mean of entity tokens out]            (256)
    ReLU(dense_256) -> LSTM 256 -> LayerNorm -> linear head (init std 0.01)

Attention keys are masked by the visibility masks (policy) or the existence masks (value). The
self token is always a valid key, so a query never sees an all-masked row and no NaN can arise;
with no entity in the mask the pooled half is zero ("nothing seen"). Masked entities reach the
output through no path: their keys get zero weight and their own tokens are left out of the
pool. The LSTM state is zeroed before every step flagged as an episode start.

The policy head has 3 x 11 + 2 + 2 = 37 logits, the value head 1 output. With the default sizes
each network has ≈0.81 M parameters (the LSTM holds 0.53 M), ≈1.6 M for policy + value.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from hns_train.agents.config import NetworkConfig
from hns_train.agents.observations import ObsLayout
from hns_train.envs.contract import LIDAR_KEY, SELF_KEY

LSTMState = tuple[torch.Tensor, torch.Tensor]  # (h, c), each (N, lstm_dim)


class CircularLidarConv(nn.Module):
    """1-D convolution around the ring of lidar rays: (N, R) -> (N, filters * R)."""

    def __init__(self, filters: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, filters, kernel, padding=kernel // 2, padding_mode="circular")

    def forward(self, lidar: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(lidar.unsqueeze(1))).flatten(1)


class EntityEmbedding(nn.Module):
    """ReLU(dense(row ‖ self)) for every row of one entity type.

    The weight is one dense layer over the concatenation; applying its two column blocks
    separately is the same function without repeating the 280-wide self vector per row.
    """

    def __init__(self, row_dim: int, self_dim: int, out_dim: int) -> None:
        super().__init__()
        self.row_dim = row_dim
        self.dense = nn.Linear(row_dim + self_dim, out_dim)

    def forward(self, rows: torch.Tensor, self_vec: torch.Tensor) -> torch.Tensor:
        w_row, w_self = self.dense.weight.split(
            [self.row_dim, self.dense.in_features - self.row_dim], 1
        )
        per_row = F.linear(rows, w_row, self.dense.bias)
        return F.relu(per_row + F.linear(self_vec, w_self).unsqueeze(1))


class ResidualSelfAttention(nn.Module):
    """x + W_o · MHA(LayerNorm(x)) with key masking; (N, L, D) -> (N, L, D)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        n, length, dim = x.shape
        q, k, v = (
            self.qkv(self.norm(x))
            .view(n, length, 3, self.heads, dim // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        # Written out rather than F.scaled_dot_product_attention: for ~10 tokens the fused CPU
        # kernel is about 3x slower than three small batched matmuls.
        scores = (q @ k.transpose(-1, -2)) * self.scale
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        attended = scores.softmax(-1) @ v
        return x + self.out(attended.transpose(1, 2).reshape(n, length, dim))


class EntityNetwork(nn.Module):
    """Entity attention + LSTM trunk with one linear head.

    `mask` names the entity kinds' mask its attention keys use: "visible_mask" (policy:
    `mask_*_obs`) or "exists_mask" (value: `mask_*_obs_spoof`).
    """

    def __init__(self, layout: ObsLayout, config: NetworkConfig, n_outputs: int, mask: str) -> None:
        super().__init__()
        self.layout = layout
        self.mask_keys = [getattr(s.kind, mask) for s in layout.entities]
        d = config.embed_dim
        self.lidar = (
            CircularLidarConv(config.lidar_filters, config.lidar_kernel)
            if layout.lidar_rays
            else None
        )
        self_dim = layout.self_dim + config.lidar_filters * layout.lidar_rays
        self.self_embed = nn.Linear(self_dim, d)
        self.entity_embed = nn.ModuleList(
            EntityEmbedding(s.dim, self_dim, d) for s in layout.entities
        )
        self.attention = ResidualSelfAttention(d, config.attention_heads)
        self.dense = nn.Linear(2 * d, config.dense_dim)
        self.lstm = nn.LSTMCell(config.dense_dim, config.lstm_dim)
        self.lstm_norm = nn.LayerNorm(config.lstm_dim)
        self.head = nn.Linear(config.lstm_dim, n_outputs)
        nn.init.normal_(self.head.weight, std=config.head_init_std)
        nn.init.zeros_(self.head.bias)

    def encode(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Per-step features before the LSTM: (N, ...) observations -> (N, dense_dim)."""
        self_vec = obs[SELF_KEY]
        if self.lidar is not None:
            self_vec = torch.cat([self_vec, self.lidar(obs[LIDAR_KEY])], dim=-1)
        self_token = F.relu(self.self_embed(self_vec))
        tokens = [self_token.unsqueeze(1)] + [
            embed(obs[s.kind.key], self_vec)
            for embed, s in zip(self.entity_embed, self.layout.entities, strict=True)
        ]
        self_mask = torch.ones_like(self_token[:, :1], dtype=torch.bool)
        key_mask = torch.cat([self_mask] + [obs[k] > 0.5 for k in self.mask_keys], dim=1)
        out = self.attention(torch.cat(tokens, dim=1), key_mask)
        self_token, entities, entity_mask = out[:, 0], out[:, 1:], key_mask[:, 1:]
        # where(), not a product: a masked token must contribute exactly nothing.
        summed = torch.where(entity_mask.unsqueeze(-1), entities, 0.0).sum(1)
        pooled = summed / entity_mask.sum(1, keepdim=True).clamp(min=1)
        return F.relu(self.dense(torch.cat([self_token, pooled], dim=-1)))

    def forward(
        self,
        obs: Mapping[str, torch.Tensor],
        state: LSTMState,
        episode_start: torch.Tensor,
    ) -> tuple[torch.Tensor, LSTMState]:
        """obs (T, N, ...), state (h, c) before step 0, episode_start (T, N) bool
        -> head outputs (T, N, n_outputs) and the state after step T-1."""
        steps, n = episode_start.shape
        flat = {k: obs[k].flatten(0, 1) for k in self.layout.shapes}
        features = self.encode(flat).view(steps, n, -1)
        h, c = state
        outputs = []
        for t in range(steps):
            keep = (~episode_start[t]).unsqueeze(-1).to(h.dtype)
            h, c = self.lstm(features[t], (h * keep, c * keep))
            outputs.append(h)
        hidden = self.lstm_norm(torch.stack(outputs))
        return self.head(hidden), (h, c)
