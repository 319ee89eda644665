"""Typed loader for `baselines.yaml`: the published Rapid and SRL figures, each with its source.

Key numbers (spec §7): Rapid reached fort building at about 25 M episodes, ramp use at about
100 M, ramp defense at about 110 M (132.3 M episodes = 31.7 B frames = 34 h at the default batch
of 64k chunks of 10 steps) and box surfing at about 380 M. SRL reproduced the same solution with
up to 5x less wall-clock time than Rapid, with about 1,000 CPU cores and 8 GPUs for 68 h, and
scaled a harder variant to 15k CPU cores and 32 A100 GPUs.

The quadrant game's phase onsets (door blocking from about 2.69 M episodes, ramp use 8.62 M,
ramp defense 14.5 M; 80 steps each, from OpenAI's blog post of the paper) are its `quadrant`
section (`load_quadrant_onsets`), the sample counts `hns-train plan` projects hours to.

The file is the single home of these numbers: code reads them from here, never restates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from hns_train.eval.phases import PHASES
from hns_train.typed_config import from_dict

DEFAULT_PATH = Path(__file__).with_name("baselines.yaml")


@dataclass(frozen=True)
class Source:
    title: str
    arxiv: str
    where: str

    def cite(self) -> str:
        return f'"{self.title}" (arXiv {self.arxiv}), {self.where}'


@dataclass(frozen=True)
class Sourced:
    """A figure of the file with where it stands in its paper; a phase it names is checked."""

    source: Source

    def __post_init__(self) -> None:
        phase = getattr(self, "phase", None)
        if phase is not None and phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; allowed: {list(PHASES)}")


@dataclass(frozen=True)
class PhaseMark(Sourced):
    """A baseline's onset of one phase, in episodes (None: the phase is named, not dated)."""

    phase: str
    approximate: bool
    episodes: float | None = None


@dataclass(frozen=True)
class ComputeRun(Sourced):
    """One reported training run: what it reached, how long it took, on what."""

    label: str
    note: str
    phase: str | None = None
    episodes: float | None = None
    frames: float | None = None
    hours: float | None = None
    batch_chunks: int | None = None
    chunk_length: int | None = None
    cpu_cores: int | None = None
    gpus: int | None = None
    gpu_name: str | None = None

    def hardware(self) -> str:
        """'1,000 CPU cores + 8 GPUs' style summary, '' when not reported."""
        parts = []
        if self.cpu_cores:
            parts.append(f"{self.cpu_cores:,} CPU cores")
        if self.gpus:
            parts.append(f"{self.gpus} {self.gpu_name or ''} GPUs".replace("  ", " "))
        return " + ".join(parts)


@dataclass(frozen=True)
class Speedup(Sourced):
    factor: float
    note: str


@dataclass(frozen=True)
class Baseline(Sourced):
    key: str
    name: str
    phases: dict[str, PhaseMark]
    runs: tuple[ComputeRun, ...]
    speedup_vs_rapid: Speedup | None = None


@dataclass(frozen=True)
class Baselines:
    rapid: Baseline
    srl: Baseline


def load_baselines(path: str | Path | None = None) -> Baselines:
    """Read and check the baselines file (default: the one shipped next to this module)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise ValueError(f"baselines file {path} does not exist")
    data = yaml.safe_load(path.read_text())
    table = data.get("baselines") if isinstance(data, dict) else None
    if not isinstance(table, dict) or {"rapid", "srl"} - set(table):
        raise ValueError(f"{path}: needs a mapping 'baselines' with entries ['rapid', 'srl']")
    try:
        return Baselines(
            *(_baseline(key, table[key], f"baselines.{key}") for key in ("rapid", "srl"))
        )
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


@dataclass(frozen=True)
class QuadrantOnset:
    """The episode at which one phase of the quadrant game appeared, with its source (the
    quadrant game's phases are its own: door blocking is not one of the full game's PHASES)."""

    phase: str
    episodes: float
    steps_per_episode: int
    source: Source

    @property
    def frames(self) -> float:
        return self.episodes * self.steps_per_episode


def load_quadrant_onsets(path: str | Path | None = None) -> tuple[QuadrantOnset, ...]:
    """The `quadrant` section of the baselines file, in the order of the phases."""
    path = Path(path) if path is not None else DEFAULT_PATH
    data = yaml.safe_load(path.read_text())
    table = data.get("quadrant") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not isinstance(table.get("onsets"), list):
        raise ValueError(f"{path}: needs a mapping 'quadrant' with a list 'onsets'")
    steps = table.get("steps_per_episode")
    onsets = []
    for i, row in enumerate(table["onsets"]):
        where = f"quadrant.onsets[{i}]"
        if not isinstance(row, dict):
            raise ValueError(f"{path}: {where} must be a mapping, got {row!r}")
        row = {**row, "steps_per_episode": steps}
        onsets.append(_typed(QuadrantOnset, row, where))
    return tuple(onsets)


def _typed(cls: type, data, where: str):
    """`cls` from a mapping of the file, every field checked (`typed_config.from_dict`)."""
    try:
        return from_dict(cls, data, prefix=f"{where}.")
    except TypeError as e:  # a required key is missing
        raise ValueError(f"{where}: {e}") from None


def _baseline(key: str, d, where: str) -> Baseline:
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a mapping, got {d!r}")
    phases = {
        phase: _typed(PhaseMark, {**(mark or {}), "phase": phase}, f"{where}.phases.{phase}")
        for phase, mark in (d.get("phases") or {}).items()
    }
    runs = [
        _typed(ComputeRun, run, f"{where}.runs[{i}]") for i, run in enumerate(d.get("runs", []))
    ]
    speed = d.get("speedup_vs_rapid")
    if speed is not None:
        speed = _typed(Speedup, speed, f"{where}.speedup_vs_rapid")
    typed = {"key": key, "phases": phases, "runs": tuple(runs), "speedup_vs_rapid": speed}
    return _typed(Baseline, {**d, **typed}, where)
