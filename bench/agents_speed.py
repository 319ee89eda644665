"""Speed of the agents on CPU or GPU: batched acting and PPO updates, no env involved, against
the machine's own matrix rate.

Prints the parameter count; the rate of one 1024 x 1024 float32 matrix product on this process's
threads (sgemm, GFLOP/s; the median of readings before and between `--rounds` rounds of timings,
since a core's rate moves within minutes on a shared host); one `ActorCritic.act` call for
several agent batch sizes (B=1 too: nearly all of its time is the fixed cost of the act's
operations, which every batch pays) and one `PPO.update` (one epoch, one minibatch) on chunks of
80 steps, each as time (the median over the rounds), GFLOP/s and fraction of the sgemm rate
(FLOPs counted by `torch.utils.flop_counter.FlopCounterMode`: matrix products and convolutions,
forward and backward); and the aten operations one act and one update dispatch (each a kernel
launch on a GPU, a fixed overhead on a CPU). The last line, `AGENTS_SPEED {json}`, holds every
figure (`sgemm_gflops`, `act_fraction_b256`, `update_fraction`, `aten_ops_act`,
`aten_ops_update`, ...) for scripts.

    python bench/agents_speed.py [--threads 1] [--rounds 3] [--preset quadrant|randomwalls]
                                 [--device cuda]

One thread by default: the fractions compare the network with the same core's matrix rate, and
on a shared machine one torch thread per process is the fair setting. The process's allocator
is set as a learner's (`learner.reuse_freed_memory`: freed blocks reused, not faulted in
afresh). Times are this process's CPU time on a CPU (medians), wall time on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs without an install
from hns_train.agents import PPO, ActorCritic, PPOConfig  # noqa: E402
from hns_train.agents.ppo import Rollout  # noqa: E402
from hns_train.distributed.learner import reuse_freed_memory  # noqa: E402
from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.contract import observation_shapes  # noqa: E402
from tests.aten_ops import AtenOpCounter  # noqa: E402
from tests.synthetic import random_observations, synthetic_chunk  # noqa: E402

PRESETS = {
    "quadrant": observation_shapes(make_config("quadrant")),
    "randomwalls": observation_shapes(make_config("randomwalls")),
}
SGEMM_SIZE = 1024


def device_clock(device: torch.device):
    """Seconds of work on `device`: this process's CPU time on a CPU (one thread: the time it
    computed, not the time other jobs held the core), wall time once the queued work is done
    on a GPU."""
    if device.type != "cuda":
        return time.process_time

    def wall() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return wall


def median_seconds(fn, repeats: int, warmup: int = 2, device: torch.device | None = None) -> float:
    clock = device_clock(device or torch.device("cpu"))
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def count(fn) -> tuple[float, int, Counter[str]]:
    """FLOPs and aten operations of one call of `fn`."""
    with FlopCounterMode(display=False) as flops:
        fn()
    with AtenOpCounter() as ops:
        fn()
    return float(flops.get_total_flops()), ops.total, ops.ops


def sgemm_gflops(device: torch.device, repeats: int) -> float:
    a = torch.randn(SGEMM_SIZE, SGEMM_SIZE, device=device)
    b = torch.randn(SGEMM_SIZE, SGEMM_SIZE, device=device)
    seconds = median_seconds(lambda: a @ b, max(repeats, 10), warmup=3, device=device)
    return 2 * SGEMM_SIZE**3 / seconds / 1e9


def act_cpu_us_per_row(model: ActorCritic, shapes, batch: int, repeats: int = 20) -> float:
    """Process CPU time of one bare `act` call on `batch` random agent rows, per row (median)."""
    rng = np.random.default_rng(0)
    obs = random_observations(shapes, (batch,), rng)
    state = model.initial_state(batch)
    for _ in range(3):
        model.act(obs, state)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        model.act(obs, state)
        times.append(time.process_time() - start)
    return 1e6 * statistics.median(times) / batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quadrant")
    parser.add_argument("--act-batches", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--chunks", type=int, default=64, help="chunks (agent columns) per update")
    parser.add_argument("--chunk-len", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=5, help="calls per timing (median)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="timings of each, between matrix-rate readings"
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    reuse_freed_memory(True)  # the allocator's setting of a learner (a pod acts in one too)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    shapes = PRESETS[args.preset]
    model = ActorCritic(shapes, device=args.device)
    device = model.device
    summary: dict[str, object] = {
        "preset": args.preset,
        "threads": args.threads,
        "device": str(device)
        + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else ""),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "parameters": model.num_parameters(),
        "load": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    print(
        f"preset {args.preset}, torch {torch.__version__}, {args.threads} threads, "
        f"{summary['device']}, load {summary['load']}"
    )
    print(f"parameters: {model.num_parameters():,} (policy + value)")

    acts = {}
    for batch in args.act_batches:
        obs = {
            k: torch.as_tensor(v, device=device)
            for k, v in random_observations(shapes, (batch,), rng).items()
        }
        state = torch.zeros(batch, 4, model.config.lstm_dim, device=device)
        starts = torch.zeros(batch, dtype=torch.bool, device=device)

        def act(obs=obs, state=state, starts=starts):
            model.act_tensors(obs, state, starts)

        acts[batch] = (act, *count(act)[:2])

    chunk = synthetic_chunk(model, args.chunk_len, args.chunks, 10, rng, episode_len=args.chunk_len)
    rollout = Rollout.from_chunk(chunk, model)
    samples = args.chunks * args.chunk_len
    ppo = PPO(model, PPOConfig(epochs=1, minibatches=1))

    def update():
        ppo.update(rollout)

    update_flops, update_ops, op_counts = count(update)

    # Rounds of every timing, with the matrix rate read before the first and after each: the
    # rate of one core moves by 10-30 % within minutes on a shared host, and medians over
    # the rounds compare the network with the rate of the same minutes.
    readings = [sgemm_gflops(device, args.repeats)]
    act_times: dict[int, list[float]] = {batch: [] for batch in acts}
    update_times = []
    for _ in range(args.rounds):
        for batch, (act, _, _) in acts.items():
            act_times[batch].append(median_seconds(act, args.repeats, device=device))
        update_times.append(median_seconds(update, args.repeats, warmup=1, device=device))
        readings.append(sgemm_gflops(device, args.repeats))
    sgemm = statistics.median(readings)
    summary["sgemm_gflops"] = round(sgemm, 1)
    summary["sgemm_range"] = [round(min(readings), 1), round(max(readings), 1)]
    summary["rounds"] = args.rounds
    print(
        f"sgemm {SGEMM_SIZE}x{SGEMM_SIZE}: {sgemm:7.1f} GFLOP/s (median of {len(readings)} "
        f"readings, {min(readings):.1f}-{max(readings):.1f}); times: medians of "
        f"{args.rounds} rounds"
    )

    for batch, (_, flops, ops) in acts.items():
        seconds = statistics.median(act_times[batch])
        rate = flops / seconds / 1e9
        print(
            f"act   B={batch:5d}: {seconds * 1e3:8.2f} ms  ({batch / seconds:9.0f} agent-steps/s)"
            f"  {flops / batch / 1e6:5.2f} MFLOP/row  {rate:6.1f} GFLOP/s = "
            f"{rate / sgemm:5.3f} of sgemm  {ops} aten ops"
        )
        summary[f"act_ms_b{batch}"] = round(seconds * 1e3, 3)
        summary[f"act_fraction_b{batch}"] = round(rate / sgemm, 3)
        summary["aten_ops_act"] = ops
        summary["act_mflop_per_row"] = round(flops / batch / 1e6, 3)

    seconds = statistics.median(update_times)
    rate = update_flops / seconds / 1e9
    print(
        f"update {args.chunks} chunks x {args.chunk_len} steps (1 epoch x 1 minibatch): "
        f"{seconds:6.3f} s  ({samples / seconds:7.0f} sample-steps/s)  "
        f"{update_flops / samples / 1e6:5.2f} MFLOP/sample  {rate:6.1f} GFLOP/s = "
        f"{rate / sgemm:5.3f} of sgemm  {update_ops} aten ops"
    )
    common = ", ".join(f"{name} {n}" for name, n in op_counts.most_common(8))
    print(f"  most frequent in an update: {common}")
    summary.update(
        update_s_1x1=round(seconds, 3),
        update_fraction=round(rate / sgemm, 3),
        update_mflop_per_sample=round(update_flops / samples / 1e6, 3),
        aten_ops_update=update_ops,
    )
    print("AGENTS_SPEED " + json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
