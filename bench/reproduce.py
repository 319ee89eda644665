"""Reproduction on one machine: train self-play for M minutes, then measure what was learned.

Runs the real pipeline (`local` launcher: actor, policy, trainer and eval worker processes over
ZeroMQ) on a config for `--minutes`, or continues a run with `--resume RUN_DIR`; then, in the
same process tree and on fresh seeds, plays the run's final checkpoint against its untrained
policy (pool version 0) in the four pairings of `hns_train.eval.crossplay`:

- `seeker_gain`: in-sight share of trained seekers v untrained hiders minus untrained v untrained;
- `hider_gain`: hidden share of trained hiders v untrained seekers minus untrained v untrained;
- `box_move_prep`, `box_lock_prep` (and ramps): the paper's preparation-phase behaviour of
  trained v trained, per episode, next to the untrained level;
- the phases the run's detector confirmed during training, with their onsets;
- a replay of trained v trained saved as `RUN_DIR/replays/reproduce_final.npz`, and five of its
  frames side by side in `RUN_DIR/reproduce_final_strip.png`;
- `RUN_DIR/curves.png`: returns, hidden share, box moves and locks in preparation, rating.

    python bench/reproduce.py [--config configs/quadrant_cpu.yaml] [--minutes 30] [--frames F]
        [--resume RUN_DIR] [--runs-dir DIR] [--name NAME] [--eval-episodes 256]
        [--eval-only RUN_DIR] [section.key=value ...]

Prints a table, and a last line `REPRODUCE {json}` with minutes, frames, episodes,
seeker_gain, hider_gain, box_move_prep, box_lock_prep, phases (names reached) and more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hns_train.agents.checkpoint import CheckpointDir  # noqa: E402
from hns_train.agents.pool import PolicyPool  # noqa: E402
from hns_train.config import CONFIG_DIR, load_config  # noqa: E402
from hns_train.eval.crossplay import TRAINED, UNTRAINED, cross_play  # noqa: E402
from hns_train.eval.phases import read_metrics  # noqa: E402
from hns_train.eval.policies import load_policy_file, policy_controller  # noqa: E402
from hns_train.eval.recorder import MatchRecording, team_metadata  # noqa: E402

DEFAULT_CONFIG = CONFIG_DIR / "quadrant_cpu.yaml"
CURVE_KEYS = (  # (metrics key, panel title)
    ("episode/hider_return", "hider return"),
    ("episode/hidden_fraction", "hidden share (play steps)"),
    ("episode/max_box_move_prep", "box move in prep (m)"),
    ("episode/num_box_lock_prep", "box locks in prep"),
    ("episode/max_ramp_move_prep", "ramp move in prep (m)"),
    ("rating/latest_hider_mu", "latest rating (hider)"),
)


def train(args) -> tuple[Path, int]:
    """Run (or continue) the pipeline; returns the run directory and the frames it added."""
    from hns_train.distributed.controller import Controller

    settings = [
        f"stop.minutes={args.minutes}",
        f"stop.frames={args.frames}",
        f"logging.progress={str(not args.quiet).lower()}",
        *args.overrides,
    ]
    if args.resume:
        run_dir = Path(args.resume)
        where = [f"runs_dir={run_dir.parent}", f"name={run_dir.name}"]
        cfg = load_config(run_dir / "config.yaml", [*settings, *where])
    else:
        name = args.name or f"reproduce_{time.strftime('%Y%m%d_%H%M%S')}"
        where = [f"runs_dir={args.runs_dir}", f"name={name}", "pipeline.launcher=local"]
        cfg = load_config(args.config, [*where, *settings])
    summary = Controller(cfg, resume=bool(args.resume)).run()
    print("\n".join(summary.lines()))
    return Path(summary.run_dir), summary.new_frames


def policies(run_dir: Path, game_cfg):
    checkpoint = CheckpointDir(run_dir / "checkpoints").latest()
    if checkpoint is None:
        raise SystemExit(f"error: {run_dir} holds no checkpoint to evaluate")
    with PolicyPool(run_dir / "pool") as pool:
        if 0 not in pool.versions():
            raise SystemExit(f"error: {run_dir}/pool has no version 0 (the untrained policy)")
        untrained_path = pool.path_for(0)
    trained = load_policy_file(checkpoint.path)
    untrained = load_policy_file(untrained_path)
    return {
        TRAINED: lambda: policy_controller(trained, game_cfg, TRAINED, deterministic=False),
        UNTRAINED: lambda: policy_controller(untrained, game_cfg, UNTRAINED, deterministic=False),
    }, trained.version


def save_replay(run_dir: Path, game_cfg, make, version: int | None, seed: int) -> Path:
    """One recorded episode of trained v trained (world 0 of one round)."""
    from hns_train.envs.game import HideAndSeekGame
    from hns_train.eval.matches import play_matches

    game = HideAndSeekGame(game_cfg, n_worlds=1)
    meta = {
        "hiders": team_metadata(TRAINED, version),
        "seekers": team_metadata(TRAINED, version),
        "source": "bench/reproduce.py",
    }
    hook = MatchRecording(game, [0], seed, meta)
    play_matches(game, make[TRAINED](), make[TRAINED](), n_matches=1, seed=seed, on_step=hook)
    return hook.save([run_dir / "replays" / "reproduce_final.npz"])[0]


def save_strip(replay_path: Path, out: Path, size: int = 240) -> Path:
    """Five frames of a replay side by side (start, mid-preparation, end of preparation,
    mid-play, end): a small PNG to look at without a video player."""
    import imageio.v3 as iio
    import numpy as np

    from hns_train.eval.replay import load
    from hns_train.eval.video import ReplayVideo, VideoOptions

    replay = load(replay_path)
    last = replay.n_steps
    prep = replay.cfg.prep_steps
    moments = sorted({0, prep // 2, prep, (prep + last) // 2, last})
    with ReplayVideo(replay, VideoOptions(width=size, height=size)) as video:
        frames = [video.frame(t) for t in moments]
    gap = np.full((frames[0].shape[0], 4, 3), 255, np.uint8)
    row = np.concatenate([x for f in frames for x in (f, gap)][:-1], axis=1)
    iio.imwrite(out, row, extension=".png")
    return out


def plot_curves(run_dir: Path, records: list[dict], onsets) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(k, t) for k, t in CURVE_KEYS if any(k in r for r in records)]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 1.9 * len(panels)), sharex=True)
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (key, title) in zip(axes, panels, strict=True):
        points = [(r["episodes"], r[key]) for r in records if key in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.2)
        ax.set_ylabel(title, fontsize=8)
        ax.grid(alpha=0.3)
        for onset in onsets:
            ax.axvline(onset.episodes, color="tab:red", lw=0.8, ls="--")
    axes[-1].set_xlabel("episodes")
    axes[0].set_title(f"{run_dir.name}: training curves (dashed: phase onsets)", fontsize=9)
    fig.tight_layout()
    out = run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def evaluate(run_dir: Path, episodes: int, worlds: int, seed: int, quiet: bool) -> dict:
    import torch

    torch.set_num_threads(1)  # small batches: extra intra-op threads only contend on few cores
    cfg = load_config(run_dir / "config.yaml")
    game_cfg = cfg.game_config()
    make, version = policies(run_dir, game_cfg)
    start = time.perf_counter()
    result = cross_play(game_cfg, make, episodes, worlds, seed, progress=not quiet)
    eval_s = time.perf_counter() - start
    replay = save_replay(run_dir, game_cfg, make, version, seed)
    try:
        strip = save_strip(replay, run_dir / "reproduce_final_strip.png")
    except Exception as err:  # no GL (EGL missing on a compute node): the figures stand without
        strip = f"none ({type(err).__name__}: {str(err)[:200]}; set MUJOCO_GL=osmesa or egl)"

    records, onsets = read_metrics(run_dir / "metrics.jsonl")
    last = records[-1] if records else {}
    curves = plot_curves(run_dir, records, onsets)
    gains = result.gains()

    print()
    print("\n".join(result.table()))
    print(
        f"\nseeker_gain {gains['seeker_gain']:+.3f} ± {gains['seeker_gain_se']:.3f}   "
        f"hider_gain {gains['hider_gain']:+.3f} ± {gains['hider_gain_se']:.3f}   "
        f"(paired over {episodes} episodes; ± one standard error)"
    )
    print(
        f"trained v trained in preparation: box move {gains['box_move_prep']:.2f} m "
        f"(untrained {gains['box_move_prep_untrained']:.2f}), box locks "
        f"{gains['box_lock_prep']:.2f} (untrained {gains['box_lock_prep_untrained']:.2f})"
    )
    for onset in onsets:
        print(
            f"phase {onset.phase}: {onset.episodes:,} episodes, {onset.frames:,} frames, "
            f"{onset.hours:.2f} h, version {onset.version}"
        )
    if not onsets:
        print("no phase confirmed during training")
    print(f"replay: {replay}   frames: {strip}" + (f"   curves: {curves}" if curves else ""))
    return {
        "minutes": round(float(last.get("hours", 0.0)) * 60, 1),
        "frames": int(last.get("frames", 0)),
        "episodes": int(last.get("episodes", 0)),
        "version": version,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in gains.items()},
        "phases": [o.phase for o in onsets],
        "onsets": [o.to_record() for o in onsets],
        "pairings": {f"{h}_v_{s}": r.summary() for (h, s), r in result.pairings.items()},
        "eval_episodes": episodes,
        "eval_seconds": round(eval_s, 1),
        "run_dir": str(run_dir),
        "replay": str(replay),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--minutes", type=float, default=30.0, help="training wall-clock budget")
    parser.add_argument("--frames", type=int, default=0, help="frame budget (0: none)")
    parser.add_argument("--resume", default="", help="continue this run directory")
    parser.add_argument("--eval-only", default="", help="evaluate this run, no training")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--name", default="")
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--eval-worlds", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1_000_003, help="evaluation seeds start here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("overrides", nargs="*", help="section.key=value for the config")
    args = parser.parse_args(argv)

    load_start = os.getloadavg()[0]
    wall_start = time.perf_counter()
    run_dir, new_frames = (Path(args.eval_only), 0) if args.eval_only else train(args)
    # CPU seconds of the training process tree (the workers are joined children by now): a
    # figure of a config's cost that holds on a busy machine, unlike frames per second.
    cpu = sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )
    wall = time.perf_counter() - wall_start
    result = evaluate(run_dir, args.eval_episodes, args.eval_worlds, args.seed, args.quiet)
    result.update(
        {
            "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "machine": f"{os.cpu_count()} cores ({platform.machine()})",
            "train_cpu_s": None if args.eval_only else round(cpu, 1),
            "train_wall_s": None if args.eval_only else round(wall, 1),
            "cpu_ms_per_frame": (
                None
                if args.eval_only or not new_frames
                else round(1e3 * cpu / new_frames, 3)  # a resumed run: this part's frames only
            ),
            "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        }
    )
    print("REPRODUCE " + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
