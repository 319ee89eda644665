"""`python -m hns_train.eval record OUT`: one episode of scripted or random play to a replay
file (how the example replays in replays/ are made)."""

from __future__ import annotations

from hns_train.envs.config import make_config
from hns_train.eval.recorder import (
    episode_steps,
    object_seeking_actions,
    random_actions,
    record_episode,
)
from hns_train.eval.replay import save

ACTION_SOURCES = {"objects": object_seeking_actions, "random": random_actions}


def record_main(argv: list[str] | None = None) -> int:
    """`python -m hns_train.eval record OUT`: one episode from a scripted action source."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hns_train.eval record",
        description="Record one episode of scripted or random play to a replay file.",
    )
    parser.add_argument("out", help="replay path to write (.npz)")
    parser.add_argument("--preset", default="quadrant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--actions",
        choices=sorted(ACTION_SOURCES),
        default="objects",
        help="objects: walk to boxes/ramps, grab and lock; random: uniform actions",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="at most the preset's horizon (the default)"
    )
    args = parser.parse_args(argv)
    if args.seed < 0:  # numpy's own refusal names no option
        raise ValueError("--seed must be >= 0")
    cfg = make_config(args.preset)
    steps = episode_steps(cfg, args.steps, "--steps")  # refused before anything is simulated
    act = ACTION_SOURCES[args.actions](cfg, args.seed)
    meta = {team: {"name": f"{args.actions} actions"} for team in ("hiders", "seekers")}
    replay = record_episode(cfg, act, seed=args.seed, metadata=meta, n_steps=steps)
    path = save(replay, args.out)
    print(f"{path} ({replay.n_steps} steps, {path.stat().st_size / 1e3:.0f} kB)")
    return 0
