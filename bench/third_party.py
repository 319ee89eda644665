"""Other trainers on our env next to our own pipeline: the chase seeker, same frames.

Trainers, each learning the chase seeker (1 v 1, empty arena, horizon 40) against a uniformly
random hider for the same number of env steps:
- `torchrl_mappo`, `torchrl_ippo`: examples/torchrl_mappo.py (TorchRL's PettingZooWrapper,
  MultiAgentMLP, ClipPPOLoss, GAE, Collector); with one seeker the two differ only by name;
- `rllib_ppo`: examples/rllib_ppo.py (RLlib's multi-agent PPO, new API stack; skipped with a
  note when RLlib's dependencies are missing: `pip install -e '.[third_party]'`);
- `ours`: bench/learn_chase.py's pipeline (entity attention + LSTM, PPO, serial launcher).
The examples run in their own processes (one at a time); CPU seconds are the process's and its
children's (Ray's workers included once they have exited), wall seconds include start-up.

Every trained seeker is then evaluated the same way (`hns_train.eval.flat_policies.team_gain`,
or `crossplay`'s paired difference for ours): its in-sight share against a random hider on
fresh seeds, next to a random seeker on the same seeds, and the standard error of the paired
difference. `--quick` (chase only, 20,000 frames each, 256 evaluation episodes) fits in 15
minutes on 2 idle cores; the default is longer runs (80,000 frames) and the quadrant preset for
the examples too (seekers against random hiders; our pipeline trains chase only here).

    python bench/third_party.py --quick [--frames N] [--seed 0] [--only torchrl_ippo,ours]
                                [--presets chase,quadrant]

Prints one line per run and a last line `THIRD_PARTY {json}`: per trainer (and preset), the
seeker's in-sight share trained and random, the difference and its standard error, frames,
wall and CPU seconds, the date and the load average.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TRAINERS = ("torchrl_mappo", "torchrl_ippo", "rllib_ppo", "ours")
PRESETS = ("chase", "quadrant")  # ours trains chase only here


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_example(script: str, args: list[str]) -> dict:
    """Run an example in its own process and return its `RESULT` line."""
    cmd = [sys.executable, "-W", "ignore", str(EXAMPLES / script), *args]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def rllib_missing() -> str | None:
    try:
        import ray.rllib  # noqa: F401
    except ImportError as exc:
        return f"RLlib does not import ({exc}); pip install -e '.[third_party]'"
    return None


def run_ours(frames: int, seed: int, episodes: int) -> dict:
    """bench/learn_chase.py's pipeline for `frames`, then the same paired evaluation."""
    from hns_train.agents.checkpoint import CheckpointDir
    from hns_train.config import CONFIG_DIR, load_config
    from hns_train.eval.flat_policies import team_gain
    from hns_train.eval.policies import load_policy_file, policy_controller

    spec = importlib.util.spec_from_file_location("learn_chase", ROOT / "bench" / "learn_chase.py")
    learn_chase = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learn_chase)
    runs = tempfile.mkdtemp(prefix="hns-third-party-")
    start = time.perf_counter()
    summary = learn_chase.main(
        [
            "--launcher=serial",
            "--minutes=0",
            f"--frames={frames}",
            f"--seed={seed}",
            "--eval-episodes=2",  # its own evaluation is replaced by the paired one below
            f"--runs-dir={runs}",
            "--quiet",
        ]
    )
    seconds = time.perf_counter() - start
    (ckpts,) = Path(runs).glob("*/checkpoints")
    checkpoint = CheckpointDir(ckpts).latest()
    game_cfg = load_config(CONFIG_DIR / "chase.yaml").game_config()
    policy = load_policy_file(checkpoint.path)
    evaluation = team_gain(
        game_cfg,
        "seeker",
        lambda: policy_controller(policy, game_cfg, "ours", deterministic=False),
        episodes=episodes,
        seed=100_000 + seed,
    )
    return {
        "trainer": "ours",
        "frames": summary["frames"],
        "train_seconds": round(seconds, 1),
        "eval": evaluation,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="chase only, 20k frames each")
    parser.add_argument("--frames", type=int, default=0, help="frames per run (0: by mode)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--only", default="", help=f"comma-separated subset of {TRAINERS}")
    parser.add_argument("--presets", default="", help="comma-separated (default: by mode)")
    args = parser.parse_args(argv)
    frames = args.frames or (20_000 if args.quick else 80_000)
    presets = [p for p in args.presets.split(",") if p] or (
        ["chase"] if args.quick else ["chase", "quadrant"]
    )
    if not set(presets) <= set(PRESETS):
        parser.error(f"unknown presets {sorted(set(presets) - set(PRESETS))}; allowed: {PRESETS}")
    chosen = [t for t in args.only.split(",") if t] or list(TRAINERS)
    unknown = sorted(set(chosen) - set(TRAINERS))
    if unknown:
        parser.error(f"unknown trainers {unknown}; allowed: {', '.join(TRAINERS)}")

    load_start = os.getloadavg()
    results: dict[str, dict] = {}
    notes: dict[str, str] = {}
    for preset in presets:
        for trainer in chosen:
            key = trainer if preset == "chase" else f"{trainer}/{preset}"
            if trainer == "ours" and preset != "chase":
                continue
            if trainer == "rllib_ppo" and (missing := rllib_missing()):
                notes[key] = missing
                print(f"{key}: skipped: {missing}", flush=True)
                continue
            common = [
                f"--preset={preset}",
                f"--frames={frames}",
                f"--seed={args.seed}",
                f"--eval-episodes={args.eval_episodes}",
            ]
            cpu0, wall0 = cpu_seconds(), time.perf_counter()
            if trainer == "ours":
                out = run_ours(frames, args.seed, args.eval_episodes)
            elif trainer == "rllib_ppo":
                out = run_example("rllib_ppo.py", common)
            else:
                algo = trainer.split("_")[1]
                out = run_example("torchrl_mappo.py", [*common, f"--algo={algo}"])
            e = out["eval"]
            results[key] = {
                "trained": round(e["trained"], 4),
                "random": round(e["random"], 4),
                "diff": round(e["gain"], 4),
                "diff_se": round(e["gain_se"], 4),
                "episodes": e["episodes"],
                "frames": out["frames"],
                "train_seconds": out["train_seconds"],
                "wall_seconds": round(time.perf_counter() - wall0, 1),
                "cpu_seconds": round(cpu_seconds() - cpu0, 1),
                "load": round(os.getloadavg()[0], 2),
            }
            r = results[key]
            print(
                f"{key:>24}: in sight trained {r['trained']:.3f} random {r['random']:.3f} "
                f"diff {r['diff']:+.3f} ± {r['diff_se']:.3f}  {r['frames']:,} frames "
                f"{r['wall_seconds']:.0f} s wall {r['cpu_seconds']:.0f} s CPU  load {r['load']}",
                flush=True,
            )
    summary = {
        "results": results,
        "notes": notes,
        "frames": frames,
        "seed": args.seed,
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": f"{os.cpu_count()} cores ({platform.machine()})",
        "load": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
    }
    print("THIRD_PARTY " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
