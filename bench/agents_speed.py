"""Speed of the agents on CPU or GPU: batched acting and PPO updates, no env involved.

Prints the parameter count, the time of one `ActorCritic.act` call for several agent batch
sizes, the time of one `PPO.update` on chunks of 80 steps, and a final one-line JSON summary
(prefixed `SUMMARY `) for scripts.

    python bench/agents_speed.py [--threads 2] [--preset quadrant|randomwalls] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs without an install
from hns_train.agents import PPO, ActorCritic, PPOConfig  # noqa: E402
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import random_observations, synthetic_chunk

PRESETS = {
    "quadrant": observation_shapes(make_config("quadrant")),
    "randomwalls": observation_shapes(make_config("randomwalls")),
}


def median_seconds(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quadrant")
    parser.add_argument("--act-batches", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--chunks", type=int, default=64, help="chunks (agent columns) per update")
    parser.add_argument("--chunk-len", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    shapes = PRESETS[args.preset]
    model = ActorCritic(shapes, device=args.device)
    summary: dict[str, object] = {
        "preset": args.preset,
        "threads": args.threads,
        "device": str(model.device)
        + (f" ({torch.cuda.get_device_name()})" if model.device.type == "cuda" else ""),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "parameters": model.num_parameters(),
    }
    print(
        f"preset {args.preset}, torch {torch.__version__}, {args.threads} threads, "
        f"{summary['device']}"
    )
    print(f"parameters: {model.num_parameters():,} (policy + value)")

    for batch in args.act_batches:
        obs = random_observations(shapes, (batch,), rng)
        state = model.initial_state(batch)
        seconds = median_seconds(lambda obs=obs, state=state: model.act(obs, state), args.repeats)
        print(
            f"act   B={batch:5d}: {seconds * 1e3:8.1f} ms  ({batch / seconds:9.0f} agent-steps/s)"
        )
        summary[f"act_ms_b{batch}"] = round(seconds * 1e3, 2)

    chunks = synthetic_chunk(
        model, args.chunk_len, args.chunks, 10, rng, episode_len=args.chunk_len
    )
    steps = args.chunks * args.chunk_len
    for name, config in (
        ("1x1", PPOConfig(epochs=1, minibatches=1)),
        ("4x4", PPOConfig(epochs=4, minibatches=4)),
    ):
        ppo = PPO(model, config)
        seconds = median_seconds(lambda ppo=ppo: ppo.update(chunks), args.repeats, warmup=1)
        print(
            f"update {args.chunks} chunks x {args.chunk_len} steps, epochs x minibatches = {name}: "
            f"{seconds:6.2f} s  ({steps * config.epochs / seconds:7.0f} sample-steps/s)"
        )
        summary[f"update_s_{name}"] = round(seconds, 3)
    print("SUMMARY " + json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
