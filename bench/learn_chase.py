"""Learning proof: the pipeline trains a seeker to keep a randomly moving hider in sight.

`configs/chase.yaml`: 1 hider v 1 seeker in the empty 6 m arena with outer walls, horizon 40,
no preparation phase. The hider acts uniformly at random in every episode (pool draw with
`p_latest 0, p_random 1, opponent_role hider`); the seeker is the learning policy, the paper's
entity-attention + LSTM network trained with PPO by the real pipeline (actor, policy and
trainer workers over ZeroMQ) under the `local` launcher (one process per worker) or `serial`.

In an empty arena the line of sight is always clear, so "in sight" means "inside the 135-degree
vision cone": a seeker turning at random keeps the hider in sight about 135/360 ≈ 0.37 of the
time. Metric: in_sight = 1 - hidden_fraction (the share of steps in which the seeker sees the
hider), from the run's episode statistics against env frames and wall-clock (controller start,
process start-up included), then on a fresh evaluation of the final checkpoint (new seeds,
sampled actions) next to the random seeker measured the same way.

    python bench/learn_chase.py [--launcher local|serial] [--minutes 10] [--frames 0]
                                [--seed 0] [section.key=value ...]

Prints a table of the curve, when 0.8 was first reached (mean of 3 consecutive records), the
evaluation, and a last line `SUMMARY {json}` for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hns_train.agents.checkpoint import CheckpointDir  # noqa: E402
from hns_train.config import CONFIG_DIR, load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402
from hns_train.envs.game import HideAndSeekGame  # noqa: E402
from hns_train.eval.matches import FixedController, play_matches  # noqa: E402
from hns_train.eval.phases import read_metrics  # noqa: E402
from hns_train.eval.policies import load_policy_file, policy_controller  # noqa: E402

TARGET = 0.8
SMOOTH = 3  # records averaged when deciding that the target was reached


def in_sight_fraction(results) -> float:
    return float(np.mean([1.0 - r.hidden_fraction for r in results]))


def evaluate(game_cfg, seeker, episodes: int, seed: int, worlds: int = 16) -> float:
    """Mean in-sight fraction of `seeker` against a random hider over `episodes` episodes."""
    game = HideAndSeekGame(game_cfg, n_worlds=worlds)
    hider = FixedController("random", seed=seed + 1)
    return in_sight_fraction(play_matches(game, hider, seeker, n_matches=episodes, seed=seed))


def learning_curve(run_dir: Path) -> list[dict]:
    train, _ = read_metrics(run_dir / "metrics.jsonl")
    return [
        {
            "frames": r["frames"],
            "seconds": r["hours"] * 3600,
            "version": r["version"],
            "in_sight": 1.0 - r["episode/hidden_fraction"],
        }
        for r in train
        if "episode/hidden_fraction" in r
    ]


def first_reaching(curve: list[dict], target: float) -> dict | None:
    for i in range(SMOOTH - 1, len(curve)):
        window = curve[i - SMOOTH + 1 : i + 1]
        if np.mean([p["in_sight"] for p in window]) >= target:
            return curve[i]
    return None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=("local", "serial"), default="local")
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock budget")
    parser.add_argument("--frames", type=int, default=0, help="frame budget (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--runs-dir", default="", help="keep the run here (default: a temp dir)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("overrides", nargs="*", help="section.key=value for configs/chase.yaml")
    args = parser.parse_args(argv)

    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="hns-chase-")
    cfg = load_config(
        CONFIG_DIR / "chase.yaml",
        [
            f"runs_dir={runs_dir}",
            f"name=learn_chase_{int(time.time())}",
            f"seed={args.seed}",
            f"pipeline.launcher={args.launcher}",
            f"stop.minutes={args.minutes}",
            f"stop.frames={args.frames}",
            "logging.wandb=disabled",
            f"logging.progress={str(not args.quiet).lower()}",
            *args.overrides,
        ],
    )
    game_cfg = cfg.game_config()
    load_start = os.getloadavg()[0]
    random_seeker = FixedController("random", seed=args.seed + 7)
    baseline = evaluate(game_cfg, random_seeker, args.eval_episodes, seed=10_000 + args.seed)

    summary = Controller(cfg).run()
    run_dir = Path(summary.run_dir)
    curve = learning_curve(run_dir)
    reached = first_reaching(curve, TARGET)

    checkpoint = CheckpointDir(run_dir / "checkpoints").latest()
    if checkpoint is None:
        raise RuntimeError(f"the run wrote no checkpoint in {run_dir}")
    policy = load_policy_file(checkpoint.path)
    seeker = policy_controller(policy, game_cfg, "trained", deterministic=False)
    trained = evaluate(game_cfg, seeker, args.eval_episodes, seed=20_000 + args.seed)

    print(f"\n{'frames':>10} {'seconds':>8} {'version':>8} {'in sight':>9}")
    step = max(1, len(curve) // 15)
    for point in curve[::step] + curve[-1:]:
        print(
            f"{point['frames']:>10,} {point['seconds']:>8.0f} {point['version']:>8} "
            f"{point['in_sight']:>9.3f}"
        )
    if reached:
        print(
            f"\nin sight >= {TARGET} (mean of {SMOOTH} records) after {reached['frames']:,} "
            f"frames, {reached['seconds']:.0f} s, version {reached['version']}"
        )
    else:
        print(f"\nin sight never reached {TARGET} (mean of {SMOOTH} records)")
    print(
        f"evaluation over {args.eval_episodes} episodes on fresh seeds: trained seeker "
        f"{trained:.3f}, random seeker {baseline:.3f}"
    )
    print(
        f"run: {run_dir}, {summary.version} optimisation steps, {summary.frames:,} frames, "
        f"{summary.fps:,.0f} frames/s, launcher {args.launcher}, "
        f"{os.cpu_count()} cores ({platform.machine()}), load {load_start:.1f} -> "
        f"{os.getloadavg()[0]:.1f}"
    )
    result = {
        "launcher": args.launcher,
        "target": TARGET,
        "reached_frames": reached["frames"] if reached else None,
        "reached_seconds": round(reached["seconds"], 1) if reached else None,
        "eval_trained": round(trained, 4),
        "eval_random": round(baseline, 4),
        "frames": summary.frames,
        "versions": summary.version,
        "frames_per_s": round(summary.fps, 1),
        "curve": [
            {k: round(v, 3) if isinstance(v, float) else v for k, v in p.items()}
            for p in curve[::step]
        ],
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    print("SUMMARY " + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
