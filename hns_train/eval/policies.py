"""Policies for matches, given as a file or a name: what evaluation workers, `python -m
hns_train.eval play` and the bench scripts load and play.

- a trainer checkpoint (`runs/NAME/checkpoints/ckpt_*.pt`: weights under `state["ppo"]["model"]`,
  the run's resolved config in its metadata) or a pool snapshot (`runs/NAME/pool/snapshot_*.pt`:
  weights under `state["model"]`; the config comes from the run's `config.yaml`):
  `load_policy_file` -> `PolicyFile`, played through `policy_controller`;
- a fixed controller name (`NAMED`): `random`, `noop` (`agents/opponents.py`) or
  `scripted_seeker` (`matches.ScriptedSeeker`, seekers only: `SEEKER_ONLY`), from
  `named_controller`.

`label(policy_id)` is the short name of a rating id in replay file names.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hns_train.agents.opponents import ACTION_BINS, FIXED_OPPONENTS
from hns_train.agents.pool import policy_key
from hns_train.eval.matches import FixedController, ScriptedSeeker

SEEKER_ONLY = (ScriptedSeeker.policy_id,)
NAMED = (*FIXED_OPPONENTS, *SEEKER_ONLY)


@dataclass
class PolicyFile:
    """Weights read from a trainer checkpoint or pool snapshot, with the run config they need."""

    path: Path
    state_dict: dict[str, Any]
    config: Any  # hns_train.config.RunConfig
    version: int | None
    kind: str  # "training" | "snapshot"


def load_policy_file(path: str | os.PathLike) -> PolicyFile:
    """Read a checkpoint or snapshot; ValueError names what is wrong (never unpickles)."""
    from hns_train.agents.checkpoint import load_checkpoint
    from hns_train.agents.network_kinds import network_config
    from hns_train.config import ConfigError, config_from_dict, load_config

    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"policy {str(path)!r}: no such file; give a checkpoint (.pt) or one of {NAMED}"
        )
    ckpt = load_checkpoint(path)  # CheckpointError, a ValueError, names what is wrong
    state, meta = ckpt.state, ckpt.meta
    if isinstance(state.get("ppo"), dict) and "model" in state["ppo"]:
        weights, kind = state["ppo"]["model"], "training"
        version = meta.get("counters", {}).get("version", state["ppo"].get("version"))
    elif isinstance(state.get("model"), dict):
        weights, kind, version = state["model"], "snapshot", meta.get("version")
    else:
        raise ValueError(
            f"{path}: neither a trainer checkpoint (state['ppo']['model']) nor a pool snapshot "
            f"(state['model']); its state holds {sorted(state)}"
        )
    run_config = path.parent.parent / "config.yaml"  # checkpoints/ and pool/ sit in a run dir
    try:
        if meta.get("config"):
            config = config_from_dict(meta["config"], source=str(path))
        elif run_config.is_file():
            config = load_config(run_config)
        else:
            raise ValueError(
                f"{path}: holds no run config and there is no {run_config} next to its folder; "
                "the network size is unknown"
            )
    except ConfigError as e:
        raise ValueError(str(e)) from None
    # the network the file names (its record; older files: its config's, else `entity`)
    try:
        network = network_config(meta, config.agent.network)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    config = dataclasses.replace(config, agent=dataclasses.replace(config.agent, network=network))
    return PolicyFile(path, dict(weights), config, None if version is None else int(version), kind)


def policy_controller(
    source: PolicyFile, game_cfg, policy_id: str, deterministic: bool = True
) -> Any:
    """A `PolicyController` for `source` on the observations of `game_cfg`."""
    from hns_train.envs.contract import observation_shapes
    from hns_train.eval.matches import PolicyController

    try:
        return PolicyController.from_state_dict(
            observation_shapes(game_cfg),
            source.state_dict,
            policy_id,
            source.config.agent.network,
            deterministic=deterministic,
        )
    except ValueError as e:  # the parameters that do not fit, named
        raise ValueError(
            f"{source.path} does not fit the {game_cfg.preset!r} game's observations or its "
            f"run's network config: {str(e).partition(': ')[2]}"
        ) from None


def named_controller(name: str, role: str, seed: int = 0, action_bins: int = ACTION_BINS) -> Any:
    """The fixed controller `name` (one of NAMED) for a team playing `role`, acting in the
    game's `action_bins`."""
    if name not in NAMED:
        raise ValueError(f"unknown controller {name!r}; allowed: {NAMED} or a checkpoint file")
    if name in SEEKER_ONLY and role != "seeker":
        raise ValueError(f"{name!r} can only play the seekers (it chases hiders)")
    if name in SEEKER_ONLY:
        return ScriptedSeeker(action_bins=action_bins)
    return FixedController(name, seed, action_bins)


def label(policy_id: str) -> str:
    """Short file-name label of a rating id: snapshot versions become `snapN`."""
    key = policy_key(policy_id)
    return f"snap{key}" if key.isdigit() else key
