"""`MLPNetwork`, the `mlp` network kind: a small feed-forward network with no memory.

The shipped example of the network interface (`agents/network_kinds.py`), and a baseline for
the paper's entity network. Each step's observation is flattened into one vector:

    self ‖ lidar ‖ for each entity kind: its rows x mask, flattened ‖ its mask

(`mask` is the visible mask for the policy network, the exists mask for the value network, so
a masked entity reaches the output through no path, as in the entity network), then
`mlp_layers` x (dense `mlp_dim`, ReLU), LayerNorm and a linear `head` (init std
`head_init_std`, as the entity network's). The recurrent state the rest of the system keeps per
agent is passed through unchanged: an episode start has nothing to forget.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from hns_train.agents.config import NetworkConfig
from hns_train.agents.networks import LSTMState
from hns_train.agents.observations import ObsLayout
from hns_train.envs.contract import LIDAR_KEY, SELF_KEY


class MLPNetwork(nn.Module):
    """Flattened observation -> `mlp_layers` ReLU layers -> LayerNorm -> linear head."""

    def __init__(self, layout: ObsLayout, config: NetworkConfig, n_outputs: int, mask: str) -> None:
        super().__init__()
        self.layout = layout
        self.slots = [(s.kind.key, getattr(s.kind, mask)) for s in layout.entities]
        width = layout.self_dim + layout.lidar_rays
        width += sum(s.count * (s.dim + 1) for s in layout.entities)
        layers: list[nn.Module] = []
        for _ in range(config.mlp_layers):
            layers += [nn.Linear(width, config.mlp_dim), nn.ReLU()]
            width = config.mlp_dim
        self.body = nn.Sequential(*layers, nn.LayerNorm(width))
        self.head = nn.Linear(width, n_outputs)
        nn.init.normal_(self.head.weight, std=config.head_init_std)
        nn.init.zeros_(self.head.bias)

    def flatten(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(T, N, ...) observations -> (T, N, width) input vectors."""
        parts = [obs[SELF_KEY]]
        if self.layout.lidar_rays:
            parts.append(obs[LIDAR_KEY])
        for key, mask in self.slots:
            seen = obs[mask] > 0.5
            # where(), not a product: a masked row must contribute exactly nothing
            rows = torch.where(seen.unsqueeze(-1), obs[key], 0.0)
            parts += [rows.flatten(-2), seen.to(rows.dtype)]
        return torch.cat(parts, dim=-1)

    def forward(
        self,
        obs: Mapping[str, torch.Tensor],
        state: LSTMState,
        episode_start: torch.Tensor,
    ) -> tuple[torch.Tensor, LSTMState]:
        """obs (T, N, ...), state (h, c), episode_start (T, N) bool -> outputs (T, N,
        n_outputs) and `state`, unchanged."""
        return self.head(self.body(self.flatten(obs))), state
