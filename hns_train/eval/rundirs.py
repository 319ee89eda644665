"""Finding runs and their checkpoints from what a user types on the command line.

Every eval command that takes a run or a checkpoint goes through here, so all of them accept
the same forms:
- `latest`: the newest run under `runs/` (the default `runs_dir`; the one whose metrics.jsonl,
  checkpoints or config changed last);
- a run directory (`runs/default`): for a checkpoint, its newest checkpoint that loads;
- a `checkpoints/` folder: its newest checkpoint that loads;
- a file (`runs/default/checkpoints/ckpt_0000000100.pt`, `runs/default/pool/snapshot_*.pt`).

A render of a replay without `--out` (`render_path`) goes into the run the replay belongs to
(next to it, in the run's `replays/`); a replay that is not a run's (the repository's shipped
examples, a file from elsewhere) renders into `runs/renders/`, never beside it.

Public API: `resolve_run_dir(arg, runs_dir="runs") -> Path`, `is_run_dir(path) -> bool`,
`resolve_checkpoint(arg, runs_dir="runs") -> Path`, `render_path(replay, fmt) -> Path`,
`output_format(out, fmt=None, allowed=RENDER_FORMATS) -> str`, `LATEST`, `RENDERS`,
`FRAME_PX`.
"""

from __future__ import annotations

import os
from pathlib import Path

LATEST = "latest"
RUNS_DIR = "runs"  # RunConfig.runs_dir's default: where `python -m hns_train.train` writes
_MARKERS = ("metrics.jsonl", "config.yaml", "checkpoints")  # what a run directory holds
RENDERS = "renders"  # under RUNS_DIR: renders of replays that belong to no run
VIDEO_FORMATS = ("mp4", "gif", "png")  # what video.py writes (a png is one frame)
RENDER_FORMATS = (*VIDEO_FORMATS, "html")
FRAME_PX = 480  # a rendered frame's default width and height (VideoOptions, --width, --height)


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.yaml").is_file()


def render_path(replay: str | os.PathLike, fmt: str) -> Path:
    """Where a render of the replay file goes by default (see the module docstring)."""
    replay = Path(replay)
    if is_run_dir(replay.parent) or is_run_dir(replay.parent.parent):
        return replay.with_suffix(f".{fmt}")
    return Path(RUNS_DIR) / RENDERS / f"{replay.stem}.{fmt}"


def output_format(
    out: str | os.PathLike | None, fmt: str | None = None, allowed: tuple = RENDER_FORMATS
) -> str:
    """The format of a render to `out`: `out`'s extension, else `fmt`, else mp4; ValueError
    names the formats `allowed`, says that `out` is a folder, or that its extension is not
    `fmt` (a file's name says what it holds)."""
    if out is not None and Path(out).is_dir():
        raise ValueError(
            f"cannot render to {str(out)!r}: it is a folder; give a file in it "
            f"({str(Path(out) / 'NAME')}.{fmt or 'mp4'})"
        )
    suffix = Path(out).suffix.lstrip(".").lower() if out else ""
    if fmt and suffix and suffix != fmt:
        raise ValueError(
            f"cannot render {str(out)!r} as format {fmt!r}: its extension says {suffix!r}; "
            f"give a file ending in .{fmt}, or leave the format to the extension "
            f"(one of {allowed})"
        )
    fmt = fmt or suffix or "mp4"
    if fmt not in allowed:
        raise ValueError(
            f"cannot render {str(out)!r} as format {fmt!r}: the formats are {allowed} "
            "(the file's extension, or --format)"
        )
    return fmt


def _last_change(run: Path) -> float:
    times = [(run / m).stat().st_mtime for m in _MARKERS if (run / m).exists()]
    ckpts = run / "checkpoints"
    if ckpts.is_dir():
        times += [p.stat().st_mtime for p in ckpts.glob("ckpt_*.pt")]
    return max(times, default=0.0)


def resolve_run_dir(arg: str | os.PathLike, runs_dir: str | os.PathLike = RUNS_DIR) -> Path:
    """The run directory `arg` names: `latest` or a path; ValueError says what is missing."""
    if str(arg) == LATEST:
        root = Path(runs_dir)
        runs = [p for p in root.iterdir() if is_run_dir(p)] if root.is_dir() else []
        if not runs:
            raise ValueError(
                f"'latest': no run directory under {root}/ (start one with "
                "`python -m hns_train.train`, or give a run directory)"
            )
        return max(runs, key=_last_change)
    path = Path(arg)
    if path.exists() and not path.is_dir():
        raise ValueError(f"run directory {path}: a file, not a directory")
    if not path.is_dir():
        raise ValueError(f"run directory {path}: no such directory")
    return path


def resolve_checkpoint(arg: str | os.PathLike, runs_dir: str | os.PathLike = RUNS_DIR) -> Path:
    """The checkpoint file `arg` names: a file, a run or checkpoints directory, or `latest`."""
    from hns_train.agents.checkpoint import resolve_checkpoint as newest_checkpoint

    path = resolve_run_dir(arg, runs_dir) if str(arg) == LATEST else Path(arg)
    try:
        return newest_checkpoint(path)  # skips broken files with a warning
    except ValueError as err:
        if path.exists():
            hint = "the trainer writes one every pipeline.checkpoint_every optimisation steps"
            raise ValueError(f"{err}; {hint} and when the run stops") from None
        raise ValueError(
            f"{err}; give a checkpoint (.pt), a run directory, or '{LATEST}' (the newest run "
            f"under {runs_dir}/)"
        ) from None
