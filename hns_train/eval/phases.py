"""Emergent-phase detection from the per-episode behaviour statistics of a training run.

The paper (Baker et al., arXiv 1909.07528) describes six phases of the full hide-and-seek game,
in order: running and chasing, fort building, ramp use, ramp defense, box surfing, surf defense.
Each one shows up in the episode statistics of `hns_train.envs.stats` (see `docs/phases.md` for
the reasoning behind each rule and threshold):

| phase | rule on the window means (all must hold) |
|---|---|
| running_and_chasing | hidden_fraction moved >= 0.1 from the run's starting level (either way) |
| fort_building | num_box_lock_prep >= 1, max_box_move_prep >= 0.5 m, hidden_fraction >= 0.5 |
| ramp_use | max_ramp_move - max_ramp_move_prep >= 1 m, hidden_fraction <= 0.5 |
| ramp_defense | num_ramp_lock_prep >= 1, hidden_fraction >= 0.5 |
| box_surfing | num_box_surf >= 2 steps per episode |
| surf_defense | num_box_surf <= 25 % of its peak since box surfing began, num_box_lock_prep >= its
  value at the box-surfing onset + 1, hidden_fraction >= 0.5 |

Mechanics (all named parameters of `PhaseConfig`):
- Input: the training records of `metrics.jsonl` (`episode/<stat>` = mean over the episodes
  finished since the previous record). Records without episode statistics are ignored.
- Window: the episode-weighted mean of each statistic over the last `window_records` records.
- Starting level: the episode-weighted means of the run's first `baseline_records` records, the
  play of the (nearly) untrained policy. Running and chasing is measured against it: untrained
  seekers in a small arena already see hiders most of the time, so an absolute threshold would
  fire before any learning.
- Persistence and hysteresis: a phase's streak starts at the first record whose window meets
  every threshold; it grows by one for each record that meets them, survives records that only
  meet the thresholds relaxed by `hysteresis` (a fraction of each threshold), and breaks
  otherwise. After `persistence` qualifying records the phase fires, once, and the onset carries
  the counters (episodes, frames, hours, version, time) of the streak's first record: the moment
  the behaviour appeared, not the moment the detector became sure of it.
- Order: with `require_order` a phase can start its streak only after its predecessor fired
  (the paper's phases build on each other; this stops e.g. ramp moves by wandering agents
  counting as ramp use before any fort exists).
- Resume: `restore(onsets)` marks phases as already fired (from the `phase` records of the
  run's metrics); `PhaseDetector.from_metrics(path)` replays a whole metrics file, which also
  rebuilds the window and the surf-defense reference values.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from hns_train.jsonl import read_logged
from hns_train.typed_config import AtLeast1, Positive, Unit, check_ranges

PHASES = (
    "running_and_chasing",
    "fort_building",
    "ramp_use",
    "ramp_defense",
    "box_surfing",
    "surf_defense",
)
PHASE_TITLES = {phase: phase.replace("_", " ") for phase in PHASES}  # "fort building"
STAT_PREFIX = "episode/"


@dataclass(frozen=True)
class PhaseOnset:
    """When a phase began: the counters of the first record of its confirming streak."""

    phase: str
    episodes: int
    frames: int
    hours: float
    version: int
    time: float

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; allowed phases: {list(PHASES)}")

    def to_record(self) -> dict:
        """The `{"kind": "phase", ...}` line of metrics.jsonl."""
        return {"kind": "phase", **asdict(self)}

    @classmethod
    def from_record(cls, record: dict) -> PhaseOnset:
        if "phase" not in record:
            raise ValueError(f"phase record has no 'phase' key: {record!r}")
        return cls(
            phase=str(record["phase"]),
            episodes=int(record.get("episodes", 0)),
            frames=int(record.get("frames", 0)),
            hours=float(record.get("hours", 0.0)),
            version=int(record.get("version", 0)),
            time=float(record.get("time", 0.0)),
        )


@dataclass
class PhaseConfig:
    """Detector settings; defaults explained in docs/phases.md."""

    window_records: AtLeast1 = 5  # training records in the rolling (episode-weighted) window
    persistence: AtLeast1 = 3  # qualifying records in a streak before a phase fires
    hysteresis: Unit = 0.2  # a streak survives a window within this fraction of a threshold
    require_order: bool = True  # a phase may start only after its predecessor fired
    baseline_records: AtLeast1 = 3  # first records of a run: its starting (untrained) level
    # running and chasing: the hidden share left its starting level (one team learned to run
    # away or to chase)
    chase_min_change: Positive = 0.1
    # fort building: hiders move and lock boxes during preparation and win
    fort_min_box_lock_prep: float = 1.0  # boxes locked at the end of prep (episode mean)
    fort_min_box_move_prep: float = 0.5  # metres the farthest-moved box travelled in prep
    fort_min_hidden: float = 0.5
    # ramp use: ramps move after preparation (seekers carry them to the fort) and seekers win
    ramp_use_min_move_after_prep: float = 1.0  # metres, max_ramp_move - max_ramp_move_prep
    ramp_use_max_hidden: float = 0.5
    # ramp defense: hiders lock ramps during preparation and win again
    ramp_defense_min_ramp_lock_prep: float = 1.0
    ramp_defense_min_hidden: float = 0.5
    # box surfing: seekers ride boxes after preparation (num_box_surf steps per episode)
    surf_min_steps: float = 2.0
    # surf defense: surfing collapses, hiders lock more boxes in prep, hiders win
    surf_defense_max_surf_ratio: Unit = 0.25  # of the peak window surf count since onset
    surf_defense_min_extra_box_lock: float = 1.0  # over the window value at box-surfing onset
    surf_defense_min_hidden: float = 0.5

    def __post_init__(self):
        check_ranges(self)  # the bounds written on the fields above


# A condition: (statistic name, ">=" or "<=", threshold). Statistic names are episode stats or
# the derived "ramp_move_after_prep".
Condition = tuple[str, str, float]


class PhaseDetector:
    """Feeds on training records; `update` returns the phases whose onset it just confirmed."""

    def __init__(self, config: PhaseConfig | None = None):
        self.config = config = config or PhaseConfig()
        self.fired: dict[str, PhaseOnset] = {}
        self._window: deque[tuple[float, dict[str, float]]] = deque(maxlen=config.window_records)
        self._start: list[tuple[float, dict[str, float]]] = []  # the first baseline_records
        self.baseline: dict[str, float] | None = None  # their means, once all are in
        self._streak: dict[str, int] = dict.fromkeys(PHASES, 0)
        self._streak_start: dict[str, dict] = {}
        self._last_episodes: float | None = None
        self._surf_peak: float | None = None
        self._surf_onset_box_lock: float | None = None

    # ------------------------------------------------------------------ state
    def restore(self, onsets: Iterable[PhaseOnset]) -> None:
        """Mark phases as fired (from a resumed run's phase records); they never fire again."""
        for onset in onsets:
            self.fired.setdefault(onset.phase, onset)

    @classmethod
    def from_metrics(cls, path: str | Path, config: PhaseConfig | None = None):
        """A detector that has seen every training record of a metrics file and knows the
        phases recorded there (recorded onsets win over re-detected ones); a fresh one where
        the file is not written yet (a new run)."""
        train, onsets = read_metrics(path) if Path(path).is_file() else ([], [])
        return cls.from_records(train, onsets, config)

    @classmethod
    def from_records(
        cls, train: list[dict], onsets: list[PhaseOnset], config: PhaseConfig | None = None
    ):
        """A detector that has seen the records `train` and knows the recorded `onsets`
        (`read_metrics`' two lists), for a caller that has read them already. Records of other
        kinds may be among them: `update` passes over all but training records."""
        det = cls(config)
        det.restore(onsets)
        for record in train:
            det.update(record)
        return det

    # ------------------------------------------------------------------ detection
    def update(self, record: dict) -> list[PhaseOnset]:
        if record.get("kind", "train") != "train":
            return []
        stats = episode_stats(record)
        if not stats:
            return []
        episodes = record.get("episodes")
        weight = 1.0
        if finite_number(episodes) is not None:
            if self._last_episodes is not None and episodes > self._last_episodes:
                weight = float(episodes - self._last_episodes)
            self._last_episodes = float(episodes)
        self._window.append((weight, stats))
        if self.baseline is None:
            self._start.append((weight, stats))
            if len(self._start) >= self.config.baseline_records:
                self.baseline = _weighted_means(self._start)
        means = self._means()
        self._track_surf(means)

        new: list[PhaseOnset] = []
        for i, phase in enumerate(PHASES):
            if phase in self.fired:
                continue
            if self.config.require_order and i > 0 and PHASES[i - 1] not in self.fired:
                self._streak[phase] = 0
                continue
            conditions = self._conditions(phase)
            if conditions is None:
                continue
            if _holds(conditions, means, 0.0):
                if self._streak[phase] == 0:
                    self._streak_start[phase] = record
                self._streak[phase] += 1
            elif not (self._streak[phase] and _holds(conditions, means, self.config.hysteresis)):
                self._streak[phase] = 0
            if self._streak[phase] >= self.config.persistence:
                onset = PhaseOnset.from_record({**self._streak_start[phase], "phase": phase})
                self.fired[phase] = onset
                new.append(onset)
                if phase == "box_surfing":
                    self._surf_onset_box_lock = means.get("num_box_lock_prep")
        return new

    def _means(self) -> dict[str, float]:
        means = with_ramp_move_after_prep(_weighted_means(self._window))
        start = (self.baseline or {}).get("hidden_fraction")
        if start is not None and "hidden_fraction" in means:
            means["hidden_change"] = abs(means["hidden_fraction"] - start)
        return means

    def _track_surf(self, means: dict[str, float]) -> None:
        """Reference values for surf defense: the surf peak and box locks since surfing began."""
        if "box_surfing" not in self.fired or "num_box_surf" not in means:
            return
        self._surf_peak = max(self._surf_peak or 0.0, means["num_box_surf"])
        if self._surf_onset_box_lock is None:  # restored without the record that fired it
            self._surf_onset_box_lock = means.get("num_box_lock_prep")

    def _conditions(self, phase: str) -> list[Condition] | None:
        c = self.config
        if phase == "running_and_chasing":
            return [("hidden_change", ">=", c.chase_min_change)]
        if phase == "fort_building":
            return [
                ("num_box_lock_prep", ">=", c.fort_min_box_lock_prep),
                ("max_box_move_prep", ">=", c.fort_min_box_move_prep),
                ("hidden_fraction", ">=", c.fort_min_hidden),
            ]
        if phase == "ramp_use":
            return [
                ("ramp_move_after_prep", ">=", c.ramp_use_min_move_after_prep),
                ("hidden_fraction", "<=", c.ramp_use_max_hidden),
            ]
        if phase == "ramp_defense":
            return [
                ("num_ramp_lock_prep", ">=", c.ramp_defense_min_ramp_lock_prep),
                ("hidden_fraction", ">=", c.ramp_defense_min_hidden),
            ]
        if phase == "box_surfing":
            return [("num_box_surf", ">=", c.surf_min_steps)]
        if phase == "surf_defense":
            if not self._surf_peak or self._surf_onset_box_lock is None:
                return None  # surfing never measured: nothing to defend against yet
            return [
                ("num_box_surf", "<=", c.surf_defense_max_surf_ratio * self._surf_peak),
                (
                    "num_box_lock_prep",
                    ">=",
                    self._surf_onset_box_lock + c.surf_defense_min_extra_box_lock,
                ),
                ("hidden_fraction", ">=", c.surf_defense_min_hidden),
            ]


def episode_stats(record: dict) -> dict[str, float]:
    """A training record's episode statistics (`episode/<stat>`) by name, the finite ones."""
    return {
        k[len(STAT_PREFIX) :]: float(v)
        for k, v in record.items()
        if k.startswith(STAT_PREFIX) and finite_number(v) is not None
    }


def with_ramp_move_after_prep(stats: dict[str, float]) -> dict[str, float]:
    """`stats` plus "ramp_move_after_prep" (max_ramp_move - max_ramp_move_prep) where both exist."""
    if "max_ramp_move" in stats and "max_ramp_move_prep" in stats:
        stats["ramp_move_after_prep"] = stats["max_ramp_move"] - stats["max_ramp_move_prep"]
    return stats


def _weighted_means(items: Iterable[tuple[float, dict[str, float]]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    weights: dict[str, float] = {}
    for w, stats in items:
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + w * v
            weights[k] = weights.get(k, 0.0) + w
    return {k: totals[k] / weights[k] for k in totals}


def _holds(conditions: list[Condition], means: dict[str, float], slack: float) -> bool:
    """All conditions met, each threshold relaxed by `slack` times its magnitude."""
    for key, op, threshold in conditions:
        if key not in means:
            return False
        margin = slack * abs(threshold)
        if op == ">=" and not means[key] >= threshold - margin:
            return False
        if op == "<=" and not means[key] <= threshold + margin:
            return False
    return True


def finite_number(value) -> float | None:
    """A value read from a JSON record as a float where it is a finite number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def read_metrics(path: str | Path) -> tuple[list[dict], list[PhaseOnset]]:
    """Training records and phase onsets of a metrics.jsonl file, in file order.

    A damaged line (cut short by a full disk or a kill mid-write) costs that record only: it
    is skipped, and the skipped lines are counted in one warning (`hns_train.jsonl`).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"metrics file {path} does not exist")
    train: list[dict] = []
    onsets: list[PhaseOnset] = []
    for record in read_logged(path):
        kind = record.get("kind", "train")
        if kind == "train":
            train.append(record)
        elif kind == "phase":
            onsets.append(PhaseOnset.from_record(record))
    return train, onsets
