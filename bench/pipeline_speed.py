"""Pipeline throughput: env-only, sampler-only and full training, serial vs local, one run.

    python bench/pipeline_speed.py [--config configs/quadrant.yaml] [--seconds 60] [key=value ...]

All modes use the same config (preset, actors, worlds per actor, network):
- env-only: `n_actors` spawned processes, each stepping its `envs_per_actor` worlds with
  random actions and nothing else: the upper bound of what the actors could deliver.
- sampler-only: actors + policy workers through the real sockets; the trainer discards chunks.
- full training: the whole pipeline, with the `serial` launcher (one process) and `local`
  (one process per worker).
Throughput counts env frames (environment steps summed over worlds) per second, measured from
metrics records after a warm-up, so process start-up is not counted. Prints a table, the
ratios the targets are about (sampler / env-only >= 0.6, local / serial >= 1.3) and a last
line `PIPELINE_SPEED {json}` for scripts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hns_train.config import load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402
from hns_train.envs.vector import VectorGame  # noqa: E402


def env_only_worker(game_cfg, worlds: int, threads: int, seconds: float, seed: int, out) -> None:
    game = VectorGame(game_cfg, worlds, seed=seed, threads=threads)
    game.reset()
    rng = np.random.default_rng(seed)
    shape = (worlds, game.n_agents, 5)
    for _ in range(20):  # warm-up
        game.step(rng.integers(0, game.action_nvec, size=shape))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        game.step(rng.integers(0, game.action_nvec, size=shape))
        steps += 1
    out.put(steps * worlds / (time.perf_counter() - start))


def env_only(cfg, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = cfg.pipeline
    procs = [
        ctx.Process(
            target=env_only_worker,
            args=(cfg.game_config(), p.envs_per_actor, p.physics_threads, seconds, i, queue),
        )
        for i in range(p.n_actors)
    ]
    for proc in procs:
        proc.start()
    rates = [queue.get(timeout=seconds + 300) for _ in procs]
    for proc in procs:
        proc.join()
    return float(sum(rates))


def pipeline_fps(cfg, seconds: float, warmup: float) -> tuple[float, int]:
    """Frames per second from `warmup` seconds after the first frames arrived to the end."""
    summary = Controller(cfg).run()
    lines = (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()
    train = [json.loads(x) for x in lines if '"kind": "train"' in x]
    started = [r for r in train if r["frames"] > 0]
    if not started:
        raise RuntimeError("no frames were produced: workers did not start in time")
    start = started[0]["time"] + warmup
    window = [r for r in train if r["time"] >= start]
    if len(window) < 2:
        raise RuntimeError(f"run too short to measure: {len(window)} records after warm-up")
    fps = (window[-1]["frames"] - window[0]["frames"]) / (window[-1]["time"] - window[0]["time"])
    return float(fps), summary.version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quadrant.yaml"))
    parser.add_argument("--seconds", type=float, default=60.0, help="measured time per mode")
    parser.add_argument("--warmup", type=float, default=20.0, help="after the first frames")
    parser.add_argument("--startup", type=float, default=30.0, help="allowance to start workers")
    parser.add_argument("--modes", default="env,sampler,serial,local")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    runs = tempfile.mkdtemp(prefix="hns-bench-")
    minutes = (args.startup + args.warmup + args.seconds) / 60
    common = [
        f"runs_dir={runs}",
        f"stop.minutes={minutes}",
        "logging.every_s=2.0",
        "logging.wandb=disabled",
        "logging.progress=false",
        "eval.n_workers=0",
        *args.overrides,
    ]
    cfg = load_config(args.config, common)
    p = cfg.pipeline
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(
        f"config: {args.config} preset={cfg.game_config().preset} actors={p.n_actors} "
        f"worlds/actor={p.envs_per_actor} ring={p.ring_size} policy workers={p.n_policy_workers} "
        f"batch={p.batch_chunks} chunks x {p.chunk_len} steps, device={p.device}"
    )
    modes = args.modes.split(",")
    results: dict[str, float] = {}
    versions: dict[str, int] = {}
    if "env" in modes:
        results["env_only"] = env_only(cfg, args.seconds)
    if "sampler" in modes:
        sampler = load_config(
            args.config, [*common, "name=sampler", "pipeline.discard_samples=true"]
        )
        results["sampler_only"], _ = pipeline_fps(sampler, args.seconds, args.warmup)
    for launcher in ("serial", "local"):
        if launcher in modes:
            run = load_config(
                args.config, [*common, f"name={launcher}", f"pipeline.launcher={launcher}"]
            )
            results[f"train_{launcher}"], versions[launcher] = pipeline_fps(
                run, args.seconds, args.warmup
            )
    print(f"\n{'mode':<16}{'frames/s':>12}")
    for mode, fps in results.items():
        print(f"{mode:<16}{fps:>12,.0f}")
    ratios = {}
    if "env_only" in results and "sampler_only" in results:
        ratios["sampler_over_env"] = results["sampler_only"] / results["env_only"]
        print(f"sampler-only / env-only = {ratios['sampler_over_env']:.2f} (target >= 0.6)")
    if "train_serial" in results and "train_local" in results:
        ratios["local_over_serial"] = results["train_local"] / results["train_serial"]
        print(f"local / serial training = {ratios['local_over_serial']:.2f} (target >= 1.3)")
    print(f"optimisation steps in the measured runs: {versions}")
    print("PIPELINE_SPEED " + json.dumps({**results, **ratios, "versions": versions}))


if __name__ == "__main__":
    main()
