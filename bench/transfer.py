"""Transfer: each task fine-tuned from a checkpoint against trained from scratch, on paired seeds.

For every task (configs/transfer/<task>.yaml) and seed, one run from scratch and one from each
given checkpoint (`--init`: a hide-and-seek run; `--init-count`: a count-based pretraining run),
with the same config, seed and frame budget, through the ordinary pipeline (`Controller`). Each
final checkpoint then plays `--episodes` fresh episodes (the same world seeds for every arm) and
is scored by the task's metric (`task_score`: success, accuracy for object counting); the
untrained network of the scratch run is scored the same way. Reported per task: the training
curves (episode/task_score and the return against frames, PNG), each arm's final score and
return, the difference of scratch from its untrained network (does the task learn at this
budget?) and of each pretrained arm from scratch: the mean over seeds of the per-seed
differences and its standard error (with one seed: over the paired evaluation episodes).

Object counting is scored as the paper scores it, by a probe of the frozen network
(`hns_train/eval/counting_probe.py`), not by fine-tuning: a linear head on the LSTM's hidden
state, trained on `--probe-episodes` episodes, says how many boxes went left. Its score is the
head's accuracy at the last step, its "return" column the accuracy over all the steps after the
boxes are hidden; the scratch arm is the frozen random network (the paper's baseline) and
"untrained" the most frequent count of the training episodes.

    python bench/transfer.py --init RUN_OR_CKPT [--init-count RUN_OR_CKPT] [--tasks T ...]
        [--frames 20000] [--minutes 0] [--seeds 0 1] [--episodes 64] [--out DIR]
        [section.key=value ...]

Last line: `TRANSFER {json}` with a key per task.
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
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hns_train.agents.checkpoint import CheckpointDir  # noqa: E402
from hns_train.agents.transfer import resolve_init  # noqa: E402
from hns_train.config import CONFIG_DIR, load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402
from hns_train.eval.counting_probe import counting_probe  # noqa: E402
from hns_train.eval.crossplay import paired_difference  # noqa: E402
from hns_train.eval.phases import read_metrics  # noqa: E402
from hns_train.eval.policies import load_policy_file, policy_controller  # noqa: E402
from hns_train.eval.transfer import TaskEval, evaluate_task  # noqa: E402

TASKS = ("lock_and_return", "sequential_lock", "blueprint", "shelter", "object_counting")
SCRATCH = "scratch"


def curve(run_dir: Path, agent_is_hider: bool) -> list[dict]:
    """Training records: frames, task score and the agent's return (means over episodes)."""
    train, _ = read_metrics(run_dir / "metrics.jsonl")
    key = "episode/hider_return" if agent_is_hider else "episode/seeker_return"
    return [
        {"frames": r["frames"], "score": r["episode/task_score"], "return": r[key]}
        for r in train
        if np.isfinite(r.get("episode/task_score", np.nan))
    ]


def train_and_score(task, arm, init, seed, args, runs_dir) -> dict:
    cfg = load_config(
        CONFIG_DIR / "transfer" / f"{task}.yaml",
        [
            f"runs_dir={runs_dir}",
            f"name={task}_{arm}_s{seed}",
            f"seed={seed}",
            f"stop.frames={args.frames}",
            f"stop.minutes={args.minutes}",
            "logging.wandb=disabled",
            f"logging.progress={str(not args.quiet).lower()}",
            f"agent.init={init}",
            *args.overrides,
        ],
    )
    cfg = resolve_init(cfg)
    summary = Controller(cfg).run()
    run_dir = Path(summary.run_dir)
    latest = CheckpointDir(run_dir / "checkpoints").latest()
    if latest is None:
        raise RuntimeError(f"{run_dir} wrote no checkpoint")
    game = cfg.game_config()
    eval_seed = 50_000 + 1_000 * seed

    def score(path):
        policy = policy_controller(load_policy_file(path), game, arm, deterministic=False)
        return evaluate_task(game, policy, args.episodes, eval_seed)

    out = {
        "run": str(run_dir),
        "frames": summary.frames,
        "seconds": round(summary.hours * 3600, 1),
        "curve": curve(run_dir, game.max_hiders > 0),
        "final": score(latest.path),
    }
    if arm == SCRATCH:
        out["untrained"] = score(run_dir / "pool" / "snapshot_0000000000.pt")
    return out


def probe_and_score(arms: dict, seed: int, args) -> dict:
    """Object counting: every arm's frozen network probed on the same episodes (module
    docstring), as `train_and_score`'s records."""
    started = time.time()
    cfg = load_config(CONFIG_DIR / "transfer" / "object_counting.yaml", args.overrides)
    game, eval_seed = cfg.game_config(), 50_000 + 1_000 * seed
    results, prior = counting_probe(
        game, cfg.agent.network, arms, args.probe_episodes, args.episodes, eval_seed
    )
    out = {}
    for arm, result in results.items():
        out[arm] = {
            "run": "",
            "frames": args.probe_episodes * game.horizon,  # watched, not trained on
            "seconds": round(time.time() - started, 1),
            "curve": [],
            "final": TaskEval(scores=result.last_right, returns=result.accuracy),
            "by_step": [round(float(a), 4) for a in result.by_step],
        }
    out[SCRATCH]["untrained"] = TaskEval(scores=prior.last_right, returns=prior.accuracy)
    return out


def compare(runs: dict, arm: str, base: str = SCRATCH) -> dict:
    """Paired differences arm - base of the score and the return, over seeds (over the paired
    evaluation episodes with one seed). `base` "untrained": the scratch runs' untrained
    networks, `arm` SCRATCH then reads their final ones."""
    seeds = sorted(runs[SCRATCH])
    out = {"over": "seeds" if len(seeds) > 1 else "episodes"}

    def evals(name):
        return [
            runs[SCRATCH][s]["untrained"] if name == "untrained" else runs[name][s]["final"]
            for s in seeds
        ]

    for name, field in (("score", "scores"), ("return", "returns")):
        a, b = ([getattr(e, field) for e in evals(n)] for n in (arm, base))
        if len(seeds) > 1:
            pick = [[x.mean() for x in a], [x.mean() for x in b]]
        else:
            pick = [list(a[0]), list(b[0])]
        mean, se = paired_difference(*pick)
        out[name] = {"diff": round(mean, 4), "se": round(se, 4)}
    return out


def _record(run: dict) -> dict:
    """A run's curve and its evaluations' per-episode scores and returns, for the JSON file."""
    out = {"curve": run["curve"]}
    if "by_step" in run:
        out["by_step"] = run["by_step"]
    for name in ("final", "untrained"):
        if name in run:
            out[name] = {"scores": run[name].scores.tolist(), "returns": run[name].returns.tolist()}
    return out


def plot(results: dict, path: Path) -> None:
    """Training curves: task score (top) and the agent's return (bottom), a column per task;
    for the counting probe, its accuracy at each step after the boxes vanished (top)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    rows = 1 if set(results) == {"object_counting"} else 2  # the probe has no return row
    fig, axes = plt.subplots(rows, n, figsize=(4 * n, 3 * rows), squeeze=False)
    for col, (task, runs) in enumerate(results.items()):
        if task == "object_counting":
            ax = axes[0, col]
            for k, (arm, by_seed) in enumerate(runs.items()):
                for i, run in enumerate(by_seed.values()):
                    steps = range(1, len(run["by_step"]) + 1)
                    label = arm if i == 0 else None
                    ax.plot(steps, run["by_step"], "o-", color=f"C{k}", alpha=0.7, label=label)
            ax.set_title(f"{task}: probe accuracy")
            ax.set_xlabel("steps since the boxes vanished")
            ax.legend(fontsize=8)
            if rows == 2:
                axes[1, col].axis("off")
            continue
        for row, metric in enumerate(("score", "return")):
            ax = axes[row, col]
            for k, (arm, by_seed) in enumerate(runs.items()):
                for i, run in enumerate(by_seed.values()):
                    xs = [p["frames"] for p in run["curve"]]
                    ys = [p[metric] for p in run["curve"]]
                    ax.plot(xs, ys, color=f"C{k}", alpha=0.8, label=arm if i == 0 else None)
            ax.set_title(f"{task}: {'task score' if metric == 'score' else 'return'}")
            ax.set_xlabel("env frames")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init", default="", help="hide-and-seek checkpoint or run directory")
    parser.add_argument("--init-count", default="", help="count-based pretraining checkpoint")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--minutes", type=float, default=0.0, help="per run (0: no limit)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--episodes", type=int, default=64, help="evaluation episodes per run")
    parser.add_argument(
        "--probe-episodes", type=int, default=1024, help="object counting: the head's training set"
    )
    parser.add_argument("--out", default="", help="runs and figures here (default: a temp dir)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("overrides", nargs="*", help="section.key=value for every run")
    args = parser.parse_args(argv)
    if args.frames <= 0 and args.minutes <= 0:
        parser.error("give --frames or --minutes: a run needs a budget")

    # scoring acts on 16 worlds at a time: extra intra-op threads only spin against the runs
    torch.set_num_threads(1)
    out = Path(args.out or tempfile.mkdtemp(prefix="hns-transfer-"))
    out.mkdir(parents=True, exist_ok=True)
    arms = {SCRATCH: ""}
    if args.init:
        arms["hide_and_seek"] = args.init
    if args.init_count:
        arms["count_based"] = args.init_count
    load_start, started = os.getloadavg()[0], time.time()
    results: dict = {}
    for task in args.tasks:
        results[task] = {arm: {} for arm in arms}
        for seed in args.seeds:
            if task == "object_counting":
                for arm, run in probe_and_score(arms, seed, args).items():
                    results[task][arm][seed] = run
                continue
            for arm, init in arms.items():
                results[task][arm][seed] = train_and_score(task, arm, init, seed, args, out)

    summary: dict = {}
    print(
        f"\n{'task':<16} {'arm':<14} {'final score':>12} {'return':>9} "
        f"{'score, return vs untrained / scratch':>36}"
    )
    for task, runs in results.items():
        entry: dict = {}
        seeds = sorted(runs[SCRATCH])
        untrained = runs[SCRATCH][seeds[0]]["untrained"]
        print(
            f"{task:<16} {'untrained':<14} {untrained.score:>12.3f} {untrained.mean_return:>9.2f}"
        )
        entry["untrained"] = untrained.to_dict()
        for arm, by_seed in runs.items():
            finals = [by_seed[s]["final"] for s in seeds]
            row = {
                "score": round(float(np.mean([f.score for f in finals])), 4),
                "return": round(float(np.mean([f.mean_return for f in finals])), 3),
                "per_seed": [f.to_dict() for f in finals],
                "frames": [by_seed[s]["frames"] for s in seeds],
            }
            if "by_step" in by_seed[seeds[0]]:  # the counting probe: accuracy per hidden step
                row["by_step"] = [by_seed[s]["by_step"] for s in seeds]
            if arm == SCRATCH:
                row["vs_untrained"] = d = compare(runs, SCRATCH, base="untrained")
            else:
                row["vs_scratch"] = d = compare(runs, arm)
            versus = (
                f"{d['score']['diff']:+.3f}±{d['score']['se']:.3f} "
                f"{d['return']['diff']:+.2f}±{d['return']['se']:.2f}"
            )
            print(f"{'':<16} {arm:<14} {row['score']:>12.3f} {row['return']:>9.2f} {versus:>36}")
            entry[arm] = row
        summary[task] = entry
    plot(results, out / "transfer.png")
    (out / "transfer.json").write_text(
        json.dumps(
            {
                task: {arm: {str(s): _record(r) for s, r in by.items()} for arm, by in runs.items()}
                for task, runs in results.items()
            }
        )
    )
    summary["_run"] = {
        "frames": args.frames,
        "seeds": args.seeds,
        "episodes": args.episodes,
        "probe_episodes": args.probe_episodes,
        "init": args.init,
        "init_count": args.init_count,
        "minutes": round((time.time() - started) / 60, 1),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": f"{os.cpu_count()} cores ({platform.machine()})",
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "out": str(out),
    }
    print(f"curves: {out / 'transfer.png'}")
    print("TRANSFER " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
