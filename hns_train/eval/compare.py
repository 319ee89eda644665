"""`python -m hns_train.eval compare RUN_DIR`: a run's emergent phases against Rapid and SRL.

Prints one table (phase | Rapid | SRL | this run: episodes, frames, hours, episodes relative to
Rapid) with rows for the time to ramp defense and the hardware, and writes a PNG of the
behaviour statistics versus episodes (log x) with Rapid's onsets (dashed) and this run's
(solid) marked, one panel per group of statistics the run's game can move (chase has no boxes,
ramps or preparation: only its outcome is drawn). The baseline numbers come from
`baselines.yaml`, never from this module.

This run's onsets are its `phase` records in metrics.jsonl; phases without a record are filled
in by running the detector (`phases.PhaseDetector`) over its training records, so a run made
before detection was switched on still compares. The run directory contract: `config.yaml`
(name, game.preset), `hardware.yaml` (cpus, gpus, gpu_name; missing keys are shown as unknown)
and `metrics.jsonl`; a YAML file of these that cannot be read is refused with its path.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hns_train.atomic_file import read_yaml
from hns_train.envs.config import make_config
from hns_train.eval.baselines import Baselines, load_baselines
from hns_train.eval.figure import panels, save_png, side_legend
from hns_train.eval.phases import (
    PHASE_TITLES,
    PHASES,
    PhaseDetector,
    PhaseOnset,
    episode_stats,
    read_metrics,
    with_ramp_move_after_prep,
)

DEFAULT_WIDTH, DEFAULT_HEIGHT = 1400, 1000  # pixels
MAX_PIXELS = 8000  # per side; beyond this matplotlib needs gigabytes
SMOOTH_RECORDS = 5  # rolling mean drawn over the raw per-record values
TABLE_WIDTH = 100  # terminal columns the table and its notes fit in

# Panels of the plot: (title, [(label, the episode statistic drawn)], whether a game has it).
# A panel whose statistics a game cannot move (chase has no boxes, ramps or preparation) is
# left out: it would be a flat line at zero.
PANELS = [
    (
        "boxes (preparation)",
        [
            ("max box move in prep (m)", "max_box_move_prep"),
            ("boxes locked in prep", "num_box_lock_prep"),
        ],
        lambda game: game.max_boxes > 0 and game.prep_steps > 0,
    ),
    (
        "ramps",
        [
            ("ramp move after prep (m)", "ramp_move_after_prep"),
            ("ramps locked in prep", "num_ramp_lock_prep"),
        ],
        lambda game: game.n_ramps > 0,
    ),
    (
        "box surfing",
        [("seeker surf steps / episode", "num_box_surf")],
        lambda game: game.max_boxes > 0,
    ),
    (
        "outcome",
        [("hidden fraction (hiders win > 0.5)", "hidden_fraction")],
        lambda game: True,
    ),
]


@dataclass
class RunSummary:
    """What `compare` needs from a run directory."""

    path: Path
    name: str
    preset: str | None
    hardware: dict
    records: list[dict]
    onsets: dict[str, PhaseOnset]
    recorded: set[str] = field(default_factory=set)  # phases with a phase record in the file
    game: Any = None  # its GameConfig; None where config.yaml does not make one

    def panels(self) -> tuple[list, list[str]]:
        """The plot's panels for this run's game, and the titles of those left out."""
        if self.game is None:
            return [p[:2] for p in PANELS], []
        kept = [p[:2] for p in PANELS if p[2](self.game)]
        return kept, [p[0] for p in PANELS if not p[2](self.game)]

    @property
    def last(self) -> dict:
        return self.records[-1] if self.records else {}


def load_run(run_dir: str | Path) -> RunSummary:
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{run_dir} has no metrics.jsonl (is it a run directory?)")
    config = read_yaml(run_dir / "config.yaml") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{run_dir / 'config.yaml'} is not a mapping")
    records, recorded = read_metrics(metrics)
    detector = PhaseDetector.from_records(records, recorded)  # the file is read once
    game = config.get("game") if isinstance(config.get("game"), dict) else {}
    try:
        game_config = make_config(**game)
    except (TypeError, ValueError):  # a config of another version: every panel is drawn
        game_config = None
    hardware = read_yaml(run_dir / "hardware.yaml")  # written by the controller
    return RunSummary(
        path=run_dir,
        name=str(config.get("name") or run_dir.name),
        preset=game.get("preset"),
        hardware=hardware if isinstance(hardware, dict) else {},
        records=records,
        onsets=dict(detector.fired),
        recorded={o.phase for o in recorded},
        game=game_config,
    )


# ---------------------------------------------------------------------- formatting
def human(x: float | None, unit: str = "") -> str:
    """25e6 -> '25 M', 31.7e9 -> '31.7 B', 1234 -> '1.2 k'; None -> '–'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    for scale, suffix in ((1e9, " B"), (1e6, " M"), (1e3, " k")):
        if abs(x) >= scale:
            v = x / scale
            text = f"{v:.1f}".removesuffix(".0")
            return f"{text}{suffix}{unit}"
    return f"{x:.0f}{unit}" if float(x).is_integer() else f"{x:.2f}{unit}"


def hours_text(h: float | None) -> str:
    if h is None:
        return "–"
    return f"{h:.1f} h" if h >= 10 else f"{h:.2f} h"


def hardware_text(hw: dict) -> str:
    if not hw:
        return "hardware not recorded"
    cpus, gpus, name = hw.get("cpus"), hw.get("gpus"), hw.get("gpu_name")
    parts = [f"{cpus} CPU cores" if cpus is not None else "CPU cores unknown"]
    if gpus:
        parts.append(f"{gpus} x {name}" if name else f"{gpus} GPUs")
    elif gpus == 0:
        parts.append("no GPU")
    return " + ".join(parts)


def format_table(run: RunSummary, baselines: Baselines) -> str:
    """The comparison as text that fits `TABLE_WIDTH` columns: one row per phase (Rapid, SRL,
    this run's onset in episodes, frames and hours, and its episodes relative to Rapid's), the
    progress so far, then the time to ramp defense, the hardware and the sources as notes."""
    rapid, srl = baselines.rapid, baselines.srl
    rapid_run = next((r for r in rapid.runs if r.phase == "ramp_defense"), None)
    srl_run = srl.runs[0] if srl.runs else None
    header = ["phase", "Rapid (episodes)", "SRL", "this run", "frames", "hours", "x Rapid"]
    rows = []
    for phase in PHASES:
        mark = rapid.phases.get(phase)
        rapid_ep = None if mark is None else mark.episodes
        rapid_cell = "after box surfing" if mark is not None and rapid_ep is None else "–"
        if rapid_ep is not None:
            rapid_cell = ("≈" if mark.approximate else "") + human(rapid_ep)
        srl_mark = srl.phases.get(phase)
        srl_cell = human(srl_mark.episodes) if srl_mark and srl_mark.episodes is not None else "–"
        onset = run.onsets.get(phase)
        if onset is None:
            rows.append([PHASE_TITLES[phase], rapid_cell, srl_cell, "not reached", "", "", ""])
            continue
        ratio = f"{onset.episodes / rapid_ep:.2g}x" if rapid_ep else ""
        star = "" if phase in run.recorded else "*"
        rows.append(
            [
                PHASE_TITLES[phase],
                rapid_cell,
                srl_cell,
                human(onset.episodes) + star,
                human(onset.frames),
                hours_text(onset.hours),
                ratio,
            ]
        )
    last = run.last
    rows.append(
        [
            "so far",
            "",
            "",
            human(last.get("episodes")) if last else "no training records",
            human(last.get("frames")) if last else "",
            hours_text(last.get("hours")) if last else "",
            "",
        ]
    )
    if not any(r[-1] for r in rows):  # no onset to relate to Rapid's: no empty column
        header, rows = header[:-1], [r[:-1] for r in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    title = f"run {run.name}" + (f" (preset {run.preset})" if run.preset else "")
    out = [title, "", line(header), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    out.append("")

    def took(x) -> str:  # an onset or a reported run: how far it had come
        return f"{human(x.episodes)} ep, {human(x.frames)} frames, {hours_text(x.hours)}"

    rd = run.onsets.get("ramp_defense")
    vs_rapid = f" ({rd.episodes / rapid_run.episodes:.2g}x Rapid)" if rd and rapid_run else ""
    speedup = srl.speedup_vs_rapid
    faster = f"same solution, up to {speedup.factor:g}x faster (wall clock)" if speedup else "–"
    batch = "–"
    if rapid_run and rapid_run.batch_chunks:
        batch = f"batch {rapid_run.batch_chunks:,} chunks x {rapid_run.chunk_length} steps"
    notes = [
        (
            "to ramp defense",
            [
                f"this run: {took(rd) if rd else 'not reached'}{vs_rapid}",
                f"Rapid: {took(rapid_run) if rapid_run else '–'}",
                f"SRL: {faster}",
            ],
        ),
        (
            "hardware",
            [
                f"this run: {hardware_text(run.hardware)}",
                f"Rapid: {batch}",
                f"SRL: {srl_run.hardware()}, {hours_text(srl_run.hours)}" if srl_run else "SRL: –",
            ],
        ),
    ]
    label_w = max(len(label) for label, _ in notes) + 2
    for label, parts in notes:
        out += [(label if k == 0 else "").ljust(label_w) + part for k, part in enumerate(parts)]
    out.append("")
    if not run.onsets:
        n = len(run.records)
        out.append(
            f"This run has not reached any phase yet ({n} training records"
            + (f", {human(last.get('episodes'))} episodes)." if last else ").")
        )
    if any(p not in run.recorded for p in run.onsets):
        out.append("* found by re-running the phase detector over metrics.jsonl (no phase record)")
    largest = max(srl.runs, key=lambda r: r.cpu_cores or 0, default=None)
    if largest is not None and largest is not srl_run:
        out.append(f"SRL at its largest scale: {largest.hardware()} ({largest.label}).")
    out.append(f"Rapid: {rapid.source.cite()}.")
    out.append(f"SRL: {srl.source.cite()}.")
    return "\n".join(
        wrapped
        for text in out
        for wrapped in (textwrap.wrap(text, TABLE_WIDTH, subsequent_indent="  ") or [""])
    )


# ---------------------------------------------------------------------- plot
def _series(records: list[dict], stat: str) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for r in records:
        y = with_ramp_move_after_prep(episode_stats(r)).get(stat)
        ep = r.get("episodes")
        if y is None or ep is None or ep <= 0:
            continue
        xs.append(float(ep))
        ys.append(y)
    return np.asarray(xs), np.asarray(ys)


def plot_run(
    run: RunSummary,
    baselines: Baselines,
    out: str | Path,
    width: int = DEFAULT_WIDTH,
    height: int = DEFAULT_HEIGHT,
) -> Path:
    """Write the PNG (exactly width x height pixels) and return its path."""
    return save_png(draw_run(run, baselines, width, height), out)


def draw_run(
    run: RunSummary, baselines: Baselines, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> Any:
    """The figure `plot_run` writes: a panel per statistic group the run's game has."""
    for name, v in (("width", width), ("height", height)):
        if not isinstance(v, int) or not 200 <= v <= MAX_PIXELS:
            raise ValueError(f"{name}={v!r} pixels must be an integer in [200, {MAX_PIXELS}]")
    drawn, left_out = run.panels()
    fig, axes = panels(width, height, len(drawn))
    rapid = baselines.rapid
    all_marks = [(p, m.episodes) for p, m in rapid.phases.items() if m.episodes]
    lo, hi = x_range(run, all_marks)
    marks = [(p, ep) for p, ep in all_marks if lo <= ep <= hi]
    colours = ["tab:blue", "tab:orange"]
    for ax, (title, lines) in zip(axes, drawn, strict=True):
        for colour, (label, stat) in zip(colours, lines, strict=False):
            x, y = _series(run.records, stat)
            if len(x):
                ax.plot(x, y, color=colour, alpha=0.25, linewidth=0.8)
                k = min(SMOOTH_RECORDS, len(y))
                smooth = np.convolve(y, np.ones(k) / k, mode="valid")
                ax.plot(x[k - 1 :], smooth, color=colour, linewidth=1.8, label=label)
            else:
                ax.plot([], [], color=colour, label=f"{label} (no data)")
        if title == "outcome":  # above: hiders win more play steps than seekers
            ax.axhline(0.5, color="0.5", linewidth=0.8, linestyle=":")
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(True, which="major", alpha=0.3)
        side_legend(ax)
        for _, ep in marks:
            ax.axvline(ep, color="0.35", linestyle="--", linewidth=1.0)
        for onset in run.onsets.values():
            if onset.episodes > 0:
                ax.axvline(onset.episodes, color="tab:green", linewidth=1.4)
    bottom = axes[-1]
    bottom.set_xscale("log")
    bottom.set_xlim(lo, hi)
    bottom.set_xlabel("episodes (log scale)")
    beyond = beyond_note(all_marks, hi)
    if beyond:
        axes[0].text(  # right of the panel, under its legend: no data hides under it
            1.005, 0.0, beyond, transform=axes[0].transAxes, ha="left", va="bottom",
            fontsize=8, color="0.25", bbox=dict(facecolor="white", edgecolor="0.6", alpha=0.9),
        )  # fmt: skip
    status = (
        "no training records yet"
        if not run.records
        else "no phase reached yet"
        if not run.onsets
        else f"{len(run.onsets)} of {len(PHASES)} phases reached"
    )
    # the title names only what is drawn: a short run's span holds no Rapid onset
    key = ["dashed: Rapid onsets"] if marks else []
    key += ["green: this run's"] if any(o.episodes > 0 for o in run.onsets.values()) else []
    key += ["Rapid's later onsets are listed in the box"] if beyond else []
    title = f"{run.name}: behaviour statistics vs episodes ({status})"
    title += "; " + ", ".join(key) if key else ""
    if left_out:
        title += f"\nnot drawn, the {run.preset or 'run'} game has none: {', '.join(left_out)}"
    fig.suptitle(title, fontsize=11)
    top = 0.97 if not left_out else 0.94
    fig.tight_layout(rect=(0, 0, 1, top))  # makes room for the legends right of the panels
    _label_onsets(fig, axes[0], marks, run)
    return fig


def x_range(run: RunSummary, marks: list[tuple[str, float]]) -> tuple[float, float]:
    """Episode axis limits: this run's records with a margin (a short run fills the plot, not a
    sliver of an axis running to Rapid's 10^8); Rapid's span when the run has no records."""
    episodes = [float(r["episodes"]) for r in run.records if (r.get("episodes") or 0) > 0]
    episodes += [o.episodes for o in run.onsets.values() if o.episodes > 0]
    if not episodes:
        episodes = [ep for _, ep in marks] or [1e3, 1e9]
    lo, hi = min(episodes), max(episodes)
    return lo / 1.5, max(hi * 1.5, lo * 10)  # at least a decade


def beyond_note(marks: list[tuple[str, float]], hi: float) -> str:
    """The text naming Rapid's onsets that lie beyond the plotted episodes."""
    later = [
        f"{PHASE_TITLES[p]} ≈{human(ep)}" for p, ep in sorted(marks, key=lambda m: m[1]) if ep > hi
    ]
    return ("Rapid's onsets beyond this run (episodes) →\n" + "\n".join(later)) if later else ""


def _label_onsets(fig, ax, marks, run: RunSummary) -> None:
    """Vertical onset labels in the top panel, each beside its line: left of it when there is
    room after the previous label, else right of it (Rapid's 100 M / 110 M pair is close)."""
    labels = [(ep, f"Rapid: {PHASE_TITLES[p]}", "0.25") for p, ep in marks]
    labels += [
        (o.episodes, f"this run: {PHASE_TITLES[p]}", "tab:green")
        for p, o in run.onsets.items()
        if o.episodes > 0
    ]
    lo, hi = (math.log10(v) for v in ax.get_xlim())
    axis_px = ax.get_window_extent().width
    text_w = 1.6 * 7 * fig.dpi / 72 * (hi - lo) / axis_px  # one rotated 7 pt line, in decades
    edge = -math.inf  # log10 x of the right edge of the last label placed
    for ep, text, colour in sorted(labels):
        x = math.log10(ep)
        if x - text_w > edge:
            side, edge = "right", x
        else:
            side, edge = "left", x + text_w
        ax.annotate(
            text,
            xy=(ep, 0.98),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha=side,
            fontsize=7,
            color=colour,
            bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.7),
        )


# ---------------------------------------------------------------------- entry points
def run_compare(
    run_dir: str | Path,
    out: str | Path | None = None,
    width: int = DEFAULT_WIDTH,
    height: int = DEFAULT_HEIGHT,
    baselines: Baselines | None = None,
) -> str:
    """Table text for `run_dir`; also writes the plot (default RUN_DIR/compare.png)."""
    from hns_train.eval.rundirs import output_format, resolve_run_dir

    if out is not None:  # a folder given for the plot is refused before any work
        output_format(out, "png", ("png",))
    run = load_run(resolve_run_dir(run_dir))
    baselines = baselines or load_baselines()
    path = plot_run(run, baselines, out or run.path / "compare.png", width, height)
    return format_table(run, baselines) + f"\nPlot: {path}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hns_train.eval compare",
        description="Compare a run's emergent phases with Rapid and SRL (table + PNG plot).",
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="runs/<name> directory, or 'latest' (the newest run)"
    )
    parser.add_argument("--out", help="PNG path (default RUN_DIR/compare.png)")
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="plot width, pixels")
    parser.add_argument("--height", type=int, default=DEFAULT_HEIGHT, help="plot height, pixels")
    return parser


def compare_main(argv: list[str] | None = None) -> int:
    """The `compare` command; a ValueError (a user can fix it) is printed by the cli."""
    args = build_parser().parse_args(argv)
    print(run_compare(args.run_dir, args.out, args.width, args.height))
    return 0
