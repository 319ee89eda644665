"""Matches between named policies, recorded as replays: the shared core of evaluation rounds and
`python -m hns_train.eval play`.

Policies are given as a file or a name:
- a trainer checkpoint (`runs/NAME/checkpoints/ckpt_*.pt`: weights under `state["ppo"]["model"]`,
  the run's resolved config in its metadata) or a pool snapshot (`runs/NAME/pool/snapshot_*.pt`:
  weights under `state["model"]`; the config comes from the run's `config.yaml`);
- a fixed controller name: `random`, `noop` (`agents/opponents.py`) or `scripted_seeker`
  (`matches.ScriptedSeeker`, seekers only).

`MatchRecording` is the `play_matches` step hook that records some worlds of a round with
`ReplayRecorder` and saves them with team names and versions in the replay metadata (which
videos print over the picture). Evaluation workers (`hns_train.distributed.evaluator`) and the
`play` command share it.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hns_train.agents.pool import policy_key
from hns_train.eval.matches import FixedController, MatchResult, ScriptedSeeker, play_matches

PROG = "python -m hns_train.eval play"
NAMED = ("random", "noop", "scripted_seeker")
SEEKER_ONLY = ("scripted_seeker",)
DEFAULT_PRESET = "quadrant"  # when neither side is a checkpoint


# ----------------------------------------------------------------------------- policies


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
    from hns_train.agents.checkpoint import CheckpointError, load_checkpoint
    from hns_train.config import ConfigError, config_from_dict, load_config

    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"policy {str(path)!r}: no such file; give a checkpoint (.pt) or one of {NAMED}"
        )
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as e:
        raise ValueError(str(e)) from None
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
    return PolicyFile(path, dict(weights), config, None if version is None else int(version), kind)


def policy_controller(
    source: PolicyFile, game_cfg, policy_id: str, deterministic: bool = True
) -> Any:
    """A `PolicyController` for `source` on the observations of `game_cfg`."""
    from hns_train.envs.observations import observation_shapes
    from hns_train.eval.matches import PolicyController

    try:
        return PolicyController.from_state_dict(
            observation_shapes(game_cfg),
            source.state_dict,
            policy_id,
            source.config.agent.network,
            deterministic=deterministic,
        )
    except RuntimeError as e:  # load_state_dict: missing keys or size mismatches
        raise ValueError(
            f"{source.path} does not fit the {game_cfg.preset!r} game's observations or its "
            f"run's network config: {str(e).splitlines()[0]}"
        ) from None


def named_controller(name: str, role: str, seed: int = 0) -> Any:
    """The fixed controller `name` (one of NAMED) for a team playing `role`."""
    if name not in NAMED:
        raise ValueError(f"unknown controller {name!r}; allowed: {NAMED} or a checkpoint file")
    if name in SEEKER_ONLY and role != "seeker":
        raise ValueError(f"{name!r} can only play the seekers (it chases hiders)")
    if name == "scripted_seeker":
        return ScriptedSeeker()
    return FixedController(name, seed)


def team_metadata(name: str, version: int | None = None, **extra: Any) -> dict[str, Any]:
    """What a replay says about a team (videos print name and version over the picture)."""
    return {"name": name, "version": version, **extra}


def label(policy_id: str) -> str:
    """Short file-name label of a rating id: snapshot versions become `snapN`."""
    key = policy_key(policy_id)
    return f"snap{key}" if key.isdigit() else key


# ----------------------------------------------------------------------------- recording


class MatchRecording:
    """`play_matches` hook recording worlds `worlds` of one round of W matches.

    `seed` must be the seed given to `play_matches` (world w starts from `seed + w`); the hook
    records one round only, so use it with `n_matches <= W`."""

    def __init__(self, game, worlds: Sequence[int], seed: int | None, metadata: dict) -> None:
        from hns_train.eval.replay import ReplayRecorder

        self.seed = seed
        self.recorders = [ReplayRecorder(game, int(w), metadata) for w in worlds]
        self._rounds = 0

    def __call__(self, game, actions, rewards, infos) -> None:
        if actions is None:
            self._rounds += 1
            if self._rounds > 1:
                raise RuntimeError("MatchRecording records one round: play n_matches <= worlds")
            for rec in self.recorders:
                rec.record_reset(None if self.seed is None else self.seed + rec.world)
            return
        for rec in self.recorders:
            rec.record_step(rewards, actions, infos[rec.world])

    def save(self, paths: Sequence[Path], extra: Sequence[dict] | None = None) -> list[Path]:
        """Write the recorded worlds, in the order of `worlds`, to `paths` (.npz)."""
        if len(paths) != len(self.recorders):
            raise ValueError(f"{len(self.recorders)} recordings but {len(paths)} paths")
        extra = extra or [{}] * len(paths)
        return [rec.save(p, e) for rec, p, e in zip(self.recorders, paths, extra, strict=True)]


def render_replay(replay_path, out=None, width: int = 480, height: int = 480, progress=False):
    """Render a saved replay to mp4 (default: next to it) in this process; returns the path."""
    from hns_train.eval import replay as replay_mod
    from hns_train.eval import video

    out = Path(out) if out is not None else Path(replay_path).with_suffix(".mp4")
    options = video.VideoOptions(width=width, height=height)
    return video.write_video(replay_mod.load(replay_path), out, options, progress=progress)


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
            return named_controller(self.arg, role, seed)
        return policy_controller(self.source, game_cfg, self.letter, deterministic)

    def metadata(self) -> dict[str, Any]:
        if self.source is None:
            return team_metadata(self.arg)
        return team_metadata(self.display, self.source.version, file=str(self.source.path))


def _side(arg: str, letter: str) -> Side:
    from hns_train.eval.rundirs import resolve_checkpoint

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
    p.add_argument("--out", help="folder for replays and videos (default: the run's replays/)")
    p.add_argument("--record", type=int, default=None, help="matches recorded (default: all)")
    p.add_argument("--videos", type=int, default=None, help="replays rendered (default: all)")
    p.add_argument("--no-video", action="store_true", help="record replays, render nothing")
    p.add_argument("--width", type=int, default=480)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _out_dir(args, sides: list[Side]) -> Path:
    if args.out:
        return Path(args.out)
    for side in sides:
        if side.source is not None and side.source.path.parent.name in ("checkpoints", "pool"):
            return side.source.path.parent.parent / "replays"
    return Path("replays")


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
    for name in ("matches", "worlds", "record", "videos"):
        value = getattr(args, name)
        if value is not None and value < (1 if name in ("matches", "worlds") else 0):
            raise ValueError(f"--{name} must be >= {1 if name in ('matches', 'worlds') else 0}")
    if args.a in NAMED:
        raise ValueError(f"CHECKPOINT_A must be a checkpoint file, got {args.a!r}")
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before mujoco loads
    from hns_train.envs.game import HideAndSeekGame

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
            hook = MatchRecording(game, range(n_rec), seed, meta) if n_rec else None
            results = play_matches(game, hc, sc, n, seed, on_step=hook, progress=not args.quiet)
            paths: list[Path | None] = [None] * n
            if hook is not None:
                names = [
                    out_dir / f"play_{stamp}_{label(hc.policy_id)}_vs_{label(sc.policy_id)}_"
                    f"s{seed + w}.npz"
                    for w in range(n_rec)
                ]
                paths[:n_rec] = hook.save(names)
            rows += [
                (r, hider.display, seeker.display, p) for r, p in zip(results, paths, strict=True)
            ]

    videos: list[Path] = []
    if not args.no_video:
        todo = [p for *_, p in rows if p is not None]
        if args.videos is not None:
            todo = todo[: args.videos]
        for i, path in enumerate(todo, start=1):
            if not args.quiet:
                print(f"rendering {i}/{len(todo)}: {path.name}", file=sys.stderr)
            videos.append(render_replay(path, None, args.width, args.height, not args.quiet))
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
