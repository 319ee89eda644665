"""`python -m hns_train.eval play`: matches between two policies now, recorded as replays and
rendered to mp4. The policies (files or names) come from `policies.py`, the recording hook
(`play_recorded`) from `recorder.py`; evaluation workers use the same two modules.

`python -m hns_train.eval play A B|random|noop|scripted_seeker [--preset P] [--matches N]`:
A and B are checkpoints in any form `rundirs.resolve_checkpoint` takes (a run directory,
`latest`, a `.pt` file). A hides and B seeks for N matches, then (unless `--one-way`) the roles
swap for N more; every match is recorded (`--record` limits it) and rendered to mp4 (`--videos`
limits it, `--no-video` skips it) with a progress bar; the results table names each replay.
Matches are played without exploration noise unless `--stochastic`. Nothing is rated: the run's
ratings belong to its evaluation workers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hns_train.eval.matches import MatchResult
from hns_train.eval.policies import (
    NAMED,
    SEEKER_ONLY,
    PolicyFile,
    label,
    load_policy_file,
    named_controller,
    policy_controller,
)
from hns_train.eval.recorder import play_recorded, team_metadata
from hns_train.eval.rundirs import FRAME_PX, RENDERS, RUNS_DIR, resolve_checkpoint

PROG = "python -m hns_train.eval play"
DEFAULT_PRESET = "quadrant"  # when neither side is a checkpoint


# ----------------------------------------------------------------------------- the command


@dataclass
class Side:
    """One argument of `play`: a policy file or a fixed controller name."""

    arg: str
    letter: str  # "a" | "b": its rating-style id in results
    source: PolicyFile | None

    @property
    def display(self) -> str:
        if self.source is None:
            return self.arg
        v = "" if self.source.version is None else f" v{self.source.version}"
        return f"{self.letter.upper()} {self.source.path.name}{v}"

    def controller(self, game_cfg, role: str, deterministic: bool, seed: int):
        if self.source is None:
            return named_controller(self.arg, role, seed, game_cfg.action_bins)
        return policy_controller(self.source, game_cfg, self.letter, deterministic)

    def metadata(self) -> dict[str, Any]:
        if self.source is None:
            return team_metadata(self.arg)
        return team_metadata(self.display, self.source.version, file=str(self.source.path))


def _side(arg: str, letter: str) -> Side:
    if arg in NAMED:
        return Side(arg, letter, None)
    return Side(arg, letter, load_policy_file(resolve_checkpoint(arg)))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Play matches between two policies now: A hides and B seeks, then the roles swap. "
            "Every match is recorded as a replay and rendered to mp4."
        ),
    )
    p.add_argument(
        "a",
        metavar="CHECKPOINT_A",
        help="a run directory (its newest checkpoint), 'latest' (the newest run's), or a "
        "trainer checkpoint or pool snapshot (.pt)",
    )
    p.add_argument(
        "b", metavar="CHECKPOINT_B", help=f"the same forms as A, or one of {', '.join(NAMED)}"
    )
    p.add_argument("--preset", help="game preset (default: the checkpoint's game)")
    p.add_argument("--matches", type=int, default=2, help="matches per role assignment")
    p.add_argument("--worlds", type=int, default=None, help="worlds stepped at once")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--one-way", action="store_true", help="only A hides (no role swap)")
    p.add_argument("--stochastic", action="store_true", help="sample actions (exploration on)")
    p.add_argument(
        "--out",
        help="folder for replays and videos (default: the run's replays/; with no run among "
        "the sides: runs/renders/)",
    )
    p.add_argument("--record", type=int, default=None, help="matches recorded (default: all)")
    p.add_argument("--videos", type=int, default=None, help="replays rendered (default: all)")
    p.add_argument("--no-video", action="store_true", help="record replays, render nothing")
    p.add_argument("--width", type=int, default=FRAME_PX)
    p.add_argument("--height", type=int, default=FRAME_PX)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _out_dir(args, sides: list[Side]) -> Path:
    if args.out:
        return Path(args.out)
    for side in sides:
        if side.source is not None and side.source.path.parent.name in ("checkpoints", "pool"):
            return side.source.path.parent.parent / "replays"
    return Path(RUNS_DIR) / RENDERS  # no run: never the repository's replays/


def _game_config(args, sides: list[Side]):
    from hns_train.envs.config import make_config

    files = [s.source for s in sides if s.source is not None]
    if args.preset is not None:
        return make_config(args.preset)
    if files:
        return files[0].config.game_config()
    return make_config(DEFAULT_PRESET)


def play_main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name, least in (("matches", 1), ("worlds", 1), ("record", 0), ("videos", 0), ("seed", 0)):
        value = getattr(args, name)
        if value is not None and value < least:
            raise ValueError(f"--{name} must be >= {least}")
    if args.a in NAMED:
        raise ValueError(f"CHECKPOINT_A must be a checkpoint file, got {args.a!r}")
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before mujoco loads
    from hns_train.envs.game import HideAndSeekGame
    from hns_train.eval.video import VideoOptions, write_video

    # a frame size the video cannot have is refused before any match is played
    options = None if args.no_video else VideoOptions(width=args.width, height=args.height)
    if options is not None:
        options.check_format("mp4")
    sides = [_side(args.a, "a"), _side(args.b, "b")]
    game_cfg = _game_config(args, sides)
    assignments = [(sides[0], sides[1])]
    if not args.one_way:
        assignments.append((sides[1], sides[0]))
    if sides[1].arg in SEEKER_ONLY:
        assignments = assignments[:1]  # it cannot hide
    worlds = args.worlds or min(args.matches, 4)
    game = HideAndSeekGame(game_cfg, n_worlds=worlds, seed=args.seed)
    out_dir = _out_dir(args, sides)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    budget = np.inf if args.record is None else args.record
    deterministic = not args.stochastic
    print(
        f"{game_cfg.preset}: {len(assignments)} x {args.matches} matches on {worlds} worlds, "
        f"{'deterministic' if deterministic else 'sampled'} actions; replays in {out_dir}"
    )

    rows: list[tuple[MatchResult, str, str, Path | None]] = []
    for k, (hider, seeker) in enumerate(assignments):
        hc = hider.controller(game_cfg, "hider", deterministic, args.seed + 1)
        sc = seeker.controller(game_cfg, "seeker", deterministic, args.seed + 2)
        meta = {
            "hiders": hider.metadata(),
            "seekers": seeker.metadata(),
            "kind": "play",
            "deterministic": deterministic,
        }
        for start in range(0, args.matches, worlds):
            n = min(worlds, args.matches - start)
            seed = args.seed + 1000 * k + start
            n_rec = int(min(n, budget))
            budget -= n_rec
            prefix = f"play_{stamp}_{label(hc.policy_id)}_vs_{label(sc.policy_id)}"
            names = [out_dir / f"{prefix}_s{seed + w}.npz" for w in range(n_rec)]
            results, paths = play_recorded(game, hc, sc, n, seed, meta, names, not args.quiet)
            rows += [
                (r, hider.display, seeker.display, p) for r, p in zip(results, paths, strict=True)
            ]

    videos: list[Path] = []
    if options is not None:
        from hns_train.eval.replay import load

        todo = [p for *_, p in rows if p is not None]
        if args.videos is not None:
            todo = todo[: args.videos]
        for i, path in enumerate(todo, start=1):  # each mp4 next to its replay
            if not args.quiet:
                print(f"rendering {i}/{len(todo)}: {path.name}", file=sys.stderr)
            out = path.with_suffix(".mp4")
            videos.append(write_video(load(path), out, options, progress=not args.quiet))
    _print_results(rows, videos)
    return 0


def _print_results(rows, videos: list[Path]) -> None:
    print(f"\n{'hiders':<28} {'seekers':<28} {'seed':>6} {'hidden':>6} {'hider':>7} {'seeker':>7}")
    for r, hider, seeker, _ in rows:
        print(
            f"{hider:<28} {seeker:<28} {r.seed if r.seed is not None else '-':>6} "
            f"{r.hidden_fraction:>6.3f} {r.hider_return:>+7.1f} {r.seeker_return:>+7.1f}"
        )
    by_pair: dict[tuple[str, str], list[float]] = {}
    for r, hider, seeker, _ in rows:
        by_pair.setdefault((hider, seeker), []).append(r.hidden_fraction)
    print("\nhidden fraction (the rating score: share of play steps no seeker saw a hider)")
    for (hider, seeker), scores in by_pair.items():
        print(
            f"  {hider} hiding from {seeker}: {np.mean(scores):.3f} ± {np.std(scores):.3f} "
            f"over {len(scores)} matches"
        )
    replays = [p for *_, p in rows if p is not None]
    if replays:
        print(f"\nreplays ({len(replays)}):")
        for p in replays:
            print(f"  {p}")
    if videos:
        print(f"videos ({len(videos)}):")
        for p in videos:
            print(f"  {p}  ({p.stat().st_size / 1e3:.0f} kB)")
