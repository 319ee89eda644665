"""Fine-tuning: a run that starts from another run's network (the transfer tests, docs/transfer.md).

`agent.init` names a checkpoint: a training checkpoint file (`ckpt_<version>.pt`) or a run
directory (its newest checkpoint); "" (the default) or "scratch" trains from scratch. Before
the run starts, `resolve_init` reads the checkpoint (of which it uses the metadata) and sets the
task's observation-only game settings so that every entity row the source network embeds has
the width it was trained on (`match_observations`): box rows carry box sizes only if the
source's did (`box_size_obs`), ramp rows carry lock flags only if the source's did
(`ramp_lock_obs`). The settings go into the run's config, so a resume and every worker see the
same layout.

What the learner then loads (`load_pretrained`), before its first update:
- both networks (policy and value) and the observation normaliser, parameter by parameter;
  entity embeddings are matched by entity kind (agents, boxes, ramps, sites), not by their
  position in the network, since a kind with no rows in a world is absent from its network;
- a kind the source never saw (the blueprint's sites; boxes, from a `chase` checkpoint) keeps its
  fresh initialisation, and a kind the task lacks (other agents, in one-agent tasks) is unused;
- not the last dense layer (`head`) nor the LayerNorm before it (`lstm_norm`) of either
  network: the paper reinitialises "the final dense layer and layernorm for both the policy and
  value networks" for every test (section 6.2; `REINITIALISED`);
- not the value normaliser (the task's returns have another scale than the game's), not the
  optimiser's moments and not the counters: the task run starts at version 0 with its own
  settings. The report lists what was loaded, what stayed fresh and what was unused.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hns_train.agents.checkpoint import Checkpoint, load_checkpoint, resolve_checkpoint
from hns_train.agents.network_kinds import network_config
from hns_train.agents.observations import ObsLayout
from hns_train.envs.config import GameConfig, make_config, nest_moved
from hns_train.envs.contract import observation_shapes

log = logging.getLogger(__name__)

# Settings that change only what rows hold, never the world or its rules.
OBS_FLAGS = ("box_size_obs", "ramp_lock_obs")
SCRATCH = ("", "scratch")  # agent.init values that train from scratch
_EMBED = re.compile(r"^(policy_net|value_net)\.entity_embed\.(\d+)\.(.*)$")
# the task network's own: its output layers (the paper's fine-tuning) and its returns' scale
REINITIALISED = tuple(
    f"{net}.{layer}." for net in ("policy_net", "value_net") for layer in ("head", "lstm_norm")
)
_NOT_TRANSFERRED = ("value_norm.", *REINITIALISED)


def checkpoint_path(init: str | Path) -> Path:
    """The checkpoint file `init` names (a file, or a run directory's newest checkpoint)."""
    try:
        return resolve_checkpoint(init)
    except ValueError as err:
        raise ValueError(
            f"agent.init={str(init)!r}: no checkpoint there ({err}); give a checkpoint file "
            "(ckpt_*.pt) or a run directory with checkpoints/, or 'scratch' to train from scratch"
        ) from None


def source_game(meta: dict[str, Any], where: str = "checkpoint") -> GameConfig:
    """The game a checkpoint's network was trained on, from its metadata."""
    config = meta.get("config") or {}
    game = nest_moved(dict(config.get("game") or {}))  # older runs name task numbers flat
    if not game:
        raise ValueError(f"{where} has no game config in its metadata: not a training checkpoint")
    known = {f.name for f in dataclasses.fields(GameConfig)}  # the preset among them
    return make_config(**{k: v for k, v in game.items() if k in known})


def entity_widths(game: GameConfig) -> dict[str, int]:
    """Entity kind -> row width, for the kinds a network of `game` embeds (rows > 0)."""
    layout = ObsLayout.from_shapes(observation_shapes(game))
    return {s.kind.name: s.dim for s in layout.entities}


def match_observations(task: GameConfig, source: GameConfig) -> dict[str, bool]:
    """Observation-only settings of `task` under which every entity kind both networks embed
    has the source's row width; the task's own settings where they already fit. ValueError
    naming the widths when no setting fits."""
    want = entity_widths(source)
    own = {name: getattr(task, name) for name in OBS_FLAGS}
    values = itertools.product((False, True), repeat=len(OBS_FLAGS))
    for flags in [own, *(dict(zip(OBS_FLAGS, v, strict=True)) for v in values)]:
        got = entity_widths(dataclasses.replace(task, **flags))
        if all(want[k] == got[k] for k in want.keys() & got.keys()):
            return flags
    raise ValueError(
        f"no observation setting of task {task.task!r} gives the source network's row widths "
        f"{want}; the task's are {entity_widths(task)}"
    )


def resolve_init(cfg: Any) -> Any:
    """`cfg` (a RunConfig) with the game's observation flags matched to `agent.init`'s source;
    `cfg` itself when training from scratch."""
    if cfg.agent.init in SCRATCH:
        return cfg
    path = checkpoint_path(cfg.agent.init)
    source = source_game(load_checkpoint(path).meta, str(path))
    flags = match_observations(cfg.game_config(), source)
    game = {**cfg.game, **flags}
    agent = dataclasses.replace(cfg.agent, init=str(path))
    return dataclasses.replace(cfg, game=game, agent=agent)


@dataclass
class TransferReport:
    source: str
    loaded: list[str] = field(default_factory=list)  # parameter / buffer names
    fresh: list[str] = field(default_factory=list)  # the task's, not in the source
    unused: list[str] = field(default_factory=list)  # the source's, not in the task

    def summary(self) -> str:
        return (
            f"initialised from {self.source}: {len(self.loaded)} tensors loaded, "
            f"{len(self.fresh)} fresh ({_kinds(self.fresh)}), {len(self.unused)} unused "
            f"({_kinds(self.unused)})"
        )


def load_pretrained(model: torch.nn.Module, checkpoint: Checkpoint) -> TransferReport:
    """Load `checkpoint`'s networks into `model` (an ActorCritic for the task), by entity kind;
    see the module docstring for what is and is not transferred."""
    if checkpoint.meta.get("kind") != "training" or "ppo" not in checkpoint.state:
        raise ValueError(f"{checkpoint.path} is not a training checkpoint")
    saved_kind, own_kind = network_config(checkpoint.meta).kind, model.config.kind
    if saved_kind != own_kind:  # else only the normalisers would load, and silently
        raise ValueError(
            f"{checkpoint.path} holds a {saved_kind!r} network, this run's is {own_kind!r}: "
            f"fine-tuning starts a network of the same kind (agent.network.kind={saved_kind})"
        )
    source = source_game(checkpoint.meta, str(checkpoint.path))
    src_layout = ObsLayout.from_shapes(observation_shapes(source))
    saved = _by_kind(checkpoint.state["ppo"]["model"], src_layout)
    own = _by_kind(model.state_dict(), model.layout)
    report = TransferReport(str(checkpoint.path))
    new_state = {}
    for key, (name, value) in own.items():
        src = saved.get(key)
        if src is None or key.startswith(_NOT_TRANSFERRED):
            report.fresh.append(key)
            continue
        if tuple(src[1].shape) != tuple(value.shape):
            raise ValueError(
                f"{checkpoint.path}: {key} has shape {tuple(src[1].shape)}, the task's network "
                f"{tuple(value.shape)}; start the run through resolve_init (it matches the rows)"
            )
        new_state[name] = src[1].to(value.dtype)
        report.loaded.append(key)
    report.unused = [k for k in saved if k not in own and not k.startswith(_NOT_TRANSFERRED)]
    model.load_state_dict(new_state, strict=False)
    return report


def _by_kind(state: dict[str, torch.Tensor], layout: ObsLayout) -> dict[str, tuple[str, Any]]:
    """{name with entity embeddings named by kind: (original name, tensor)}."""
    kinds = [s.kind.name for s in layout.entities]
    out = {}
    for name, value in state.items():
        m = _EMBED.match(name)
        key = f"{m[1]}.entity_embed.{kinds[int(m[2])]}.{m[3]}" if m else name
        out[key] = (name, value)
    return out


def _kinds(names: list[str]) -> str:
    """What a list of tensor names covers: entity kinds, normalised observation keys, modules."""
    parts = set()
    for n in names:
        pieces = n.split(".")
        if ".entity_embed." in n or n.startswith("obs_norm.stats."):
            parts.add(pieces[2])
        else:
            parts.add(pieces[0])
    return ", ".join(sorted(parts)) or "none"


def initialise(model: torch.nn.Module, init: str) -> TransferReport | None:
    """The learner's start: load `init` (agent.init) into `model`; None from scratch."""
    if init in SCRATCH:
        return None
    report = load_pretrained(model, load_checkpoint(checkpoint_path(init)))
    log.warning("%s", report.summary())
    return report
