"""Object counting as the paper scores it (section 6.2): a probe of a frozen network's memory.

The paper freezes the pretrained policy, lets it watch the test (envs/counting.py: the agent
pinned in place, boxes sliding left or right out of its sight) and trains only a classification
head on the LSTM's hidden state to say how many boxes went to each side, at the steps after the
last box has disappeared; its baseline is the same head on a frozen network with random
parameters. Here:

- `watch` runs `episodes` episodes of the test (world seeds `seed`, `seed + 1`, ...) and feeds
  every network the agent's observations, step by step, through its own step (`ActorCritic.act`:
  observation normaliser, then policy network); it keeps the policy LSTM's hidden state h
  (before the LayerNorm and head, which fine-tuning replaces) at each of the last
  `counting.hidden_steps` steps, when every box is hidden. The agent cannot move and its
  actions are discarded, so what it sees does not depend on the network: every network watches
  the same episodes.
- `train_probe` fits the head: one linear layer from h, standardised by the training set's mean
  and spread, to the count that went left (0 .. max boxes; with the boxes' number fixed, the
  other side's count follows), by cross-entropy with weight decay over the training episodes'
  hidden steps.
- `probe_scores` answers on held-out episodes: a `ProbeResult` holds whether each hidden step's
  answer is right, read as the accuracy at each step after the boxes vanished (`by_step`), per
  episode over the hidden steps (`accuracy`), and at the last step (`last_right`, what
  `bench/transfer.py` reports as the test's score).

Standardising lets the head read differences however small: a network whose state converges
once its input stops changing still answers while the traces last, so `by_step` shows how long
each network keeps the count rather than whether it holds it at one step.

A label-only baseline (`prior_scores`, the most frequent count of the training episodes at every
step) is what a head with nothing to read from would score.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hns_train.agents.checkpoint import load_checkpoint
from hns_train.agents.config import NetworkConfig
from hns_train.agents.network_kinds import network_config
from hns_train.agents.policy import ActorCritic
from hns_train.agents.transfer import (
    SCRATCH,
    checkpoint_path,
    load_pretrained,
    match_observations,
    source_game,
)
from hns_train.envs import contract
from hns_train.envs.config import GameConfig
from hns_train.envs.contract import observation_shapes
from hns_train.envs.counting import ObjectCounting
from hns_train.envs.game import HideAndSeekGame

# full-batch Adam steps: the loss has flattened well before (a few thousand rows)
PROBE_EPOCHS = 300
PROBE_LR = 0.05
PROBE_WEIGHT_DECAY = 1e-3  # on standardised features: keeps 256 inputs from memorising the set
POLICY_H = 0  # the policy LSTM's hidden state h in `ActorCritic`'s (B, 4, H) recurrent state


@dataclass
class Watched:
    features: dict[str, np.ndarray]  # network name -> (episodes, hidden steps, lstm_dim) float32
    labels: np.ndarray  # (episodes,) int64: how many boxes went left


def _check_task(cfg: GameConfig) -> None:
    if cfg.task != ObjectCounting.name:
        raise ValueError(f"the counting probe watches the object_counting test, not {cfg.task!r}")


@torch.no_grad()
def watch(
    cfg: GameConfig,
    networks: dict[str, ActorCritic],
    episodes: int,
    seed: int,
    worlds: int = 64,
) -> Watched:
    """Every network's LSTM hidden states over the hidden steps of `episodes` episodes."""
    _check_task(cfg)
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    hidden = cfg.counting.hidden_steps
    features = {name: [] for name in networks}
    labels = []
    for first in range(0, episodes, worlds):
        n = min(worlds, episodes - first)
        game = HideAndSeekGame(cfg, n_worlds=n)
        obs = game.reset(seeds=list(range(seed + first, seed + first + n)))
        labels.append(game.task.went_left.copy())
        agent = game.task.agent
        noop = np.tile(contract.noop_action(cfg.action_bins), (n, game.n_agents, 1))
        states = {name: net.initial_state(n) for name, net in networks.items()}
        kept = {name: [] for name in networks}
        for t in range(cfg.horizon):
            for name, net in networks.items():
                rows = {k: v[:, agent] for k, v in obs.items()}
                states[name] = net.act(rows, states[name], deterministic=True).state
                if t >= cfg.horizon - hidden:
                    kept[name].append(states[name][:, POLICY_H])
            obs, _, _, _ = game.step(noop)
        for name in networks:
            features[name].append(np.stack(kept[name], axis=1))
    return Watched(
        features={k: np.concatenate(v).astype(np.float32) for k, v in features.items()},
        labels=np.concatenate(labels).astype(np.int64),
    )


class Probe(nn.Module):
    """Standardise, then one linear layer to `classes` logits."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, classes: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("std", torch.as_tensor(std))
        self.linear = nn.Linear(len(mean), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear((x - self.mean) / self.std)


def train_probe(features: np.ndarray, labels: np.ndarray, classes: int, seed: int) -> Probe:
    """Fit the head on (episodes, steps, H) features; every hidden step is a sample."""
    steps = features.shape[1]
    x = torch.as_tensor(features.reshape(-1, features.shape[-1]))
    y = torch.as_tensor(np.repeat(labels, steps))
    if int(y.max()) >= classes:
        raise ValueError(f"a label of {int(y.max())} for {classes} classes")
    torch.manual_seed(seed)
    probe = Probe(x.mean(0).numpy(), x.std(0).clamp(min=1e-6).numpy(), classes)
    opt = torch.optim.Adam(probe.parameters(), lr=PROBE_LR, weight_decay=PROBE_WEIGHT_DECAY)
    for _ in range(PROBE_EPOCHS):
        opt.zero_grad()
        nn.functional.cross_entropy(probe(x), y).backward()
        opt.step()
    return probe.eval()


@dataclass
class ProbeResult:
    right: np.ndarray  # (test episodes, hidden steps) bool: the head's answer is right

    @property
    def accuracy(self) -> np.ndarray:
        """(test episodes,) share of the hidden steps answered right."""
        return self.right.mean(axis=1)

    @property
    def last_right(self) -> np.ndarray:
        """(test episodes,) 1.0 where the last step's answer is right."""
        return self.right[:, -1].astype(np.float64)

    @property
    def by_step(self) -> np.ndarray:
        """(hidden steps,) accuracy at each step after the boxes are hidden."""
        return self.right.mean(axis=0)


@torch.no_grad()
def probe_scores(probe: Probe, features: np.ndarray, labels: np.ndarray) -> ProbeResult:
    guess = probe(torch.as_tensor(features)).argmax(-1).numpy()  # (episodes, steps)
    return ProbeResult(guess == labels[:, None])


def prior_scores(train_labels: np.ndarray, labels: np.ndarray, steps: int) -> ProbeResult:
    """The training set's most frequent count, answered at every step."""
    right = labels == np.bincount(train_labels).argmax()
    return ProbeResult(np.repeat(right[:, None], steps, axis=1))


def frozen_network(
    cfg: GameConfig, network: NetworkConfig, init: str, seed: int
) -> tuple[ActorCritic, GameConfig]:
    """The network an arm probes, and the test's config with the observation settings its rows
    need: `init`'s checkpoint loaded as fine-tuning loads it (agents/transfer.py), in the size
    its run used; or, with no `init`, a `network` of random parameters drawn from `seed` (the
    paper's baseline)."""
    if init in SCRATCH:
        torch.manual_seed(seed)
        return ActorCritic(observation_shapes(cfg), network, device="cpu").eval(), cfg
    path = checkpoint_path(init)
    ckpt = load_checkpoint(path)  # read once: its metadata sizes the network, then its weights
    own = dataclasses.replace(cfg, **match_observations(cfg, source_game(ckpt.meta, str(path))))
    network = network_config(ckpt.meta)  # the network the checkpoint names
    net = ActorCritic(observation_shapes(own), network, device="cpu")
    load_pretrained(net, ckpt)
    return net.eval(), own


def counting_probe(
    cfg: GameConfig,
    network: NetworkConfig,
    inits: dict[str, str],
    train_episodes: int,
    test_episodes: int,
    seed: int,
) -> tuple[dict[str, ProbeResult], ProbeResult]:
    """Each arm's probe (arm -> agent.init, "" for a random `network`), trained on
    `train_episodes` episodes (world seeds from `seed`) and scored on `test_episodes` others;
    and the label-only baseline on the same test episodes."""
    _check_task(cfg)
    classes = cfg.max_boxes + 1
    test_seed = seed + train_episodes
    # networks whose rows need the same observation settings watch the episodes together
    groups: list[tuple[GameConfig, dict[str, ActorCritic]]] = []
    for arm, init in inits.items():
        net, own = frozen_network(cfg, network, init, seed)
        members = next((m for c, m in groups if c == own), None)
        if members is None:
            groups.append((own, members := {}))
        members[arm] = net
    results = {}
    for own, members in groups:
        train = watch(own, members, train_episodes, seed)
        test = watch(own, members, test_episodes, test_seed)
        for arm in members:
            probe = train_probe(train.features[arm], train.labels, classes, seed)
            results[arm] = probe_scores(probe, test.features[arm], test.labels)
    prior = prior_scores(train.labels, test.labels, cfg.counting.hidden_steps)
    return {arm: results[arm] for arm in inits}, prior
