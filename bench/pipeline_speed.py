"""Pipeline throughput: env-only, sampler-only and full training, serial vs local, one run.

    python bench/pipeline_speed.py [--config configs/quadrant.yaml] [--seconds 60] [key=value ...]

All modes use the same config (preset, actors, worlds per actor, network):
- env-only: `n_actors` spawned processes, each stepping its `envs_per_actor` worlds with
  random actions and nothing else: the upper bound of what the actors could deliver.
- sampler-only: actors + policy workers through the real sockets; the trainer discards chunks.
- full training: the whole pipeline, with the `serial` launcher (one process) and `local`
  (one process per worker).
Throughput counts env frames (environment steps summed over worlds) per second, measured from
metrics records after a warm-up, so process start-up is not counted.

Costs per unit of work, in CPU time (what decides throughput on a machine with more cores):
env-only CPU per frame (the actors' own processes), actor CPU per frame in sampler mode,
policy-worker CPU per agent row next to a bare `ActorCritic.act` at the policy worker's mean
batch (`bench/agents_speed.py`), trainer CPU per trained agent-step, and frames *trained* per
second. From those, a projection for a 16-core machine with one GPU (formula in
docs/benchmarks.md): the GPU runs the forward passes and PPO, the cores run the actors and the
policy worker's own work outside the forward pass.

Prints a table, the ratios the targets are about and a last line `PIPELINE_SPEED {json}` with
`actor_cpu_ratio`, `policy_cpu_ratio`, `trained_fps` and `projected_fps_16c_1gpu` among its keys.
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

from bench.agents_speed import act_cpu_us_per_row  # noqa: E402
from hns_train.agents.policy import ActorCritic  # noqa: E402
from hns_train.config import load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402
from hns_train.envs.contract import observation_shapes  # noqa: E402
from hns_train.envs.vector import VectorGame  # noqa: E402

PROJECTED_CORES = 16
# Cores of the projected machine that feed the GPU (its trainer and policy processes' Python).
PROJECTED_FEEDER_CORES = 2


def env_only_worker(game_cfg, worlds: int, threads: int, seconds: float, seed: int, out) -> None:
    game = VectorGame(game_cfg, worlds, seed=seed, threads=threads)
    game.reset()
    rng = np.random.default_rng(seed)
    shape = (worlds, game.n_agents, 5)
    for _ in range(20):  # warm-up
        game.step(rng.integers(0, game.action_nvec, size=shape))
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        game.step(rng.integers(0, game.action_nvec, size=shape))
        steps += 1
    frames = steps * worlds
    out.put((frames / (time.perf_counter() - start), 1e3 * (time.process_time() - cpu) / frames))


def env_only(cfg, seconds: float) -> tuple[float, float]:
    """Frames per second of all env-only processes, and their CPU milliseconds per frame."""
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
    results = [queue.get(timeout=seconds + 300) for _ in procs]
    for proc in procs:
        proc.join()
    rates, costs = zip(*results, strict=True)
    return float(sum(rates)), float(np.mean(costs))


def pipeline_run(cfg, warmup: float) -> dict[str, float]:
    """Run `cfg`; frames per second from `warmup` seconds after the first frames arrived to the
    end, and each cost metric (`WorkCosts`, distributed/reporting.py) over the same records,
    frame-weighted."""
    summary = Controller(cfg).run()
    return measured(Path(summary.run_dir), warmup, summary.version)


def measured(run_dir: Path, warmup: float, versions: int) -> dict[str, float]:
    """The figures of a finished run's metrics records (see `pipeline_run`)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    train = [json.loads(x) for x in lines if '"kind": "train"' in x]
    started = [r for r in train if r["frames"] > 0]
    if not started:
        raise RuntimeError("no frames were produced: workers did not start in time")
    start = started[0]["time"] + warmup
    window = [r for r in train if r["time"] >= start]
    if len(window) < 2:
        raise RuntimeError(f"run too short to measure: {len(window)} records after warm-up")
    out = {
        "fps": (window[-1]["frames"] - window[0]["frames"])
        / (window[-1]["time"] - window[0]["time"]),
        "versions": versions,
    }
    # Each record's figures are over its own window; weighting them by the window's frames
    # makes the per-frame ones exact ratios of sums (a plain mean over-weights the windows in
    # which an update ended but few frames arrived).
    # A trainer sends no heartbeat during an update (it is busy), so its CPU lands in the
    # window where the update ends: a window with CPU figures but none for a kind counts as 0
    # CPU per frame for that kind.
    for key in COST_KEYS:
        per_frame = key.endswith("_ms_per_frame")
        pairs = [
            (r.get(key, 0.0), r["frames"] - prev["frames"])
            for prev, r in zip(window, window[1:], strict=False)
            if key in r or (per_frame and "cpu/ms_per_frame" in r)
        ]
        weight = sum(w for _, w in pairs)
        if pairs and weight > 0:
            out[key] = float(sum(v * w for v, w in pairs) / weight)
    return out


COST_KEYS = (
    "cpu/actor_ms_per_frame",
    "cpu/policy_us_per_row",
    "cpu/policy_ms_per_frame",
    "cpu/trainer_us_per_sample",
    "cpu/trainer_ms_per_frame",
    "cpu/ms_per_frame",
    "throughput/trained_fps",
    "throughput/policy_rows_per_batch",
    "throughput/policy_rows_per_forward",
)


def bare_forward_us_per_row(cfg, batch: int) -> float:
    """CPU time per row of `ActorCritic.act` alone, with the policy worker's threads."""
    import torch

    torch.set_num_threads(cfg.pipeline.torch_threads)
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network).eval()
    return act_cpu_us_per_row(model, model.layout.shapes, max(1, round(batch)))


def projection(env_ms: float, sampler: dict, bare_us: float, agents: int) -> float:
    """Frames per second of a 16-core machine with one GPU, from CPU costs measured here.

    The GPU does the forward passes and PPO (assumed to keep up: not measured, no GPU here);
    the cores run the actors at their measured CPU per frame and the policy worker's work
    outside the forward pass (its CPU per row minus the bare forward's); two cores feed the GPU.
    """
    overhead_ms = agents * max(sampler["cpu/policy_us_per_row"] - bare_us, 0.0) / 1e3
    per_frame_ms = sampler.get("cpu/actor_ms_per_frame", env_ms) + overhead_ms
    return 1e3 * (PROJECTED_CORES - PROJECTED_FEEDER_CORES) / per_frame_ms


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
    fps: dict[str, float] = {}
    out: dict[str, object] = {"config": args.config}
    if "env" in modes:
        fps["env_only"], out["env_cpu_ms_per_frame"] = env_only(cfg, args.seconds)
    sampler: dict = {}
    if "sampler" in modes:
        sampler = pipeline_run(
            load_config(
                args.config,
                [
                    *common,
                    "name=sampler",
                    "pipeline.discard_samples=true",
                    "pipeline.launcher=local",
                ],
            ),
            args.warmup,
        )
        fps["sampler_only"] = sampler["fps"]
        out["sampler"] = sampler
    versions: dict[str, int] = {}
    runs: dict[str, dict] = {}
    for launcher in ("serial", "local"):
        if launcher in modes:
            run = load_config(
                args.config, [*common, f"name={launcher}", f"pipeline.launcher={launcher}"]
            )
            runs[launcher] = pipeline_run(run, args.warmup)
            fps[f"train_{launcher}"] = runs[launcher]["fps"]
            versions[launcher] = runs[launcher]["versions"]
    print(f"\n{'mode':<16}{'frames/s':>12}")
    for mode, value in fps.items():
        print(f"{mode:<16}{value:>12,.0f}")
    out.update(fps)
    if "env_only" in fps and "sampler_only" in fps:
        out["sampler_over_env"] = fps["sampler_only"] / fps["env_only"]
        print(f"sampler-only / env-only = {out['sampler_over_env']:.2f} (target >= 0.6)")
    if "train_serial" in fps and "train_local" in fps:
        out["local_over_serial"] = fps["train_local"] / fps["train_serial"]
        print(f"local / serial training = {out['local_over_serial']:.2f} (target >= 1.3)")
    print("\nCPU per unit of work")
    env_ms = out.get("env_cpu_ms_per_frame")
    if env_ms is not None:
        print(f"  env-only              {env_ms:8.3f} ms/frame")
    if "cpu/actor_ms_per_frame" in sampler and env_ms is not None:
        actor_ms = sampler["cpu/actor_ms_per_frame"]
        out["actor_cpu_ratio"] = actor_ms / env_ms
        print(
            f"  actor (sampler mode)  {actor_ms:8.3f} ms/frame = {out['actor_cpu_ratio']:.2f}x "
            "env-only (target <= 1.3)"
        )
    if "cpu/policy_us_per_row" in sampler:
        worker_us = sampler["cpu/policy_us_per_row"]
        batch = sampler.get("throughput/policy_rows_per_batch", 1.0)
        bare = bare_forward_us_per_row(cfg, batch)
        out["bare_forward_us_per_row"] = bare
        out["policy_cpu_ratio"] = worker_us / bare
        print(
            f"  policy worker         {worker_us:8.1f} us/row at {batch:.0f} rows/batch; "
            f"bare forward {bare:.1f} us/row = {out['policy_cpu_ratio']:.2f}x (target <= 1.2)"
        )
        # A batch takes one forward pass per controller (latest, each snapshot): smaller
        # passes cost more per row. The same comparison at the mean pass size separates that
        # from the worker's own work (messages, checks, splitting and joining rows).
        per_forward = sampler.get("throughput/policy_rows_per_forward")
        if per_forward:
            bare_pass = bare_forward_us_per_row(cfg, per_forward)
            out["bare_forward_us_per_row_at_pass"] = bare_pass
            out["policy_cpu_ratio_per_pass"] = worker_us / bare_pass
            print(
                f"  {'':22}at the mean pass of {per_forward:.0f} rows the bare forward is "
                f"{bare_pass:.1f} us/row = {out['policy_cpu_ratio_per_pass']:.2f}x"
            )
        if env_ms is not None:
            agents = cfg.game_config().max_agents
            out["projected_fps_16c_1gpu"] = projection(
                env_ms, sampler, out.get("bare_forward_us_per_row_at_pass", bare), agents
            )
            print(
                f"  projected, {PROJECTED_CORES} cores + 1 GPU: "
                f"{out['projected_fps_16c_1gpu']:,.0f} frames/s (docs/benchmarks.md)"
            )
    local = runs.get("local", {})
    if "cpu/trainer_us_per_sample" in local:
        print(f"  trainer               {local['cpu/trainer_us_per_sample']:8.1f} us/agent-step")
    if "throughput/trained_fps" in local:
        out["trained_fps"] = local["throughput/trained_fps"]
        out["local"] = local
        print(f"  trained frames/s      {out['trained_fps']:8.0f} (local; target >= 2000)")
    out["versions"] = versions
    print("PIPELINE_SPEED " + json.dumps(out))


if __name__ == "__main__":
    main()
