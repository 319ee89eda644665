"""Pod throughput against the local pipeline and against its floor, in one run on one device.

    python bench/pod_speed.py [--config configs/quadrant_cpu.yaml]
                              [--pod-config configs/quadrant_pod.yaml] [--device cpu|cuda]
                              [--minutes 3] [key=value ...]

1. Training runs through the real controller, one after the other, `--minutes` each:
   - the local pipeline (`pipeline.backend=c`: actors, policy worker, trainer processes);
   - pods (`--pod-config`, `pipeline.backend=pod`: `--pods` processes, one per core on a CPU,
     each with `pod.worlds` worlds and one thread, training one policy as DDP ranks).
   Env frames/s and trained frames/s (frames whose samples reached an update for the first
   time) from the metrics records, from `--warmup` seconds after the first update.
2. The pod in this process, steady state (a rollout and an update of warm-up first), per env
   frame on two clocks: wall time, split into collecting (simulation and acting, inference and
   opponents included, as `Pod`'s counters time them, and the rest of a step: recording,
   episode ends) and learning (the PPO update); and this process's CPU time (all its threads),
   split into collecting and learning. Also the host synchronisations per env step
   (`tests/host_syncs.py`; the C game takes its actions as a host array: 1 per step).
3. The floor, in this process on the same states and sizes: the raw physics of the pod's worlds
   (`mujoco.mj_step` x substeps per world, bench/env_speed.py's `raw_physics`), one bare forward
   of the policy on all agent rows per env step (`ActorCritic.act_tensors`), and one bare PPO
   update on a rollout of the pod's size (`PPO.update`, the pod's `agent.ppo` passes), each per
   env frame, on the device's clock: process CPU time on a CPU (the raw physics runs on one
   thread, the pod's on several: only their CPU time compares), wall time on a GPU.
   `pod_ms_per_frame / floor_ms_per_frame`, both on that clock, is what the pod's own
   bookkeeping costs.

On a GPU wall times are taken with the device synchronised (`Pod.profile` after each phase).
Every per-frame key names its clock (`*_wall_ms_per_frame`, `*_cpu_ms_per_frame`) except the
floor's and `pod_ms_per_frame`, which are on the device's clock, named by `clock`.
Last line: `POD_SPEED {json}` with `device`, `clock`, `pod_trained_fps`, `local_trained_fps`,
`pod_over_local`, `pod_ms_per_frame`, `floor_ms_per_frame`, `pod_wall_ms_per_frame`,
`pod_cpu_ms_per_frame`, `syncs_per_step`, `physics_share` (simulation's share of the pod's wall
time), `peak_gpu_mib` among its keys.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.env_speed import raw_physics  # noqa: E402
from hns_train.agents.pod import Pod  # noqa: E402
from hns_train.agents.policy import ActorCritic  # noqa: E402
from hns_train.agents.pool import PolicyPool  # noqa: E402
from hns_train.agents.ppo import PPO  # noqa: E402
from hns_train.config import load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402
from hns_train.distributed.learner import reuse_freed_memory  # noqa: E402
from hns_train.distributed.pod_worker import make_game  # noqa: E402
from hns_train.envs.contract import observation_shapes  # noqa: E402
from tests.host_syncs import HostSyncCounter  # noqa: E402


def wall_time(device: torch.device) -> float:
    """Wall seconds, once the device has done the work queued so far."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def device_clock(device: torch.device) -> tuple[str, Callable[[], float]]:
    """The floor's clock and its name: wall time on a GPU, process CPU time on a CPU."""
    if device.type == "cuda":
        return "wall", lambda: wall_time(device)
    return "cpu", time.process_time


def run_figures(cfg, warmup: float) -> dict[str, float]:
    """Train `cfg` through the controller; its `metrics_figures`."""
    summary = Controller(cfg).run()
    return metrics_figures(cfg, summary, warmup)


def metrics_figures(cfg, summary, warmup: float) -> dict[str, float]:
    """A finished run's env frames/s and trained frames/s over the records from `warmup` seconds
    after the first optimisation step to the end. Trained frames/s is time-weighted: a pod's
    frames and its trained samples land in different records."""
    lines = (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()
    train = [r for r in map(json.loads, lines) if r["kind"] == "train"]
    learning = [r for r in train if r["version"] >= 1]
    if not learning:
        raise RuntimeError(f"{cfg.name}: no optimisation step in {cfg.stop.minutes} minutes")
    window = [r for r in train if r["time"] >= learning[0]["time"] + warmup]
    if len(window) < 2:
        raise RuntimeError(f"{cfg.name}: run too short to measure after the warm-up")
    span = window[-1]["time"] - window[0]["time"]
    trained = sum(
        r.get("throughput/trained_fps", 0.0) * (r["time"] - prev["time"])
        for prev, r in zip(window, window[1:], strict=False)
    )
    return {
        "fps": (window[-1]["frames"] - window[0]["frames"]) / span,
        "trained_fps": trained / span,
        "versions": summary.version,
        "seconds": span,
    }


def training_figures(cfg, warmup: float) -> dict[str, float]:
    """`run_figures`, or NaN figures when the run was too short to measure (a short cap of
    bench/gpu_day.sh): the in-process split and the floor are still measured after it."""
    try:
        return run_figures(cfg, warmup)
    except RuntimeError as err:
        print(f"training run not measured: {err}", flush=True)
        return {"fps": float("nan"), "trained_fps": float("nan")}


def in_process(cfg, device: torch.device, rollouts: int, run_dir: Path) -> dict:
    """The pod in this process: per-frame wall and CPU times, their split, syncs per step."""
    threads = cfg.pod.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    reuse_freed_memory(True)  # the allocator's setting of a pod worker, as it trains
    # the run's seed decides the network's initial weights and the sampled actions too, so
    # two runs with one seed time the same work
    torch.manual_seed(cfg.seed)
    game = make_game(cfg, device, seed=[cfg.seed, 9], threads=threads)
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, device=device)
    ppo = PPO(model, cfg.agent.ppo)
    pool = PolicyPool(run_dir / "pool", cfg.pool)
    pool.maybe_add(0, model.state_dict())  # the untrained policy, as a run has it
    pod = Pod(
        game, ppo, cfg.pipeline.chunk_len, pool=pool, seed=cfg.seed, profile=device.type == "cuda"
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    while not pod.step():  # warm-up: a rollout and an update
        pass
    pod.learn()
    pod.take_counters()
    syncs = HostSyncCounter()
    steps, learned = 0, 0.0
    # seconds collecting and learning, wall and CPU; the clocks are read outside the sync
    # counter, which would count the device synchronisation of a GPU's wall clock
    collect_wall = collect_cpu = learn_wall = learn_cpu = 0.0
    for _ in range(rollouts):
        wall, cpu = wall_time(device), time.process_time()
        with syncs:
            while not pod.step():
                steps += 1
        steps += 1
        collected, collected_cpu = wall_time(device), time.process_time()
        learned += float(pod.learn()["learned_steps"])
        collect_wall += collected - wall
        collect_cpu += collected_cpu - cpu
        learn_wall += wall_time(device) - collected
        learn_cpu += time.process_time() - collected_cpu
    c = pod.take_counters()
    frames = c["frames"]
    agents = game.n_agents
    pool.close()
    wall, cpu = collect_wall + learn_wall, collect_cpu + learn_cpu
    return {
        "pod_wall_ms_per_frame": 1e3 * wall / frames,
        "collect_wall_ms_per_frame": 1e3 * collect_wall / frames,
        "sim_wall_ms_per_frame": 1e3 * c["sim_s"] / frames,
        "act_wall_ms_per_frame": 1e3 * c["act_s"] / frames,
        # a step's work outside the two timed phases: recording, episode ends, statistics
        "rest_wall_ms_per_frame": 1e3 * (collect_wall - c["sim_s"] - c["act_s"]) / frames,
        "learn_wall_ms_per_frame": 1e3 * learn_wall / frames,
        "pod_cpu_ms_per_frame": 1e3 * cpu / frames,
        "collect_cpu_ms_per_frame": 1e3 * collect_cpu / frames,
        "learn_cpu_ms_per_frame": 1e3 * learn_cpu / frames,
        "pod_inprocess_fps": frames / wall,
        "pod_inprocess_trained_fps": learned / agents / wall,
        "syncs_per_step": syncs.total / steps,
        # torch calls per env step (the Warp physics and its kernels not included): on a GPU,
        # each is at least one kernel launch of a few microseconds when nothing is captured
        "torch_ops_per_step": syncs.ops / steps,
        "sync_calls": dict(syncs.calls),
        "threads": threads,
        "rows": pod.game.rows,
        # the device's peak over the warm-up and the measured rollouts, updates included
        "peak_gpu_mib": (
            round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
            if device.type == "cuda"
            else None
        ),
    }


def floor(cfg, device: torch.device, threads: int) -> dict:
    """Raw physics + a bare forward + a bare PPO update, per env frame, at the pod's sizes, on
    `device_clock`."""
    game_cfg = cfg.game_config()
    worlds, T = cfg.pod.worlds, cfg.pipeline.chunk_len
    agents = game_cfg.max_agents
    rows = worlds * agents
    _, clock = device_clock(device)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    _, _, raw_cpu, _, _ = raw_physics(game_cfg, cfg.seed, 200, rng)
    # MuJoCo's batch spreads the worlds over the pod's threads: the CPU time is the same, the
    # wall time on a quiet machine 1/threads of it; the Warp game's physics is not raw MuJoCo
    physics = raw_cpu if device.type == "cpu" else float("nan")
    model = ActorCritic(observation_shapes(game_cfg), cfg.agent.network, device=device)
    shapes = model.layout.shapes
    obs = {k: torch.rand(rows, *s, device=device).round() for k, s in shapes.items()}
    state = torch.zeros(rows, 4, model.config.lstm_dim, device=device)
    starts = torch.zeros(rows, dtype=torch.bool, device=device)
    for _ in range(3):
        model.act_tensors(obs, state, starts)
    start = clock()
    reps = 10
    for _ in range(reps):
        model.act_tensors(obs, state, starts)
    forward = (clock() - start) / reps / worlds
    ppo = PPO(model, cfg.agent.ppo)
    rollout = synthetic_rollout(model, T, rows, cfg.agent.ppo.bptt_len, device)
    ppo.update(rollout)  # warm-up
    start = clock()
    ppo.update(rollout)
    update = (clock() - start) / (T * worlds)
    return {
        "physics_ms_per_frame": 1e3 * physics,
        "forward_ms_per_frame": 1e3 * forward,
        "update_ms_per_frame": 1e3 * update,
        "floor_ms_per_frame": 1e3 * (physics + forward + update),
    }


def synthetic_rollout(model, steps: int, rows: int, bptt_len: int, device):
    """A rollout of random observations and actions of the given size, every step learned."""
    from hns_train.agents.ppo import Rollout

    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=g).to(device)

    nvec = torch.as_tensor(model.action_sizes)
    return Rollout(
        obs={k: rand(steps, rows, *s).round() for k, s in model.layout.shapes.items()},
        actions=(rand(steps, rows, len(nvec)) * nvec.to(device)).long(),
        logp=-rand(steps, rows) * 10,
        values=rand(steps, rows),
        rewards=rand(steps, rows) * 2 - 1,
        episode_start=rand(steps, rows) < 0.01,
        truncated=torch.zeros(steps, rows, dtype=torch.bool, device=device),
        truncated_value=torch.zeros(steps, rows, device=device),
        bootstrap_value=rand(rows),
        lstm_state=torch.zeros(steps // bptt_len, rows, 4, model.config.lstm_dim, device=device),
        learn=torch.ones(steps, rows, dtype=torch.bool, device=device),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quadrant_cpu.yaml"))
    parser.add_argument("--pod-config", default=str(ROOT / "configs" / "quadrant_pod.yaml"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--minutes", type=float, default=3.0, help="each training run")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds left out of a run")
    parser.add_argument("--rollouts", type=int, default=3, help="in-process measurement")
    parser.add_argument("--skip-local", action="store_true", help="no local pipeline run")
    parser.add_argument(
        "--pods", type=int, default=0, help="pods in the run (0: one per core on a CPU, else 1)"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="config overrides, key=value; seed=N seeds the games, the networks and the draws",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    runs = Path(tempfile.mkdtemp(prefix="hns-pod-speed-"))
    common = [
        f"runs_dir={runs}",
        f"stop.minutes={args.minutes}",
        "logging.wandb=disabled",
        "logging.progress=false",
        "eval.n_workers=0",
        f"pipeline.device={args.device}",
    ]
    load = [round(os.getloadavg()[0], 2)]
    local = {}
    if not args.skip_local:
        cfg = load_config(args.config, [*common, "name=local", *args.overrides])
        local = training_figures(cfg, args.warmup)
    load.append(round(os.getloadavg()[0], 2))
    pods = args.pods or ((os.cpu_count() or 1) if device.type == "cpu" else 1)
    cfg = load_config(
        args.pod_config,
        [
            *common,
            "name=pod",
            f"pipeline.n_trainers={pods}",
            *args.overrides,
        ],
    )
    pod_run = training_figures(cfg, args.warmup)
    load.append(round(os.getloadavg()[0], 2))
    here = in_process(cfg, device, args.rollouts, runs / "inprocess")
    low = floor(cfg, device, here["threads"])
    load.append(round(os.getloadavg()[0], 2))

    local_trained = local.get("trained_fps", float("nan"))
    pod_trained = pod_run["trained_fps"]
    clock, _ = device_clock(device)
    pod_ms = here[f"pod_{clock}_ms_per_frame"]  # on the floor's clock
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "clock": clock,
        "host": f"{os.cpu_count()} cores ({platform.machine()})",
        "config": Path(args.config).name,
        "pod_config": Path(args.pod_config).name,
        "overrides": args.overrides,
        "worlds": cfg.pod.worlds,
        "pods": pods,
        "local_fps": round(local.get("fps", float("nan")), 1),
        "local_trained_fps": round(local_trained, 1),
        "pod_fps": round(pod_run["fps"], 1),
        "pod_trained_fps": round(pod_trained, 1),
        "pod_over_local": round(pod_trained / local_trained, 3) if local else None,
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in here.items()},
        "pod_ms_per_frame": round(pod_ms, 4),
        **{k: round(v, 4) for k, v in low.items()},
        "pod_over_floor": round(pod_ms / low["floor_ms_per_frame"], 3),
        "physics_share": round(here["sim_wall_ms_per_frame"] / here["pod_wall_ms_per_frame"], 3),
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load": load,
    }
    r, shown = result, "CPU" if clock == "cpu" else "wall"
    print(f"{'':32}{'local pipeline':>16}{'pod':>12}")
    print(f"{'env frames/s':32}{r['local_fps']:>16}{r['pod_fps']:>12}")
    print(f"{'trained frames/s':32}{r['local_trained_fps']:>16}{r['pod_trained_fps']:>12}")
    print(
        f"pod per env frame, wall ms: {r['pod_wall_ms_per_frame']} = collect "
        f"{r['collect_wall_ms_per_frame']} (sim {r['sim_wall_ms_per_frame']} + act "
        f"{r['act_wall_ms_per_frame']} + the rest {r['rest_wall_ms_per_frame']}) + learn "
        f"{r['learn_wall_ms_per_frame']}"
    )
    print(
        f"pod per env frame, CPU ms (this process, all its threads): "
        f"{r['pod_cpu_ms_per_frame']} = collect {r['collect_cpu_ms_per_frame']} + learn "
        f"{r['learn_cpu_ms_per_frame']}"
    )
    print(
        f"floor per env frame, {shown} ms: "
        f"{r['floor_ms_per_frame']} = physics {r['physics_ms_per_frame']} + forward "
        f"{r['forward_ms_per_frame']} + update {r['update_ms_per_frame']}; pod / floor "
        f"{r['pod_over_floor']} (pod {r['pod_ms_per_frame']} {shown} ms)"
    )
    print(
        f"host syncs per env step: {r['syncs_per_step']} {r['sync_calls']}; "
        f"torch calls per env step: {r['torch_ops_per_step']}"
    )
    print(
        f"physics share of the pod's wall time: {r['physics_share']}; "
        f"peak GPU memory: {r['peak_gpu_mib']} MiB"
    )
    print("POD_SPEED " + json.dumps(result))


if __name__ == "__main__":
    main()
