"""Typed loader for `baselines.yaml`: the published Rapid and SRL figures, each with its source.

Key numbers (spec §7): Rapid reached fort building at about 25 M episodes, ramp use at about
100 M, ramp defense at about 110 M (132.3 M episodes = 31.7 B frames = 34 h at the default batch
of 64k chunks of 10 steps) and box surfing at about 380 M. SRL reproduced the same solution with
up to 5x less wall-clock time than Rapid, with about 1,000 CPU cores and 8 GPUs for 68 h, and
scaled a harder variant to 15k CPU cores and 32 A100 GPUs.

The file is the single home of these numbers: code reads them from here, never restates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from hns_train.eval.phases import PHASES

DEFAULT_PATH = Path(__file__).with_name("baselines.yaml")


@dataclass(frozen=True)
class Source:
    title: str
    arxiv: str
    where: str

    def cite(self) -> str:
        return f'"{self.title}" (arXiv {self.arxiv}), {self.where}'


@dataclass(frozen=True)
class PhaseMark:
    """A baseline's onset of one phase, in episodes (None: the phase is named, not dated)."""

    phase: str
    episodes: float | None
    approximate: bool
    source: Source


@dataclass(frozen=True)
class ComputeRun:
    """One reported training run: what it reached, how long it took, on what."""

    label: str
    phase: str | None
    episodes: float | None
    frames: float | None
    hours: float | None
    batch_chunks: int | None
    chunk_length: int | None
    cpu_cores: int | None
    gpus: int | None
    gpu_name: str | None
    note: str
    source: Source

    def hardware(self) -> str:
        """'1,000 CPU cores + 8 GPUs' style summary, '' when not reported."""
        parts = []
        if self.cpu_cores:
            parts.append(f"{self.cpu_cores:,} CPU cores")
        if self.gpus:
            parts.append(f"{self.gpus} {self.gpu_name or ''} GPUs".replace("  ", " "))
        return " + ".join(parts)


@dataclass(frozen=True)
class Speedup:
    factor: float
    note: str
    source: Source


@dataclass(frozen=True)
class Baseline:
    key: str
    name: str
    source: Source
    phases: dict[str, PhaseMark]
    runs: tuple[ComputeRun, ...]
    speedup_vs_rapid: Speedup | None

    def onset(self, phase: str) -> float | None:
        mark = self.phases.get(phase)
        return None if mark is None else mark.episodes


@dataclass(frozen=True)
class Baselines:
    rapid: Baseline
    srl: Baseline

    def __iter__(self):
        return iter((self.rapid, self.srl))


def load_baselines(path: str | Path | None = None) -> Baselines:
    """Read and check the baselines file (default: the one shipped next to this module)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise ValueError(f"baselines file {path} does not exist")
    data = yaml.safe_load(path.read_text())
    where = str(path)
    table = _get(data, "baselines", dict, where)
    missing = {"rapid", "srl"} - set(table)
    if missing:
        raise ValueError(f"{where}: baselines needs entries {sorted(missing)}")
    return Baselines(
        **{key: _baseline(key, table[key], f"{where}: baselines.{key}") for key in ("rapid", "srl")}
    )


# ---------------------------------------------------------------------- parsing helpers
def _get(d, key, kind, where, optional=False):
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a mapping, got {type(d).__name__}")
    if key not in d:
        if optional:
            return None
        raise ValueError(f"{where} lacks required key {key!r}")
    value = d[key]
    if value is None and optional:
        return None
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}.{key} must be a number, got {value!r}")
        return float(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}.{key} must be an integer, got {value!r}")
        return value
    if not isinstance(value, kind):
        raise ValueError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return value


def _source(d, where) -> Source:
    s = _get(d, "source", dict, where)
    return Source(
        title=_get(s, "title", str, f"{where}.source"),
        arxiv=_get(s, "arxiv", str, f"{where}.source"),
        where=_get(s, "where", str, f"{where}.source"),
    )


def _baseline(key: str, d: dict, where: str) -> Baseline:
    phases = {}
    for phase, mark in (_get(d, "phases", dict, where) or {}).items():
        if phase not in PHASES:
            raise ValueError(f"{where}.phases: unknown phase {phase!r}; allowed: {list(PHASES)}")
        at = f"{where}.phases.{phase}"
        phases[phase] = PhaseMark(
            phase=phase,
            episodes=_get(mark, "episodes", float, at, optional=True),
            approximate=_get(mark, "approximate", bool, at),
            source=_source(mark, at),
        )
    runs = []
    for i, run in enumerate(_get(d, "runs", list, where)):
        at = f"{where}.runs[{i}]"
        phase = _get(run, "phase", str, at, optional=True)
        if phase is not None and phase not in PHASES:
            raise ValueError(f"{at}.phase: unknown phase {phase!r}; allowed: {list(PHASES)}")
        runs.append(
            ComputeRun(
                label=_get(run, "label", str, at),
                phase=phase,
                episodes=_get(run, "episodes", float, at, optional=True),
                frames=_get(run, "frames", float, at, optional=True),
                hours=_get(run, "hours", float, at, optional=True),
                batch_chunks=_get(run, "batch_chunks", int, at, optional=True),
                chunk_length=_get(run, "chunk_length", int, at, optional=True),
                cpu_cores=_get(run, "cpu_cores", int, at, optional=True),
                gpus=_get(run, "gpus", int, at, optional=True),
                gpu_name=_get(run, "gpu_name", str, at, optional=True),
                note=_get(run, "note", str, at),
                source=_source(run, at),
            )
        )
    speed = _get(d, "speedup_vs_rapid", dict, where, optional=True)
    speedup = None
    if speed is not None:
        at = f"{where}.speedup_vs_rapid"
        speedup = Speedup(
            factor=_get(speed, "factor", float, at),
            note=_get(speed, "note", str, at),
            source=_source(speed, at),
        )
    return Baseline(
        key=key,
        name=_get(d, "name", str, where),
        source=_source(d, where),
        phases=phases,
        runs=tuple(runs),
        speedup_vs_rapid=speedup,
    )
