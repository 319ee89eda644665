"""`python -m hns_train.eval`: argument parsing and dispatch only; each command lives elsewhere.

Forms:
- `python -m hns_train.eval REPLAY [--format mp4|gif|png|html] [--camera top|follow:AGENT]
  [--out PATH] [--show] [--width W --height H --fps F --frame T]`: render a replay (video.py,
  html.py) or play it in MuJoCo's interactive viewer (`--show`, needs a display). Prints the
  path it wrote: `--out`, else next to the replay in its run, else `runs/renders/`
  (`rundirs.render_path`).
- `python -m hns_train.eval --run RUN_DIR|latest`: a run's leaderboard, phases and newest replays
  (the `RUN_VIEW` entry below).
- `python -m hns_train.eval SUBCOMMAND ...`: one entry of `SUBCOMMANDS`.

Adding a command: write an entry point `fn(argv: list[str]) -> int` (its own argparse parser,
`prog="python -m hns_train.eval NAME"`) in its own module and add one entry to `SUBCOMMANDS`.
Modules are imported only when their command runs, so one command's imports never slow or
break another.
Errors a user can fix (bad file, bad option, an output path that cannot be written) print
`error: ...` and exit with status 2, no traceback. A render stopped with SIGTERM or Ctrl-C
leaves no partial output file (an evaluation worker that stops terminates its render this way).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from pathlib import Path

from hns_train.eval import stop
from hns_train.eval.rundirs import (
    FRAME_PX,
    RENDER_FORMATS,
    output_format,
    render_path,
    resolve_run_dir,
)

PROG = "python -m hns_train.eval"

# name -> (module, its entry point `fn(argv: list[str]) -> int` parsing the rest of the command
# line itself, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "compare": (
        "hns_train.eval.compare",
        "compare_main",
        "compare a run with the Rapid and SRL baselines",
    ),
    "play": ("hns_train.eval.play", "play_main", "play two policies now, record and render"),
    "record": (
        "hns_train.eval.record",
        "record_main",
        "record a replay from random or scripted play (the example replay)",
    ),
}
# `--run RUN_DIR`: module exposing run_view(run_dir: str) -> int | None
RUN_VIEW = "hns_train.eval.runview"


def replay_parser() -> argparse.ArgumentParser:
    epilog = "commands:\n" + "\n".join(
        f"  {PROG} {name} ...  {help_}" for name, (_, _, help_) in SUBCOMMANDS.items()
    )
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Render or show a hide-and-seek replay; inspect runs.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("replay", nargs="?", help="replay file (.npz)")
    p.add_argument(
        "--run",
        metavar="RUN_DIR",
        help="show a run's leaderboard, phases, replays ('latest': the newest run)",
    )
    p.add_argument(
        "--format", choices=RENDER_FORMATS, help="output format (default: from --out, else mp4)"
    )
    p.add_argument("--camera", default="top", help="top | follow:AGENT (e.g. follow:seeker_0)")
    p.add_argument(
        "--out",
        help="output path (default: next to the replay in its run; a replay of no run, such as "
        "the shipped examples: runs/renders/NAME.FORMAT)",
    )
    p.add_argument("--show", action="store_true", help="play in MuJoCo's interactive viewer")
    p.add_argument("--width", type=int, default=FRAME_PX)
    p.add_argument("--height", type=int, default=FRAME_PX)
    p.add_argument("--fps", type=float, default=None, help="frames per second (default: real time)")
    p.add_argument("--frame", type=int, default=-1, help="frame for --format png (default: last)")
    p.add_argument("--no-sight-lines", action="store_true", help="do not draw lines of sight")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return _subcommand(argv[0], argv[1:])
        args = replay_parser().parse_args(argv)
        if args.run is not None:
            if args.replay is not None:
                raise ValueError("give either a REPLAY or --run RUN_DIR, not both")
            run_view = importlib.import_module(RUN_VIEW).run_view
            return run_view(resolve_run_dir(args.run)) or 0
        if args.replay is None:
            replay_parser().print_help()
            return 2
        return _render(args)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {_os_error(e)}", file=sys.stderr)
        return 2


def _os_error(e: OSError) -> str:
    """A file that could not be read or written: its path and why, in words."""
    if isinstance(e, FileExistsError | NotADirectoryError) and e.filename:
        # making an output's folder met a file on the way: name that file
        path = Path(e.filename)
        file = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        return f"{file} is a file, not a folder: an output path must lie in a folder"
    return f"{e.filename}: {e.strerror}" if e.filename else str(e)


def _subcommand(name: str, argv: list[str]) -> int:
    module_name, function, _ = SUBCOMMANDS[name]
    return getattr(importlib.import_module(module_name), function)(argv) or 0


def _render(args) -> int:
    if threading.current_thread() is threading.main_thread():
        stop.stop_on(signal.SIGTERM)
    if not args.show:  # show checks for a display itself
        # headless offscreen rendering must be chosen before MuJoCo is imported
        os.environ.setdefault("MUJOCO_GL", "egl")
    from hns_train.eval import replay as replay_mod

    replay = replay_mod.load(args.replay)
    if args.show:
        from hns_train.eval.video import show

        show(replay, camera=args.camera, fps=args.fps)
        return 0
    fmt = output_format(args.out, args.format)
    out = args.out or str(render_path(args.replay, fmt))
    if fmt == "html":
        from hns_train.eval.html import write_html

        path = write_html(replay, out)
    else:
        from hns_train.eval import video

        opts = video.VideoOptions(
            width=args.width,
            height=args.height,
            camera=args.camera,
            fps=args.fps,
            sight_lines=not args.no_sight_lines,
        )
        path = video.write_video(replay, out, opts, fmt, not args.quiet, args.frame)
    print(path)
    size = os.path.getsize(path) / 1e3
    print(f"{fmt}: {replay.n_frames} frames of {args.replay} ({size:.0f} kB)", file=sys.stderr)
    return 0
