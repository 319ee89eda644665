"""The tournament's rules: a population of learners, their hyperparameters, matchmaking weights,
exploit and explore, and the manifest that records them (the controller writes the lineage log).

A population has `members` learners, each an ordinary run (a pod or a trainer group) with its own
hyperparameters. This module holds what is decided, not who runs it (the population controller
in `hns_train/distributed/population.py` starts the members, plays the league and applies
decisions). `members = 1` is the plain run: nothing here is used.

Hyperparameters: `ranges` maps a dotted config key (any numeric setting, e.g. `agent.ppo.lr`,
`agent.ppo.epochs`) to `[low, high]` or `[low, high, scale]`, scale `log` (default when low > 0) or
`linear`; a key whose setting is an int stays an int. Member 0 keeps the base config's values
(a population of 1 is the plain run); members 1.. draw theirs uniformly in the (log) range.

Matchmaking (after Madrona's hide-and-seek trainer: self 0.125, cross 0.5, past 0.375): of a
member's episodes, `p_cross` face another member's latest policy and `p_past` a hall-of-fame
entry (the rest are drawn by the member's own pool as in a plain run). Within a kind, opponents
are weighted by prioritised fictitious self-play, `(1 - p_win) ** pfsp_power` with p_win the
member's predicted chance of beating that opponent: harder opponents more often.

Exploit and explore (after DeepMind's PBT and Capture the Flag, asynchronous): a member is ready
`ready_versions` optimisation steps and `ready_games` rated league games after its last change.
A ready member in the bottom `bottom_fraction` (by rating; at least one member) copies a member
of the top `top_fraction` (at least one) that is predicted to beat it with probability >=
`copy_win_probability`, and the best member is never replaced. The copy takes the whole learner
state (weights, optimiser, PopArt, observation statistics) and the source's hyperparameters;
explore then multiplies each by one of `perturb_factors` (0.8 or 1.2), or with
`resample_probability` draws it anew in its range, always clipped into the range. Settings fixed
for one member (`overrides`) hold until its first exploit.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from hns_train.agents.checkpoint import atomic_write_bytes
from hns_train.agents.pool import ROLES
from hns_train.jsonl import json_number
from hns_train.typed_config import AtLeast1, NonNegative, NonNegativeInt, OneOf, Positive, Unit

SCALES = ("log", "linear")
# The files of a population run directory (the controller writes them, `eval` reads them)
MANIFEST = "population.json"
LINEAGE = "lineage.jsonl"
STATUS = "population.jsonl"
LEAGUE = "league"
# The league's fixed anchors (never re-rated): the untrained network of the population's seed
# (`league/untrained.pt`) and the built-in random and no-op teams
UNTRAINED = "untrained"
ANCHORS = (UNTRAINED, "random", "noop")
# what a member's league games may be played against
LEAGUE_OPPONENTS = ("members", "hall_of_fame", *ANCHORS)
MANIFEST_FORMAT = 1
MANIFEST_FIELDS = ("next_index", "members", "rng")  # what a resume cannot do without
MIN_PFSP_WEIGHT = 1e-3  # an opponent a member always beats is still met now and then


def member_name(index: int) -> str:
    return f"m{int(index)}"


@dataclass(frozen=True)
class HyperRange:
    """One searched setting: `low <= value <= high`, drawn on a log or linear scale."""

    key: str
    low: float
    high: float
    scale: str = "log"
    integer: bool = False

    def clip(self, value: float) -> float | int:
        value = min(max(float(value), self.low), self.high)
        return int(round(value)) if self.integer else value

    def sample(self, rng: np.random.Generator) -> float | int:
        if self.scale == "log":
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return self.clip(value)


@dataclass
class PopulationConfig:
    """`population:` of the run config (numbers without a source are ours)."""

    members: AtLeast1 = 1
    # dotted config key -> [low, high] or [low, high, "log" | "linear"]
    ranges: dict[str, Any] = field(default_factory=dict)
    # fixed settings of single members, "INDEX:key=value" (e.g. "1:agent.ppo.lr=0")
    overrides: tuple[str, ...] = ()
    p_cross: Unit = 0.5  # Madrona's hide-and-seek trainer
    p_past: Unit = 0.375  # Madrona's hide-and-seek trainer
    pfsp_power: NonNegative = 1.0
    hall_of_fame: AtLeast1 = 8  # entries kept, best rated first; also the past-play pool
    hof_every: AtLeast1 = 50  # versions between a member's hall-of-fame candidates
    ready_versions: NonNegativeInt = 50
    ready_games: NonNegativeInt = 16
    bottom_fraction: Unit = 0.25  # DeepMind PBT: the bottom 20-25 % copy
    top_fraction: Unit = 0.25
    copy_win_probability: Unit = 0.7  # Capture the Flag / Madrona: copy only a clear better
    perturb_factors: tuple[float, float] = (0.8, 1.2)  # DeepMind PBT
    resample_probability: Unit = 0.25
    # League: rated games between members, hall of fame and the fixed anchors
    # roles members are rated in
    league_roles: Annotated[tuple[str, ...], OneOf(ROLES)] = ("hider", "seeker")
    league_opponents: Annotated[tuple[str, ...], OneOf(LEAGUE_OPPONENTS)] = (
        "members",
        "hall_of_fame",
        "untrained",
    )
    league_worlds: AtLeast1 = 4  # matches per member and round
    league_every_s: Positive = 10.0
    sync_every_s: Positive = 20.0  # how often guests (cross/past opponents) are refreshed
    record_every_s: Positive = 10.0  # population.jsonl status records
    max_restarts: NonNegativeInt = (
        5  # of one member's run, before the population stops with an error
    )
    # Eval workers of each member's own run (`eval.n_workers` there): the league already rates
    # members, so none by default; 1 gives each member its own replays and videos.
    member_eval_workers: NonNegativeInt = 0

    def __post_init__(self) -> None:
        # Each field's own range is declared with it (checked by the run config); here: the
        # rules between fields and the names.
        if self.p_cross + self.p_past > 1.0:
            raise ValueError(f"p_cross + p_past must be <= 1, got {self.p_cross + self.p_past}")
        if min(self.perturb_factors) <= 0:
            raise ValueError(f"perturb_factors must be > 0, got {self.perturb_factors}")
        if not self.league_roles:
            raise ValueError("league_roles must name at least one role")
        parse_overrides(self.overrides, self.members)


def parse_ranges(ranges: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, HyperRange]:
    """`ranges` as HyperRanges; `base` maps each key to the base config's value (its type
    decides int or float). Errors name the key and what is allowed."""
    out = {}
    for key, spec in ranges.items():
        if key not in base:
            raise ValueError(f"population.ranges: {key!r} is not a setting of the run config")
        value = base[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"population.ranges: {key} is {value!r}, not a number; only numeric settings "
                "can be searched"
            )
        if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3):
            raise ValueError(
                f"population.ranges.{key}={spec!r}: give [low, high] or [low, high, scale]"
            )
        try:  # YAML 1.1 leaves 1e-4 (no dot) a string
            if any(isinstance(x, bool) for x in spec[:2]):
                raise TypeError
            low, high = float(spec[0]), float(spec[1])
        except (TypeError, ValueError):
            raise ValueError(
                f"population.ranges.{key}: low and high must be numbers, got {spec}"
            ) from None
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise ValueError(f"population.ranges.{key}: need finite low <= high, got {spec}")
        scale = spec[2] if len(spec) == 3 else ("log" if low > 0 else "linear")
        if scale not in SCALES:
            raise ValueError(f"population.ranges.{key}: scale {scale!r} is not one of {SCALES}")
        if scale == "log" and low <= 0:
            raise ValueError(f"population.ranges.{key}: a log range needs low > 0, got {low}")
        out[key] = HyperRange(key, low, high, scale, isinstance(value, int))
    return out


def parse_overrides(items: Sequence[str], members: int) -> dict[int, list[str]]:
    """ "INDEX:key=value" items as {index: ["key=value", ...]}."""
    out: dict[int, list[str]] = {}
    for item in items:
        index, sep, setting = str(item).partition(":")
        if not sep or not index.isdigit() or "=" not in setting:
            raise ValueError(
                f"population.overrides: {item!r} must look like INDEX:section.key=value "
                "(e.g. 1:agent.ppo.lr=0)"
            )
        if int(index) >= members:
            raise ValueError(
                f"population.overrides: {item!r} names member {index}; members are 0..{members - 1}"
            )
        out.setdefault(int(index), []).append(setting)
    return out


def sample_hyper(ranges: Mapping[str, HyperRange], rng: np.random.Generator) -> dict[str, Any]:
    return {key: r.sample(rng) for key, r in ranges.items()}


def perturb(
    hyper: Mapping[str, Any],
    ranges: Mapping[str, HyperRange],
    rng: np.random.Generator,
    factors: Sequence[float] = (0.8, 1.2),
    resample_probability: Unit = 0.25,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Explore: (new hyperparameters, how each changed: "x0.8", "x1.2" or "resample")."""
    new, how = dict(hyper), {}
    for key, r in ranges.items():
        if rng.random() < resample_probability:
            new[key], how[key] = r.sample(rng), "resample"
        else:
            factor = float(factors[int(rng.integers(len(factors)))])
            new[key], how[key] = r.clip(float(hyper[key]) * factor), f"x{factor:g}"
    return new, how


def pfsp_weight(p_win: float, power: float = 1.0) -> float:
    """Prioritised fictitious self-play: opponents a member rarely beats are met more often."""
    return max((1.0 - float(p_win)) ** power, MIN_PFSP_WEIGHT)


@dataclass
class Member:
    """One member as the manifest records it."""

    index: int
    seed: int
    hyper: dict[str, Any]
    status: str = "running"  # running | retired
    version: int = 0
    frames: int = 0
    episodes: int = 0
    changed_at_version: int = 0
    changed_at_games: int = 0
    exploits: int = 0
    restarts: int = 0

    @property
    def name(self) -> str:
        return member_name(self.index)

    def ready(self, games: int, ready_versions: int, ready_games: int) -> bool:
        return (
            self.version - self.changed_at_version >= ready_versions
            and games - self.changed_at_games >= ready_games
        )


@dataclass(frozen=True)
class Exploit:
    member: str
    source: str
    win_probability: float


def choose_exploits(
    strength: Mapping[str, float],
    ready: Sequence[str],
    beats: Callable[[str, str], float],
    cfg: PopulationConfig,
) -> list[Exploit]:
    """Which ready members copy whom this time.

    `strength` ranks the running members (higher is better); `beats(a, b)` is the predicted
    probability that member a beats member b. A ready member in the bottom fraction copies the
    top-fraction member most likely to beat it, when that probability is at least
    `copy_win_probability`; the best member and members being copied from are left alone."""
    ranked = sorted(strength, key=lambda m: (-strength[m], m))
    n = len(ranked)
    if n < 2:
        return []
    n_bottom = max(1, int(cfg.bottom_fraction * n + 1e-9))
    n_top = max(1, int(cfg.top_fraction * n + 1e-9))
    top = ranked[:n_top]
    bottom = [m for m in ranked[-n_bottom:] if m != ranked[0]]
    out = []
    for member in bottom:
        if member not in ready or member in top:
            continue
        p, source = max((beats(s, member), s) for s in top)
        if p >= cfg.copy_win_probability:
            out.append(Exploit(member, source, float(p)))
    return out


# ----------------------------------------------------------------------------- files


def save_manifest(path: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    """Write the manifest atomically (a reader never sees half of it)."""
    atomic_write_bytes(path, json.dumps(manifest, indent=1, default=json_number).encode())


def load_manifest(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no population manifest there (not a population run)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: the population manifest is not valid JSON ({err})") from None
    found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
    if found != MANIFEST_FORMAT:
        raise ValueError(f"{path}: population manifest format {found!r} is not {MANIFEST_FORMAT}")
    return manifest


def members_from_manifest(
    path: str | os.PathLike, manifest: Mapping[str, Any]
) -> dict[str, Member]:
    """The members a resume restarts, once what it needs from the manifest (`path`'s) is there;
    else one error naming what is not."""
    missing = [key for key in MANIFEST_FIELDS if key not in manifest]
    members = manifest.get("members")
    if isinstance(members, dict):
        required = ("index", "seed", "hyper")
        for name, data in members.items():
            lacks = [k for k in required if not isinstance(data, dict) or k not in data]
            missing += [f"members.{name}.{k}" for k in lacks]
    elif "members" not in missing:
        missing.append("members (not a mapping)")
    if missing:
        raise ValueError(
            f"{path}: the population manifest lacks {', '.join(missing)}; restore it from a "
            "copy, or start a new population (another name=...)"
        )
    fields = set(Member.__dataclass_fields__)
    return {
        name: Member(**{k: v for k, v in data.items() if k in fields})
        for name, data in members.items()
    }
