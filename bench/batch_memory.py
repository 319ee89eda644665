"""Peak device memory of one PPO update at the paper's batch: 64,000 chunks of 10 steps.

    python bench/batch_memory.py [--device cuda] [--chunks 64000] [--chunk-len 10]
                                 [--config configs/quadrant.yaml] [key=value ...]

The network and PPO settings of the config (`agent.*`), one epoch of one minibatch holding every
chunk, on a rollout of random observations and actions of that size (bench/pod_speed.py's
`synthetic_rollout`, already on the device: its memory is counted apart). When the update does
not fit, the chunks are halved until it does: the largest minibatch that fits and the number of
minibatches that reach the batch (gradient accumulation) are reported. On a CPU the figure is
the process's peak resident memory, only to rehearse the plumbing.

Last line: `BATCH_MEMORY {json}` with `chunks`, `fits_chunks`, `accumulation`,
`rollout_mib`, `peak_mib`, `update_s`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.pod_speed import synthetic_rollout  # noqa: E402
from hns_train.agents.policy import ActorCritic  # noqa: E402
from hns_train.agents.ppo import PPO  # noqa: E402
from hns_train.config import load_config  # noqa: E402
from hns_train.envs.contract import observation_shapes  # noqa: E402

MIB = 1 << 20


def peak_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / MIB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def try_update(cfg, device: torch.device, chunks: int, chunk_len: int) -> dict | None:
    """One update on `chunks` chunks; None when the device runs out of memory."""
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, device=device)
    ppo = PPO(model, dataclasses.replace(cfg.agent.ppo, epochs=1, minibatches=1))
    rollout = None
    try:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        before = peak_mib(device)
        rollout = synthetic_rollout(model, chunk_len, chunks, chunk_len, device)
        rollout_mib = peak_mib(device) - before
        start = time.perf_counter()
        ppo.update(rollout)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return {
            "rollout_mib": round(rollout_mib, 1),
            "peak_mib": round(peak_mib(device), 1),
            "update_s": round(time.perf_counter() - start, 3),
        }
    except torch.cuda.OutOfMemoryError:
        return None
    finally:
        del rollout, ppo, model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quadrant.yaml"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--chunks", type=int, default=64_000, help="chunks in the batch")
    parser.add_argument("--chunk-len", type=int, default=10, help="steps per chunk")
    parser.add_argument("overrides", nargs="*", help="section.key=value for the config")
    args = parser.parse_args(argv)
    if args.chunks < 1 or args.chunk_len < 1:
        parser.error("--chunks and --chunk-len must be at least 1")
    device = torch.device(args.device)
    cfg = load_config(args.config, args.overrides)
    chunks, figures = args.chunks, None
    while chunks >= 1:
        figures = try_update(cfg, device, chunks, args.chunk_len)
        print(
            f"{chunks} chunks x {args.chunk_len} steps: "
            + (
                "out of memory"
                if figures is None
                else f"peak {figures['peak_mib']:.0f} MiB (rollout {figures['rollout_mib']:.0f}"
                f" MiB), update {figures['update_s']:.2f} s"
            ),
            flush=True,
        )
        if figures is not None:
            break
        chunks //= 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    total = None
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory / MIB
    accumulation = -(-args.chunks // chunks) if figures else None
    result = {
        "device": name,
        "device_mib": None if total is None else round(total),
        "config": Path(args.config).name,
        "chunks": args.chunks,
        "chunk_len": args.chunk_len,
        "fits_chunks": chunks if figures else 0,
        "accumulation": accumulation,
        **(figures or {}),
    }
    if figures and accumulation > 1:
        print(f"the batch takes {accumulation} minibatches of {chunks} chunks (accumulated)")
    print("BATCH_MEMORY " + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
