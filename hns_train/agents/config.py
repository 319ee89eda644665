"""Typed configuration of the agents: network sizes, normalisation and PPO hyper-parameters.

Every number of the paper's policy and training recipe (Baker et al. 2020; spec
`hide_and_seek.md` §6-7) is a named field here, with the paper's value as its default. The
classes are plain dataclasses of ints, floats and bools so that they load from YAML unchanged
(`hns_train.typed_config.from_dict`). Numbers the paper does not give are marked "(ours)".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from hns_train.envs import contract
from hns_train.envs.config import ACTION_BINS
from hns_train.typed_config import (
    AtLeast1,
    Bounds,
    NonNegative,
    NonNegativeInt,
    OneOfOrClass,
    Positive,
    Unit,
)

# The factor of an exponential moving average: in (0, 1]
Decay = Annotated[float, Bounds(0, 1, inclusive=False)]

# the shipped network kinds and their classes (agents/network_kinds.py; a kind may also be the
# import path of a network of the user's own code)
NETWORK_KINDS = {
    "entity": "hns_train.agents.networks:EntityNetwork",
    "mlp": "hns_train.agents.mlp:MLPNetwork",
}


@dataclass
class NetworkConfig:
    """Shape of the policy and value networks (both use the same shape, separate weights)."""

    # entity (the paper's attention + LSTM), mlp (feed-forward, no memory: mlp_* below) or the
    # import path package.module:Class of a network of your own (docs/extending.md)
    kind: Annotated[str, OneOfOrClass(tuple(NETWORK_KINDS), "torch.nn:Module")] = "entity"
    lidar_filters: AtLeast1 = 9
    # odd: circular 'same' padding keeps the 30 rays a ring of 30
    lidar_kernel: Annotated[int, Bounds(1, odd=True)] = 3
    embed_dim: AtLeast1 = 128  # per-entity and self embeddings, attention width
    attention_heads: AtLeast1 = 4  # 4 heads x 32 = embed_dim
    dense_dim: AtLeast1 = 256
    lstm_dim: AtLeast1 = 256
    # x force, y force, z torque; grab, lock: 2
    move_bins: Annotated[int, ACTION_BINS] = contract.DEFAULT_ACTION_BINS
    mlp_layers: AtLeast1 = 2  # hidden layers of the mlp kind
    mlp_dim: AtLeast1 = 256  # width of each of them
    head_init_std: NonNegative = 0.01  # every output head starts near uniform / near zero
    obs_norm_beta: Decay = 0.99999
    obs_clip: Positive = 5.0
    obs_norm_min_var: NonNegative = 1e-2  # (ours) keeps near-constant features from exploding
    value_norm_beta: Decay = 0.99999
    value_norm_min_var: NonNegative = 1e-4  # (ours) floor of the PopArt variance

    def __post_init__(self) -> None:
        if self.embed_dim % self.attention_heads:
            raise ValueError(
                f"embed_dim ({self.embed_dim}) must be divisible by attention_heads "
                f"({self.attention_heads})"
            )

    @property
    def action_sizes(self) -> tuple[int, ...]:
        """Per-agent MultiDiscrete action (the contract's heads): x force, y force, z torque, grab,
        lock."""
        return contract.action_nvec(self.move_bins)


@dataclass
class PPOConfig:
    """PPO + GAE with truncated BPTT (spec §7)."""

    gamma: Unit = 0.998
    gae_lambda: Unit = 0.95
    clip_coef: Positive = 0.2
    ent_coef: NonNegative = 0.01  # on the entropy summed over the 5 action heads
    vf_coef: NonNegative = 0.5  # on 0.5 * squared error of the normalised value
    clip_value_loss: bool = False  # (ours) PPO2-style value clipping, off by default
    value_clip: Positive = 0.2  # used only when clip_value_loss
    lr: NonNegative = 3e-4
    weight_decay: NonNegative = 1e-6  # coupled L2, as torch.optim.Adam applies it
    adam_eps: Positive = 1e-8  # (ours) torch's default
    max_grad_norm: Positive = 5.0
    bptt_len: AtLeast1 = 10  # steps per BPTT segment; chunks store the LSTM state every bptt_len
    # Sample reuse in the paper comes from the trainer replaying each chunk about 4 times across
    # optimisation steps, so one update() is one pass of one minibatch by default.
    epochs: AtLeast1 = 1
    minibatches: AtLeast1 = 1
    normalize_advantages: bool = True  # (ours) per minibatch
    # (ours) On a CPU a minibatch's forward and backward run in passes of at most this many
    # samples, their gradients summed: the same step. glibc serves blocks up to 32 MiB from
    # its heap, reused from pass to pass; larger ones come from mmap, every page faulted in
    # again at each pass, and the largest activation is 4 KiB per sample. 0: one pass. On a
    # GPU a minibatch is always one pass.
    cpu_pass_samples: NonNegativeInt = 4096


@dataclass
class AgentConfig:
    """Everything `hns_train/agents/` needs: `network` and `ppo` sections."""

    network: NetworkConfig = field(default_factory=NetworkConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    # a checkpoint file or run directory whose networks start this run ("" or "scratch": none);
    # fine-tuning for the transfer tasks, hns_train/agents/transfer.py
    init: str = ""
