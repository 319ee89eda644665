"""Speed of the hide-and-seek env against raw MuJoCo physics, per preset, on this machine.

For each preset it prints:
- raw physics: `mj_step(m, d, 15)` (one env step's substeps) on the game's own model, from the
  states the game itself visited (recorded along a random-action episode), no game logic;
- arm contacts: the same raw steps on a copy of each model whose agent arms do not collide,
  alternated state by state with the real model (so both see the same load), and the mean
  number of contacts per step with and without arm contacts: what colliding arms cost;
- first game: CPU time of a process's first reset and 3 steps, which load the compiled step
  kernels (numba's cache; on a machine's first run, their compilation): paid once per process
  and kept out of the per-step figures below;
- single env: `HideAndSeekGame(cfg, 1)`, time per env step and its ratio to raw physics;
- rays: CPU time of the game's ray casting alone (aims, the ray call: envs/rays.py's compiled
  loop at one thread, lidar and sight),
  repeated on the last state: a floor under the single env's cost beyond physics;
- logic: CPU time of a single-env step whose physics call is skipped (rays, kernels, numpy,
  Python; the state stays put, so its caches stay warm);
- pettingzoo: the same through `parallel_env(preset)` (dicts of per-agent actions and
  observations, what third-party trainers step), CPU time per step and its ratio to raw physics;
- batched env: `VectorGame(cfg, N, threads=T)` for N in --worlds and T in --threads, world-steps
  per second, per-world cost and its ratio to raw physics (resets excluded, reported below), and
  the speed-up of T threads over 1;
- reset: time to start a new episode in one world (layout sampling, model build or cache hit,
  state reset, first rays and observation), in ms and as % of one episode (horizon steps) at
  the single-env and at the largest batched per-world cost, in wall and in CPU time;
- cpu/wall of each batched run: about T when T threads really run at once (less when other
  processes hold the cores).
It ends with one line per preset, `ENV_SPEED {json}`, for scripts.

    python bench/env_speed.py [--quick] [--presets quadrant randomwalls] [--seconds 2]
    python bench/env_speed.py --presets quadrant --pettingzoo 2000 [--flatten]

`--pettingzoo STEPS` measures only the PettingZoo step: the median of single steps of
`parallel_env(preset)` and of the game's own step against raw physics on the same states, all
three stepped in lockstep (`pettingzoo_medians`), with a `PETTINGZOO_SPEED {json}` line.

The machine may be shared: the header prints the load average; compare figures only between
runs on an idle machine.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import mujoco
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs without an install
from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.game import STATE, HideAndSeekGame  # noqa: E402
from hns_train.envs.parallel import parallel_env  # noqa: E402
from hns_train.envs.vector import VectorGame  # noqa: E402


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def random_actions(rng, n_worlds, n_agents, nvec, n=64):
    """A fixed pool of random actions (grabbing and locking half the time)."""
    a = rng.integers(0, nvec, size=(n, n_worlds, n_agents, 5))
    return a


def without_arm_contacts(model: mujoco.MjModel, index) -> mujoco.MjModel:
    """A copy of `model` whose agent arm spheres collide with nothing (all else equal)."""
    model = copy.copy(model)  # MjModel copies are deep
    arms = np.isin(model.geom_bodyid, index.agent_body) & ~np.isin(
        np.arange(model.ngeom), index.agent_geom
    )
    model.geom_contype[arms] = 0
    model.geom_conaffinity[arms] = 0
    return model


def arm_contact_cost(models, states, substeps, index) -> dict:
    """CPU seconds per mj_step x substeps with and without arm contacts on the same states,
    alternating the two per state, and the mean contacts per substep of each."""
    plain = {id(m): without_arm_contacts(m, index) for m in models}
    cpu = {"arms": 0.0, "no_arms": 0.0}
    ncon = {"arms": 0, "no_arms": 0}
    data = mujoco.MjData(models[0])
    for model, state in zip(models, states, strict=True):
        for key, m in (("arms", model), ("no_arms", plain[id(model)])):
            mujoco.mj_setState(m, data, state, STATE)
            c0 = time.process_time()
            for _ in range(substeps):
                mujoco.mj_step(m, data)
                ncon[key] += data.ncon
            cpu[key] += time.process_time() - c0
    n = len(states)
    return {
        "cpu_us": cpu["arms"] / n * 1e6,
        "cpu_us_no_arm_contacts": cpu["no_arms"] / n * 1e6,
        "contacts": ncon["arms"] / (n * substeps),
        "contacts_no_arm_contacts": ncon["no_arms"] / (n * substeps),
    }


def raw_physics(cfg, seed, n_steps, rng) -> tuple[float, float, float, float, dict]:
    """Seconds per mj_step x substeps and per single-env step of the same run, each as wall
    time and as this process's CPU time (robust to other processes on a busy machine), and the
    cost of arm contacts on the same states (`arm_contact_cost`)."""
    game = HideAndSeekGame(cfg, 1, seed=seed)
    game.reset()
    pool = random_actions(rng, 1, game.n_agents, game.action_nvec)
    states, models = [], []
    env_time = env_cpu = 0.0
    for i in range(n_steps):
        t0, c0 = time.perf_counter(), time.process_time()
        _, _, truncated, _ = game.step(pool[i % len(pool)])
        env_time += time.perf_counter() - t0
        env_cpu += time.process_time() - c0
        states.append(game.batch.state[0].copy())
        models.append(game.models[0])
        if truncated[0]:
            game.reset()
    data = mujoco.MjData(models[0])
    raw = raw_cpu = 0.0
    for model, state in zip(models[:-1], states[:-1], strict=True):
        mujoco.mj_setState(model, data, state, STATE)
        t0, c0 = time.perf_counter(), time.process_time()
        mujoco.mj_step(model, data, cfg.substeps)
        raw += time.perf_counter() - t0
        raw_cpu += time.process_time() - c0
    n = len(states) - 1
    arms = arm_contact_cost(models[:-1], states[:-1], cfg.substeps, game.index)
    c0 = time.process_time()
    for _ in range(n):  # the game's rays on its last state: aims, the ray call, results
        game._cast_rays(game._all_worlds)
    arms["rays_cpu_us"] = (time.process_time() - c0) / n * 1e6
    return raw / n, env_time / n_steps, raw_cpu / n, env_cpu / n_steps, arms


class _NoPhysics:
    """A `mujoco.batch.Batch` whose step does nothing: what a game step costs besides physics."""

    def __init__(self, batch):
        self._batch = batch

    def __getattr__(self, name):
        return getattr(self._batch, name)

    def step(self, nstep=1):
        pass


def logic_cpu(cfg, seed, n_steps, rng) -> float:
    """CPU seconds per single-env step with the physics call skipped (the rays, the compiled
    kernels, numpy and Python of the step; the state stays put, so caches stay warm)."""
    game = HideAndSeekGame(cfg, 1, seed=seed)
    game.reset()
    pool = random_actions(rng, 1, game.n_agents, game.action_nvec)
    game.batch = _NoPhysics(game.batch)
    cpu = 0.0
    for i in range(n_steps):
        c0 = time.process_time()
        _, _, truncated, _ = game.step(pool[i % len(pool)])
        cpu += time.process_time() - c0
        if truncated[0]:
            game.reset()
    return cpu / n_steps


def pettingzoo_cpu(preset, seed, n_steps, rng) -> float:
    """CPU seconds per step of `parallel_env(preset)` under random int64 actions."""
    env = parallel_env(preset, seed=seed)
    env.reset(seed=seed)
    nvec = env.game.action_nvec
    pool = rng.integers(0, nvec, size=(64, env.game.n_agents, len(nvec)))
    cpu = 0.0
    for i in range(n_steps):
        actions = {a: pool[i % len(pool), k] for k, a in enumerate(env.agents)}
        c0 = time.process_time()
        env.step(actions)
        cpu += time.process_time() - c0
        if not env.agents:
            env.reset()
    return cpu / n_steps


def pettingzoo_medians(preset, seed, n_steps, rng, flatten=False) -> dict:
    """Median time of one step of `parallel_env(preset)`, of the game's own step, and of raw
    physics (`mj_step` x substeps) on the same states, stepped in lockstep (all three see the
    same load): the env and a `HideAndSeekGame` of the same seed take the same random actions,
    so they visit the same states, and before each step the env's state is stepped raw on a
    `MjData` of its model; the env and the game take turns stepping first. Wall
    (perf_counter) and process CPU time of each single step.
    `flatten`: the env returns flat vectors (`parallel_env(..., flatten=True)`)."""
    cfg = make_config(preset)
    env = parallel_env(preset, seed=seed, flatten=flatten)
    env.reset(seed=seed)
    game = HideAndSeekGame(cfg, 1, seed=seed)
    game.reset(seeds=[seed])
    nvec = game.action_nvec
    pool = rng.integers(0, nvec, size=(64, game.n_agents, len(nvec)))
    datas: dict[int, mujoco.MjData] = {}
    times = {k: ([], []) for k in ("pettingzoo", "game", "raw", "inner")}
    inner_step = env.game.step

    def timed_inner(batch):  # the env's own game step: the rest of its step is the wrapper's
        t0, c0 = time.perf_counter(), time.process_time()
        out = inner_step(batch)
        times["inner"][0].append(time.perf_counter() - t0)
        times["inner"][1].append(time.process_time() - c0)
        return out

    env.game.step = timed_inner

    def timed(key, call):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        times[key][0].append(time.perf_counter() - t0)
        times[key][1].append(time.process_time() - c0)

    for i in range(n_steps):
        actions = pool[i % len(pool)]
        model = env.game.models[0]
        data = datas.setdefault(id(model), mujoco.MjData(model))
        mujoco.mj_setState(model, data, env.game.batch.state[0], STATE)
        live = {a: actions[env._slot[a]] for a in env.agents}
        timed("raw", lambda: mujoco.mj_step(model, data, cfg.substeps))  # noqa: B023
        # the env and the game take turns going first: neither always follows the raw step
        for key in ("pettingzoo", "game")[:: 1 if i % 2 else -1]:
            if key == "pettingzoo":
                timed(key, lambda: env.step(live))  # noqa: B023
            else:
                timed(key, lambda: game.step(actions[None]))  # noqa: B023
        if not env.agents:
            env.reset()
            game.reset()
    out = {}
    for key, (wall, cpu) in times.items():
        out[f"{key}_us"] = float(np.median(wall)) * 1e6
        out[f"{key}_cpu_us"] = float(np.median(cpu)) * 1e6
    # per step: the env's step less its own game step (what the dicts and checks cost)
    for unit, i in (("us", 0), ("cpu_us", 1)):
        extra = np.subtract(times["pettingzoo"][i], times["inner"][i])
        out[f"wrapper_{unit}"] = float(np.median(extra)) * 1e6
    del out["inner_us"], out["inner_cpu_us"]
    for key in ("pettingzoo", "game"):
        out[f"{key}_ratio"] = out[f"{key}_us"] / out["raw_us"]
        out[f"{key}_cpu_ratio"] = out[f"{key}_cpu_us"] / out["raw_cpu_us"]
    same = np.array_equal(env.game.batch.state, game.batch.state)
    out["same_states"] = bool(same)  # the lockstep held: both visited the same states
    return out


def first_steps(cfg, seed, n=3) -> float:
    """CPU seconds of a process's first game: its reset and `n` steps. They load the compiled
    step kernels (envs/kernels.py) from numba's cache, or compile them on a machine's first run:
    a one-time cost per process, kept out of the per-step figures."""
    c0 = time.process_time()
    game = HideAndSeekGame(cfg, 1, seed=seed)
    game.reset()
    for _ in range(n):
        game.step(np.broadcast_to(game.noop, (1, game.n_agents, 5)))
    return time.process_time() - c0


def batched(cfg, n_worlds, threads, seed, seconds, rng) -> tuple[float, float]:
    """Seconds per world-step of VectorGame, resets excluded: wall time and process CPU time
    (the latter sums every thread, so it equals wall time only with one thread)."""
    vec = VectorGame(cfg, n_worlds, seed=seed, threads=threads)
    vec.reset()
    reset_time = [0.0, 0.0]  # wall, CPU
    game_reset = vec.game.reset

    def timed_reset(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = game_reset(*args, **kwargs)
        reset_time[0] += time.perf_counter() - t0
        reset_time[1] += time.process_time() - c0
        return out

    vec.game.reset = timed_reset
    pool = random_actions(rng, n_worlds, vec.n_agents, vec.action_nvec, n=16)
    for i in range(3):  # warm-up
        vec.step(pool[i])
    reset_time[:] = [0.0, 0.0]
    steps, start, cpu0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds or steps < 5:
        vec.step(pool[steps % len(pool)])
        steps += 1
    elapsed = time.perf_counter() - start - reset_time[0]
    cpu = time.process_time() - cpu0 - reset_time[1]
    return elapsed / (steps * n_worlds), cpu / (steps * n_worlds)


def reset_cost(cfg, seed, n) -> tuple[float, float]:
    """Seconds per reset of one world: wall time and process CPU time."""
    game = HideAndSeekGame(cfg, 1, seed=seed)
    game.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        game.reset()
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["quadrant", "randomwalls"])
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=2.0, help="per batched measurement")
    parser.add_argument("--raw-steps", type=int, default=400, help="env steps recorded for raw")
    parser.add_argument("--resets", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="short runs, N in (1, 16)")
    parser.add_argument(
        "--pettingzoo",
        type=int,
        metavar="STEPS",
        default=0,
        help="only the PettingZoo step against the game's step and raw physics, medians of "
        "STEPS single steps in lockstep (pettingzoo_medians)",
    )
    parser.add_argument("--flatten", action="store_true", help="--pettingzoo with flatten=True")
    args = parser.parse_args()
    if args.quick:
        args.worlds, args.seconds, args.raw_steps, args.resets = [1, 16], 0.5, 120, 20

    load = os.getloadavg()
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; python {platform.python_version()}")
    print(f"mujoco {mujoco.__version__}, numpy {np.__version__}")
    print(f"date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"load average (1, 5, 15 min) at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(
        "times are per env step (= substeps mj_steps); ratio = env cost / raw physics cost;\n"
        "cpu = this process's CPU time (sums threads), robust to a busy machine\n"
    )

    if args.pettingzoo:
        for preset in args.presets:
            first_steps(make_config(preset), args.seed)  # kernels loaded before timing
            rng = np.random.default_rng(0)
            m = pettingzoo_medians(preset, args.seed, args.pettingzoo, rng, args.flatten)
            print(
                f"== {preset}{' (flatten=True)' if args.flatten else ''}: median of "
                f"{args.pettingzoo} single steps, in lockstep\n"
                f"raw physics  mj_step x{make_config(preset).substeps}: {m['raw_us']:6.0f} us"
                f"   cpu {m['raw_cpu_us']:.0f} us\n"
                f"game step    HideAndSeekGame(1): {m['game_us']:6.0f} us   ratio "
                f"{m['game_ratio']:.2f}   cpu {m['game_cpu_us']:.0f} us, cpu ratio "
                f"{m['game_cpu_ratio']:.2f}\n"
                f"pettingzoo   parallel_env step: {m['pettingzoo_us']:6.0f} us   ratio "
                f"{m['pettingzoo_ratio']:.2f}   cpu {m['pettingzoo_cpu_us']:.0f} us, cpu ratio "
                f"{m['pettingzoo_cpu_ratio']:.2f}   (same states: {m['same_states']})\n"
                f"wrapper      the env's step less its own game step: {m['wrapper_us']:.0f} us, "
                f"cpu {m['wrapper_cpu_us']:.0f} us = {m['wrapper_cpu_us'] / m['raw_cpu_us']:.2f} "
                "of raw physics"
            )
            m.update(preset=preset, flatten=args.flatten, load_avg_1min=load[0])
            print("PETTINGZOO_SPEED " + json.dumps(m, sort_keys=True))
        end = os.getloadavg()
        print(f"load average at end: {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
        return

    summaries = []
    for preset in args.presets:
        cfg = make_config(preset)
        rng = np.random.default_rng(args.seed)
        first = first_steps(cfg, args.seed)
        raw, single, raw_cpu, single_cpu, arms = raw_physics(cfg, args.seed, args.raw_steps, rng)
        print(f"== {preset} (horizon {cfg.horizon}, {cfg.substeps} substeps per env step)")
        print(
            f"raw physics  mj_step x{cfg.substeps}: {raw * 1e6:8.0f} us   ({1 / raw:7.0f} /s)"
            f"   cpu {raw_cpu * 1e6:.0f} us"
        )
        print(
            f"arm contacts mj_step x{cfg.substeps}, alternated: cpu {arms['cpu_us']:.0f} us with, "
            f"{arms['cpu_us_no_arm_contacts']:.0f} us without "
            f"(x{arms['cpu_us'] / arms['cpu_us_no_arm_contacts']:.3f}); contacts per substep "
            f"{arms['contacts']:.2f} with, {arms['contacts_no_arm_contacts']:.2f} without"
        )
        print(
            f"first game   reset + 3 steps of a process's first game (kernels loaded): "
            f"cpu {first * 1e3:.0f} ms, once per process"
        )
        print(
            f"single env   HideAndSeekGame(1): {single * 1e6:8.0f} us   ({1 / single:7.0f} /s)"
            f"   ratio {single / raw:.2f}   cpu {single_cpu * 1e6:.0f} us, "
            f"cpu ratio {single_cpu / raw_cpu:.2f}"
        )
        rays_us = arms["rays_cpu_us"]
        print(
            f"rays         the game's ray casting alone (lidar fans and sight lines, repeated on "
            f"one state): cpu {rays_us:.0f} us = {rays_us / raw_cpu / 1e6:.2f} of raw physics"
        )
        logic = logic_cpu(cfg, args.seed, args.raw_steps, rng)
        print(
            f"logic        single-env step with the physics call skipped: cpu {logic * 1e6:.0f} us"
            f" = {logic / raw_cpu:.2f} of raw physics (the rays above are part of it)"
        )
        pz_cpu = pettingzoo_cpu(preset, args.seed, args.raw_steps, rng)
        print(
            f"pettingzoo   parallel_env step: cpu {pz_cpu * 1e6:.0f} us, "
            f"cpu ratio {pz_cpu / raw_cpu:.2f}"
        )
        rows, cpu_rows = {}, {}
        for n in args.worlds:
            for t in args.threads:
                per, cpu = batched(cfg, n, t, args.seed, args.seconds, rng)
                rows[(n, t)], cpu_rows[(n, t)] = per, cpu
                base = rows.get((n, args.threads[0]), per)
                print(
                    f"batched      N={n:3d} threads={t}: {per * 1e6:8.0f} us/world-step "
                    f"({1 / per:7.0f} world-steps/s)   ratio {per / raw:.2f}   "
                    f"x{base / per:.2f} vs {args.threads[0]} thread   "
                    f"cpu ratio {cpu / raw_cpu:.2f}   cpu/wall {cpu / per:.2f}"
                )
        rs, rs_cpu = reset_cost(cfg, args.seed, args.resets)
        n_max, t_max = max(args.worlds), max(args.threads)
        best = rows[(n_max, t_max)]
        ep_single, ep_batched = cfg.horizon * single, cfg.horizon * best
        t_min = args.threads[0]
        pct_single = 100 * rs_cpu / (cfg.horizon * single_cpu)
        pct_batched = 100 * rs_cpu / (cfg.horizon * cpu_rows[(n_max, t_min)])
        print(
            f"reset        {rs * 1e3:.2f} ms = {100 * rs / ep_single:.1f}% of a single-env "
            f"episode ({ep_single * 1e3:.0f} ms), {100 * rs / ep_batched:.1f}% of a batched one "
            f"(N={n_max}, {t_max} threads: {ep_batched * 1e3:.0f} ms)\n"
            f"             cpu {rs_cpu * 1e3:.2f} ms = {pct_single:.1f}% of a single-env "
            f"episode's cpu, {pct_batched:.1f}% of a batched one (N={n_max}, {t_min} thread)\n"
        )
        summaries.append(
            {
                "preset": preset,
                "raw_step_us": raw * 1e6,
                "single_step_us": single * 1e6,
                "single_ratio": single / raw,
                "raw_step_cpu_us": raw_cpu * 1e6,
                "arm_contacts": arms,
                "single_cpu_ratio": single_cpu / raw_cpu,
                "first_game_cpu_ms": first * 1e3,
                "pettingzoo_cpu_ratio": pz_cpu / raw_cpu,
                "logic_cpu_ratio": logic / raw_cpu,
                "batched_cpu_ratio": {f"N{n}_T{t}": v / raw_cpu for (n, t), v in cpu_rows.items()},
                "batched_us_per_world_step": {f"N{n}_T{t}": v * 1e6 for (n, t), v in rows.items()},
                "batched_ratio": {f"N{n}_T{t}": v / raw for (n, t), v in rows.items()},
                "thread_speedup": {
                    f"N{n}": rows[(n, args.threads[0])] / rows[(n, t_max)] for n in args.worlds
                },
                "reset_ms": rs * 1e3,
                "reset_cpu_ms": rs_cpu * 1e3,
                "reset_cpu_pct_single_episode": pct_single,
                "reset_cpu_pct_batched_episode": pct_batched,
                "batched_cpu_per_wall": {
                    f"N{n}_T{t}": cpu_rows[(n, t)] / rows[(n, t)] for (n, t) in rows
                },
                "reset_pct_single_episode": 100 * rs / ep_single,
                "reset_pct_batched_episode": 100 * rs / ep_batched,
                "load_avg_1min": load[0],
                "cpu": cpu_model(),
                "cores": os.cpu_count(),
            }
        )
    end = os.getloadavg()
    print(f"load average at end: {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    for s in summaries:
        print("ENV_SPEED " + json.dumps(s, sort_keys=True))


if __name__ == "__main__":
    main()
