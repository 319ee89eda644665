"""Speed of the game on MuJoCo Warp (`WarpGame`) next to the C backend (`VectorGame`), one run.

For each N in --worlds it prints:
- warp: wall time per env step of `WarpGame(cfg, N)` on the Warp device (rules, observations and
  15 physics substeps of every world), per world-step in us, and frames/s (world-steps per
  second; an env step of one world is one frame);
- its physics alone (`WarpWorlds.step(15)`), to show what the game adds;
  The game is built with `stagger=True` (what a pod uses), so the timed steps include each
  step's share of episode ends, reset from the device layout bank inside the step;
- reset all: one step's reset work when every world ends at once (`WarpGame._reset_where` over
  all N worlds from bank slots: masked gathers, no host work), in ms;
- host syncs in one `step(check=False)` (`HostSyncCounter`; must be 0) and whether the physics
  ran as a CUDA graph;
- bank refresh: host ms to sample and compile one layout for the bank (done on a thread,
  `BankConfig.refresh_slots / refresh_every` layouts per step);
- c: `VectorGame(cfg, N, threads=1)` per world-step on the same machine (bench/env_speed.py's
  `batched`, resets excluded) and the warp / c ratio, for N up to --c-max-worlds (its
  per-world cost does not depend on N; a 16k-world C game only costs memory and minutes).
Then the agreement with `VectorGame`: the largest observation difference over the first
--diff-steps steps of the same seeded episodes with the same random actions (masks counted
apart: a sight line through a wall corner can flip one), and the cost of the first Warp build
and step of the run (kernel compile on a fresh machine, a load from Warp's kernel cache after).

It ends with `WARP_SPEED {json}` (device, worlds, us_per_world_step, c_backend_us_per_world_step,
max_obs_diff, ...), the per-N figures being lists in the order of `worlds`.

    python bench/warp_speed.py [--quick] [--preset quadrant|randomwalls|chase]
                               [--worlds 64 256 ... | --worlds 1024,4096,16384]
                               [--device cpu|cuda|cuda:0]

--quick (N = 64, 256; two timed steps each) finishes in under 5 minutes on 2 cores. The full
default N = 64 ... 8192 (up to MAX_WORLDS = 16384) is meant for a GPU; on Warp's CPU device large
N take minutes per step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

# the checkout's package and bench/ itself, so that it runs without an install of the package
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from env_speed import batched, cpu_model, random_actions  # noqa: E402

from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.contract import MASK_KEYS  # noqa: E402
from hns_train.envs.layout import sample_layout  # noqa: E402
from hns_train.envs.vector import VectorGame  # noqa: E402
from hns_train.envs.warp.bank import layout_entries  # noqa: E402
from hns_train.envs.warp.game import WarpGame  # noqa: E402
from hns_train.envs.world import ModelCache  # noqa: E402
from tests.host_syncs import HostSyncCounter  # noqa: E402

MAX_WORLDS = 16384
PRESETS = ("quadrant", "randomwalls", "chase")


def kernel_modules(cache: Path) -> int:
    """Compiled Warp kernel modules in the cache (one folder each)."""
    return sum(1 for p in cache.glob("*/wp_*") if p.is_dir()) if cache.exists() else 0


def warp_timing(cfg, n_worlds, device, seed, steps, rng) -> dict:
    t0 = time.perf_counter()
    game = WarpGame(cfg, n_worlds, seed=seed, device=device, stagger=True)
    game.reset()
    build = time.perf_counter() - t0
    pool = [
        torch.as_tensor(a, device=game.dev)
        for a in random_actions(rng, n_worlds, game.n_agents, game.action_nvec, n=4)
    ]
    t0 = time.perf_counter()
    game.step(pool[0], check=False)  # warm-up (and, first in a process, kernel loads)
    game.step(pool[1], check=False)  # on CUDA: the physics graph is captured here
    game.worlds.synchronize()
    first = time.perf_counter() - t0
    with HostSyncCounter() as syncs:
        game.step(pool[2], check=False)
    t0 = time.perf_counter()
    for i in range(steps):
        game.step(pool[(i + 1) % len(pool)], check=False)
    game.worlds.synchronize()
    per_step = (time.perf_counter() - t0) / steps
    t0 = time.perf_counter()
    game.worlds.step(cfg.substeps)
    game.worlds.synchronize()
    physics = time.perf_counter() - t0
    everyone = torch.ones(n_worlds, dtype=torch.bool, device=game.dev)
    t0 = time.perf_counter()
    game._reset_where(everyone, game.bank.draw())
    game.worlds.synchronize()
    reset = time.perf_counter() - t0
    game.read_warnings()
    out = {
        "bank_refresh_ms_per_layout": layout_ms(cfg, game.worlds, seed),
        "device": str(game.worlds.device),
        "build_s": build,
        "first_step_s": first,
        "us_per_world_step": 1e6 * per_step / n_worlds,
        "physics_us_per_world_step": 1e6 * physics / n_worlds,
        "reset_all_ms": 1e3 * reset,
        "host_syncs_per_step": syncs.total,
        "cuda_graph": bool(game.worlds._graphs),
        "physics_warnings": game.physics_warnings_total,
    }
    game.close()
    return out


def layout_ms(cfg, worlds, seed, n=8) -> float:
    """Host ms to sample and compile one layout into bank entries (the refresh thread's work)."""
    rng, cache = np.random.default_rng(seed), ModelCache(cfg)
    layouts = [sample_layout(cfg, rng) for _ in range(n)]
    t0 = time.perf_counter()
    for lay in layouts:
        layout_entries(cfg, worlds, [lay], cache)
    return 1e3 * (time.perf_counter() - t0) / n


def obs_diff(cfg, n_worlds, device, seed, steps) -> tuple[float, float, float]:
    """(largest non-mask observation difference, largest reward difference, share of mask
    entries that differ) between VectorGame and WarpGame over the first `steps` steps."""
    vec = VectorGame(cfg, n_worlds, seed=seed)
    game = WarpGame(cfg, n_worlds, seed=seed, device=device)
    pairs = [(vec.reset(), game.reset())]
    rng = np.random.default_rng(seed)
    reward = 0.0
    for _ in range(steps):
        act = rng.integers(0, vec.action_nvec, size=(n_worlds, vec.n_agents, 5))
        c, w = vec.step(act), game.step(act)
        pairs.append((c.obs, w.obs))
        reward = max(reward, float(np.abs(c.rewards - w.rewards.cpu().numpy()).max()))
    diff, flipped, entries = 0.0, 0, 0
    for c, w in pairs:
        for key, value in c.items():
            got = w[key].cpu().numpy()
            if key in MASK_KEYS:
                flipped += int((got != value).sum())
                entries += value.size
            elif value.size:
                diff = max(diff, float(np.abs(got - value).max()))
    return diff, reward, flipped / max(entries, 1)


def parse_worlds(values: list[str]) -> list[int]:
    """N values from "64 256" or "1024,4096,16384" (or both), each in [1, MAX_WORLDS]."""
    out = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                n = int(part)
            except ValueError:
                raise SystemExit(f"--worlds: {part!r} is not an integer") from None
            if not 1 <= n <= MAX_WORLDS:
                raise SystemExit(f"--worlds: {n} is outside [1, {MAX_WORLDS}]")
            out.append(n)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 64, 256; two timed steps each")
    p.add_argument("--preset", default="quadrant", choices=PRESETS)
    p.add_argument("--worlds", nargs="+", default=None, help="N values, space or comma separated")
    p.add_argument("--c-max-worlds", type=int, default=1024, help="largest N timed on C too")
    p.add_argument("--steps", type=int, default=None, help="timed Warp env steps per N")
    p.add_argument("--device", default=None, help="Warp device (default: Warp's default)")
    p.add_argument("--diff-worlds", type=int, default=16)
    p.add_argument("--diff-steps", type=int, default=5)
    p.add_argument("--c-seconds", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    worlds = parse_worlds(args.worlds) if args.worlds else None
    worlds = worlds or ([64, 256] if args.quick else [64, 256, 1024, 4096, 8192])
    steps = args.steps or (2 if args.quick else 5)
    c_seconds = args.c_seconds or (1.0 if args.quick else 3.0)
    cfg = make_config(args.preset)
    rng = np.random.default_rng(args.seed)
    cache = Path(os.environ.get("WARP_CACHE_PATH", Path.home() / ".cache" / "warp"))
    cached_before = kernel_modules(cache)

    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"# {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"# load average at start: {os.getloadavg()}")
    print(f"# preset {args.preset}, {cached_before} kernel modules in Warp's cache at start")
    rows = []
    for n in worlds:
        w = warp_timing(cfg, n, args.device, args.seed, steps, rng)
        c_us = None
        if n <= args.c_max_worlds:
            c_wall, _ = batched(cfg, n, 1, args.seed, c_seconds, rng)
            c_us = 1e6 * c_wall
        rows.append({"worlds": n, **w, "c_us_per_world_step": c_us})
        c_text = (
            f"c {c_us:6.0f} us ({1e6 / c_us:6.0f} frames/s) | "
            f"warp/c {w['us_per_world_step'] / c_us:6.1f}x"
            if c_us
            else "c not timed"
        )
        print(
            f"N={n:5d} warp {w['us_per_world_step']:9.1f} us/world-step "
            f"({1e6 / w['us_per_world_step']:8.0f} frames/s; physics "
            f"{w['physics_us_per_world_step']:.1f} us) | {c_text} | "
            f"reset all {w['reset_all_ms']:.1f} ms | host syncs {w['host_syncs_per_step']} | "
            f"cuda graph {w['cuda_graph']} | build {w['build_s']:.1f} s, "
            f"first steps {w['first_step_s']:.1f} s",
            flush=True,
        )
    refresh_ms = rows[0]["bank_refresh_ms_per_layout"]
    print(f"bank refresh: {refresh_ms:.1f} host ms per layout (on the bank's thread)")
    diff, reward_diff, flipped = obs_diff(
        cfg, args.diff_worlds, args.device, args.seed, args.diff_steps
    )
    print(
        f"agreement with VectorGame ({args.diff_worlds} worlds, reset + {args.diff_steps} "
        f"steps): max obs diff {diff:.2e}, max reward diff {reward_diff:g}, "
        f"mask entries differing {100 * flipped:.2f}%"
    )
    first = rows[0]
    compiled = kernel_modules(cache) - cached_before
    print(
        f"first Warp build + step of this run: {first['build_s'] + first['first_step_s']:.1f} s "
        f"({compiled} kernel modules compiled in this run, the rest loaded from the cache)"
    )
    summary = {
        "device": first["device"],
        "preset": args.preset,
        "worlds": worlds,
        "us_per_world_step": [round(r["us_per_world_step"], 1) for r in rows],
        "frames_per_s": [round(1e6 / r["us_per_world_step"], 1) for r in rows],
        "physics_us_per_world_step": [round(r["physics_us_per_world_step"], 1) for r in rows],
        "c_backend_us_per_world_step": [
            None if r["c_us_per_world_step"] is None else round(r["c_us_per_world_step"], 1)
            for r in rows
        ],
        "reset_all_ms": [round(r["reset_all_ms"], 2) for r in rows],
        "host_syncs_per_step": [r["host_syncs_per_step"] for r in rows],
        "cuda_graph": [r["cuda_graph"] for r in rows],
        "physics_warnings": [r["physics_warnings"] for r in rows],
        "bank_refresh_ms_per_layout": round(refresh_ms, 2),
        "max_obs_diff": diff,
        "max_reward_diff": reward_diff,
        "mask_mismatch_share": flipped,
        "diff_steps": args.diff_steps,
        "first_build_and_step_s": round(first["build_s"] + first["first_step_s"], 1),
        "kernel_modules_compiled": compiled,
    }
    print("WARP_SPEED " + json.dumps(summary))


if __name__ == "__main__":
    main()
