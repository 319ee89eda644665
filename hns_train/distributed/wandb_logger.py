"""Weights & Biases logging for one experiment, plus the Rapid reference run.

`WandbLogger` owns the experiment's single wandb run:
- Files live in `runs/<name>/wandb/` (wandb's own layout below it); the run id is stored in
  `runs/<name>/wandb/run_id`, so a resumed experiment (`--resume`, same run directory) appends to
  the same wandb run instead of starting a new one.
- Mode: `offline` by default (no account, nothing leaves the machine; `wandb sync` uploads
  later), `online`, or `disabled` (wandb is never initialised and nothing is written). The
  environment variable WANDB_MODE picks the mode when none is given, and WANDB_MODE=disabled
  always wins: it is the switch that turns logging off for a whole job. Where the wandb package
  is not installed, every mode acts as `disabled` (hns_train/optional.py says so once).
- Axes: every logged row carries the four counters the paper plots against: `episodes`,
  `frames` (env frames), `hours` (wall clock since the run started) and `version`
  (optimisation steps). `define_metric` makes `episodes` the default x-axis of every chart;
  any of the other three can be chosen as x-axis in the UI because each row holds all four.
- `log(record)` takes a metrics.jsonl training record as is (numeric values only; `kind` and
  `time` are bookkeeping), `log_phase(onset)` marks an emergent phase, `log_video` attaches an
  mp4 (made with imageio-ffmpeg), `log_table` a table such as match results or the leaderboard.
- Console capture is off: the controller's progress bar owns the terminal.

`open_run(logging, run_dir, config)` opens an experiment's run after the reference run;
`log_reference_run(project, dir, mode)` writes Rapid's phase onsets (from
`hns_train.eval.baselines`) on the episode axis as a separate run, `rapid-reference`, in the
same project, so the workspace shows this run's `phase/index` steps against the paper's. A
population writes it once, in its own directory, before its members start; a member
(`<population>/members/m<i>`) finds it there and writes none: the members share their
population's wandb service, which refuses a second process opening the same run id.

`run_records(path)` reads an offline run file back through wandb's own command-line reader
(`wandb leet inspect --json`, one JSON record per line): `finish` uses it to wait for the exit
record; nothing here parses wandb's binary file format.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from hns_train.atomic_file import atomic_write_bytes
from hns_train.config import WANDB_MODES
from hns_train.eval.baselines import load_baselines
from hns_train.eval.phases import PHASES, PhaseOnset
from hns_train.optional import available

AXES = ("episodes", "frames", "hours", "version")
DEFAULT_PROJECT = "hns_train"
RUN_ID_FILE = "run_id"
REFERENCE_RUN_ID = "rapid-reference"
MEMBERS_DIR = "members"  # a population's members run in <population>/members/m<i>
SKIPPED_KEYS = ("kind", "time")  # bookkeeping in metrics.jsonl, not a chart
FLUSH_TIMEOUT_S = 30.0  # longest wait for an offline run file to be complete after finish()
FLUSH_POLL_S = 0.25
INSPECT_TIMEOUT_S = 120.0


def resolve_mode(mode: str | None) -> str:
    env = os.environ.get("WANDB_MODE")
    if env == "disabled":
        return "disabled"
    mode = mode or env or "offline"
    if mode not in WANDB_MODES:
        raise ValueError(f"wandb mode {mode!r} is not allowed; use one of {list(WANDB_MODES)}")
    return mode


class WandbLogger:
    """One wandb run per experiment; see the module docstring."""

    def __init__(
        self,
        run_dir: str | Path,
        config: dict,
        project: str = DEFAULT_PROJECT,
        mode: str | None = None,
        resume: bool = True,
        name: str | None = None,
        group: str | None = None,
    ):
        self.mode = resolve_mode(mode)
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "wandb"
        self.axes: dict[str, float] = {}
        self.onsets: list[PhaseOnset] = []
        self.run = None
        self.run_id: str | None = None
        if self.mode == "disabled":
            return
        if not available("wandb"):  # an install without the logging extra
            self.mode = "disabled"
            return
        import wandb

        self.dir.mkdir(parents=True, exist_ok=True)
        id_file = self.dir / RUN_ID_FILE
        if resume and id_file.is_file() and id_file.read_text().strip():
            self.run_id = id_file.read_text().strip()
        else:
            self.run_id = secrets.token_hex(4)  # wandb's form: lowercase letters and digits
            atomic_write_bytes(id_file, (self.run_id + "\n").encode())
        self.run = wandb.init(
            project=project,
            dir=str(self.run_dir),  # wandb adds the `wandb/` level itself
            id=self.run_id,
            resume="allow",
            mode=self.mode,
            name=name or str(config.get("name") or self.run_dir.name),
            config=config,
            group=group or None,  # a population's members: one group, one run each
            settings=wandb.Settings(console="off", silent=True),
        )
        define_axes(self.run)

    # ------------------------------------------------------------------ logging
    def log(self, record: dict) -> None:
        """Log one metrics.jsonl training record."""
        if "episodes" not in record:
            raise ValueError(
                f"training record lacks 'episodes' (the x-axis); keys: {sorted(record)}"
            )
        row = {}
        for key, value in record.items():
            if key in SKIPPED_KEYS or isinstance(value, bool):
                continue
            if isinstance(value, int | float):
                row[key] = value
        self.axes.update({k: row[k] for k in AXES if k in row})
        if self.run is not None:
            self.run.log(row)

    def log_phase(self, onset: PhaseOnset) -> None:
        """Mark a phase onset: `phase/index` (1..6) and `phase/<name>` at its own counters."""
        self.onsets.append(onset)
        if self.run is None:
            return
        axes = {axis: getattr(onset, axis) for axis in AXES}
        self.run.log({**axes, **_phase_row(onset.phase, onset.episodes)})
        for axis in AXES:
            self.run.summary[f"phase/{onset.phase}/{axis}"] = getattr(onset, axis)
        rows = [[o.phase, *(getattr(o, axis) for axis in AXES)] for o in self.onsets]
        self.log_table("phases", ["phase", *AXES], rows)

    def log_video(self, path_mp4: str | Path, key: str, caption: str | None = None) -> None:
        """Attach an mp4 (e.g. a rendered replay) at the current counters."""
        path = Path(path_mp4)
        if path.suffix.lower() != ".mp4":
            raise ValueError(f"log_video needs an .mp4 file, got {path}")
        if not path.is_file():
            raise ValueError(f"video file {path} does not exist")
        if self.run is None:
            return
        import wandb

        self.run.log({**self.axes, key: wandb.Video(str(path), format="mp4", caption=caption)})

    def log_table(self, key: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        """Log a table (match results, leaderboard) at the current counters."""
        rows = [list(r) for r in rows]
        bad = [i for i, r in enumerate(rows) if len(r) != len(columns)]
        if bad:
            raise ValueError(
                f"table {key!r}: row {bad[0]} has {len(rows[bad[0]])} cells for "
                f"{len(columns)} columns {list(columns)}"
            )
        if self.run is None:
            return
        import wandb

        self.run.log({**self.axes, key: wandb.Table(columns=list(columns), data=rows)})

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            _finish(self.run, exit_code)
            self.run = None


def _finish(run, exit_code: int) -> None:
    """Finish a run; offline, also wait until its `.wandb` file holds the exit record.

    wandb 0.31's `finish()` can return before its background service has written the offline
    file (seen here: a 7-byte file right after finish, complete a moment later), so a reader,
    `wandb sync` or a quick process exit could see a torn run.
    """
    offline = run.settings.mode == "offline" or run.offline
    path = Path(run.dir).parent / f"run-{run.id}.wandb"
    run.finish(exit_code=exit_code)
    if not offline:
        return
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.is_file() and _has_exit(path):
            return
        time.sleep(FLUSH_POLL_S)


def _has_exit(path: Path) -> bool:
    try:
        return any(r.get("type") == "exit" for r in run_records(path))
    except ValueError:  # a file still being written may end in a torn record
        return False


def define_axes(run) -> None:
    """The four counters as axes; `episodes` is every other metric's default x-axis."""
    for axis in AXES:
        run.define_metric(axis, summary="max")
    run.define_metric("*", step_metric="episodes")


def _phase_row(phase: str, episodes: float) -> dict:
    return {"phase/index": PHASES.index(phase) + 1, f"phase/{phase}": episodes}


def open_run(logging_cfg, run_dir: Path, config: dict, **kwargs) -> WandbLogger:
    """An experiment's `WandbLogger` under the `logging` settings, after the reference run
    (`log_reference_run`): first, and finished before the experiment's own run, because wandb
    holds one active run per process."""
    log_reference_run(logging_cfg.project, run_dir, logging_cfg.wandb)
    return WandbLogger(
        run_dir, config, project=logging_cfg.project, mode=logging_cfg.wandb, **kwargs
    )


def log_reference_run(
    project: str = DEFAULT_PROJECT,
    dir: str | Path = ".",
    mode: str | None = None,
) -> str | None:
    """Write Rapid's phase onsets on the episode axis as run `rapid-reference` under `dir`.

    Returns the run id, or None when logging is disabled. Done once per directory (a marker
    file `wandb/rapid-reference` records it), so a resumed experiment does not log it again; a
    population member's directory defers to its population's (see the module's docstring).
    """
    mode = resolve_mode(mode)
    if mode == "disabled" or not available("wandb"):
        return None
    import wandb

    dir = Path(dir)
    if dir.parent.name == MEMBERS_DIR:
        dir = dir.parent.parent
    marker = dir / "wandb" / REFERENCE_RUN_ID
    if marker.is_file():
        return REFERENCE_RUN_ID
    baselines = load_baselines()
    rapid, srl = baselines.rapid, baselines.srl
    config = {
        "baseline": rapid.name,
        "source": rapid.source.cite(),
        "srl": {
            "name": srl.name,
            "source": srl.source.cite(),
            "runs": [
                {"label": r.label, "hardware": r.hardware(), "hours": r.hours} for r in srl.runs
            ],
            "speedup_vs_rapid": srl.speedup_vs_rapid.factor if srl.speedup_vs_rapid else None,
        },
    }
    (dir / "wandb").mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project,
        dir=str(dir),
        id=REFERENCE_RUN_ID,
        name="Rapid (paper reference)",
        job_type="reference",
        resume="allow",
        mode=mode,
        config=config,
        settings=wandb.Settings(console="off", silent=True),
    )
    try:
        define_axes(run)
        for phase in PHASES:
            mark = rapid.phases.get(phase)
            if mark is None or mark.episodes is None:
                continue
            run.log({"episodes": mark.episodes, **_phase_row(phase, mark.episodes)})
            run.summary[f"phase/{phase}/episodes"] = mark.episodes
        for r in rapid.runs:
            if r.phase and r.episodes is not None:
                row = {"episodes": r.episodes, "reference/run_reached_phase": 1}
                row.update({k: v for k, v in (("frames", r.frames), ("hours", r.hours)) if v})
                run.log(row)
    finally:
        _finish(run, 0)
    marker.write_text(REFERENCE_RUN_ID + "\n")
    return REFERENCE_RUN_ID


def run_records(path: Path) -> list[dict]:
    """The run file's records as wandb's `leet inspect --json` prints them."""
    done = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=INSPECT_TIMEOUT_S,
        env={**os.environ, "WANDB_SILENT": "true"},
    )
    if done.returncode != 0:
        raise ValueError(f"wandb could not read {path}: {done.stderr.strip()[-500:]}")
    try:
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise ValueError(f"wandb printed something other than JSON for {path}: {err}") from None
