"""Agents: the paper's entity-attention policy and omniscient value network, and PPO.

Public API (no processes, no sockets; numpy at the edges):
- `ActorCritic(shapes, NetworkConfig())` with `act(obs, state, episode_start, deterministic)`;
  `shapes` is the env contract's `observation_shapes(game)`; its networks are of the kind
  `NetworkConfig.kind` names (`network_kinds.py`: the kinds and the interface they offer)
- `PPO(model, PPOConfig())` with `update(chunks)`, `state_dict()`, `load_state_dict()`
- `Chunk`, `ChunkRecorder`, `stack_chunks`: the one sample-chunk format
- `AgentConfig`, `NetworkConfig`, `PPOConfig`: typed configuration with the paper's numbers
"""

from hns_train.agents.chunks import Chunk, ChunkRecorder, stack_chunks
from hns_train.agents.config import AgentConfig, NetworkConfig, PPOConfig
from hns_train.agents.observations import ObsLayout
from hns_train.agents.policy import ActorCritic, ActOutput
from hns_train.agents.ppo import PPO, compute_gae

__all__ = [
    "PPO",
    "ActOutput",
    "ActorCritic",
    "AgentConfig",
    "Chunk",
    "ChunkRecorder",
    "NetworkConfig",
    "ObsLayout",
    "PPOConfig",
    "compute_gae",
    "stack_chunks",
]
