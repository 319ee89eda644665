"""Pods at many ranks on one host: what grows with N.

For each N of `--ranks` (default 1 2 4 8 16) it trains `--config` (default
configs/quadrant_pod.yaml with `pod.worlds=16 agent.ppo.epochs=1`, the settings of the first
many-rank figures in docs/benchmarks.md; a config written by `hns-train plan` checks its
projection) with `pipeline.backend=pod`, `pipeline.n_trainers=N`, one thread per
pod, for `--minutes`, oversubscribed past the cores on purpose, and measures:
- total trained frames/s (bench/pod_speed.py's `metrics_figures`: from `--warmup` seconds after
  the first update to the end);
- each rank's process CPU per env frame, split into collecting its rollout, PPO, the ranks'
  agreement and gradient sums (`sync`), rank 0's publishing / checkpoints / snapshots
  (`duties`) and the rest (heartbeats, control), from the pods' heartbeats
  (distributed/pod_worker.py) summed over the run per rank by the controller;
- memory per rank: the largest PSS and RSS seen (/proc/PID/smaps_rollup, sampled every second),
  and the controller's (this process); these figures are `hns_train.plan`'s, which calibrates
  the planner with the same run at one rank per core (up to 4);
- seconds from the run's start to every rank's hello and to the first update, and the env
  frames/s between the first and the last update (`env_fps_between_updates`, as the planner's
  calibration measures its wall efficiency);
- a sum micro-benchmark: N spawned processes summing a tensor the size of the model's gradient
  through the group the ranks use (distributed/ddp.py), once through gloo's all-reduce (ranks on
  several hosts) and once through shared memory (distributed/host_sums.py: ranks on one host,
  as here): median wall ms and mean process CPU ms of a rank per sum, over `--reps`; and the
  same for a sum of `SMALL_NUMEL` floats (`*_small_*`: the agreement's flags, the update's
  moments). `--sums-only` measures these alone, without the training runs.

With `--ray-nodes K` the ranks run on a local Ray cluster of K simulated nodes (ceil(N/K) logical
CPUs each, one per rank, `ray.cluster_utils.Cluster`) through the Ray launcher, so their
agreement and gradient sums cross between nodes through gloo over TCP (loopback, not a
network), as pods on several hosts do.

Per-N table, then the last line `POD_SCALE {json}`: per N (`ranks`) the figures above, and
`fps_n16_over_n2`, `sync_share_n16_over_n2` (the agreement-and-sums share of a rank's CPU at the
largest N over N=2) and `resident_gib`/`pss_gib` of the largest N's ranks and the controller.
Run it on a quiet machine: trained frames/s is wall-clock; the CPU split is not.

    python bench/pod_scale.py --minutes 3 --ranks 1 2 4 8 16 [--ray-nodes 2] [key=value ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pod_speed import metrics_figures  # noqa: E402
from hns_train.agents.policy import ActorCritic  # noqa: E402
from hns_train.config import load_config  # noqa: E402
from hns_train.distributed.ddp import make_store, rendezvous_info  # noqa: E402
from hns_train.distributed.shared_rows import shared_folder  # noqa: E402
from hns_train.envs.contract import observation_shapes  # noqa: E402
from hns_train.plan import CPU_PARTS, run_pods  # noqa: E402

DEFAULT_OVERRIDES = ["pod.worlds=16", "agent.ppo.epochs=1"]
SMALL_NUMEL = 8


def _sum_rank(rank: int, info: dict, numel: int, reps: int, out) -> None:
    from hns_train.distributed.ddp import DataParallel

    torch.set_num_threads(1)
    group = DataParallel(rank, info, torch.device("cpu"), "gloo", timeout_s=300)
    try:
        grad = torch.randn(numel)
        walls, cpus = [], []
        for i in range(reps + 2):  # two to warm up
            group.agree(stop=False, ready=True)  # start together: the sum alone is timed
            start, cpu = time.perf_counter(), time.process_time()
            group.all_sum(grad)
            if i >= 2:
                walls.append(time.perf_counter() - start)
                cpus.append(time.process_time() - cpu)
        out.put((rank, statistics.median(walls), statistics.mean(cpus)))
    finally:
        group.close()


def sum_ms(n: int, numel: int, reps: int, shared: bool) -> tuple[float, float]:
    """(median wall ms, mean CPU ms of a rank) of one sum of `numel` float32 over `n` spawned
    ranks: through shared memory (`shared`) or gloo's all-reduce."""
    if n < 2:
        return 0.0, 0.0
    store, port = make_store("127.0.0.1", timeout_s=300)
    folder = shared_folder()  # as the controller makes for a run
    info = rendezvous_info("127.0.0.1", port, n, generation=0, folder=folder if shared else None)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_sum_rank, args=(r, info, numel, reps, out)) for r in range(n)]
    for p in procs:
        p.start()
    try:
        figures = [out.get(timeout=600) for _ in procs]
        wall = next(w for rank, w, _ in figures if rank == 0)
        return 1e3 * wall, 1e3 * statistics.mean(c for _, _, c in figures)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
        del store


@contextlib.contextmanager
def launcher_settings(n: int, nodes: int):
    """The launcher overrides for `n` ranks: the local launcher, or a local Ray cluster of
    `nodes` nodes with a CPU per rank, shut down after the run."""
    if not nodes:
        yield ["pipeline.launcher=local"]
        return
    import ray
    from ray.cluster_utils import Cluster

    per_node = -(-n // nodes)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": per_node, "include_dashboard": False}
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=per_node)
        yield [
            "pipeline.launcher=ray",
            f"pipeline.ray_address={cluster.address}",
            "pipeline.ray_trainer_cpus=1",
        ]
    finally:
        ray.shutdown()
        cluster.shutdown()


def run_at(n: int, args, runs: Path) -> dict:
    """One run of `n` pod ranks: its figures (module docstring)."""
    with launcher_settings(n, args.ray_nodes) as launcher:
        return _run_at(n, args, runs, launcher)


def _run_at(n: int, args, runs: Path, launcher: list[str]) -> dict:
    cfg = load_config(
        args.config,
        [
            f"runs_dir={runs}",
            f"name=n{n}",
            f"stop.minutes={args.minutes}",
            "logging.wandb=disabled",
            "logging.progress=false",
            "eval.n_workers=0",
            "pipeline.device=cpu",
            *launcher,
            "pipeline.backend=pod",
            f"pipeline.n_trainers={n}",
            "pod.threads=1",
            *args.overrides,
        ],
    )
    load = os.getloadavg()[0]
    summary, ranks = run_pods(cfg)
    try:
        rates = metrics_figures(cfg, summary, args.warmup)
    except RuntimeError as err:  # too short to measure: the rest is still measured
        print(f"N={n}: trained frames/s not measured: {err}", flush=True)
        rates = {"fps": float("nan"), "trained_fps": float("nan")}
    return {
        "trained_fps": round(rates["trained_fps"], 1),
        "fps": round(rates["fps"], 1),
        "versions": summary.version,
        "restarts": summary.restarts,
        **ranks,
        "load": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        help=f"default: configs/quadrant_pod.yaml with {' '.join(DEFAULT_OVERRIDES)} before the "
        "overrides",
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--minutes", type=float, default=3.0, help="each run")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds left out of a run")
    parser.add_argument("--reps", type=int, default=20, help="all-reduces timed per N")
    parser.add_argument(
        "--ray-nodes", type=int, default=0, help="run the ranks on a local Ray cluster of K nodes"
    )
    parser.add_argument("--sums-only", action="store_true", help="only the sum micro-benchmark")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    if args.config is None:
        args.config = str(ROOT / "configs" / "quadrant_pod.yaml")
        args.overrides = [*DEFAULT_OVERRIDES, *args.overrides]
    if any(n < 1 for n in args.ranks):
        parser.error(f"--ranks {args.ranks}: every N must be >= 1")
    if args.ray_nodes < 0 or args.ray_nodes > min(args.ranks, default=1):
        parser.error(f"--ray-nodes {args.ray_nodes}: 0 (local) to the smallest N of --ranks")
    runs = Path(tempfile.mkdtemp(prefix="hns-pod-scale-"))
    cfg = load_config(args.config, args.overrides)
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, device="cpu")
    numel = sum(p.numel() for p in model.parameters())
    del model
    per_n = {}
    for n in args.ranks:
        per_n[n] = {} if args.sums_only else run_at(n, args, runs)
        for name, shared in (("allreduce", False), ("shared_sum", True)):
            for size, suffix in ((numel, ""), (SMALL_NUMEL, "_small")):
                wall, cpu = sum_ms(n, size, args.reps, shared)
                per_n[n][f"{name}{suffix}_ms"] = round(wall, 3)
                per_n[n][f"{name}{suffix}_cpu_ms"] = round(cpu, 3)
        print(f"N={n}: {json.dumps(per_n[n])}", flush=True)
    if args.sums_only:
        print("POD_SCALE " + json.dumps({"sums_only": True, "ranks": per_n}))
        return
    top = max(per_n)

    def ratio(key: str) -> float | None:
        if 2 not in per_n or top <= 2 or not per_n[2][key]:
            return None
        return round(per_n[top][key] / per_n[2][key], 3)

    result = {
        "host": f"{os.cpu_count()} cores ({platform.machine()}, {platform.processor() or '?'})",
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "config": Path(args.config).name,
        "launcher": f"ray, {args.ray_nodes} local nodes" if args.ray_nodes else "local",
        "overrides": args.overrides,
        "minutes": args.minutes,
        "gradient_numel": numel,
        "ranks": per_n,
        f"fps_n{top}_over_n2": ratio("trained_fps"),
        f"sync_share_n{top}_over_n2": ratio("sync_share"),
        f"resident_gib_n{top}": per_n[top]["resident_gib"],
        f"pss_gib_n{top}": per_n[top]["pss_gib"],
    }
    cols = ("trained_fps", "cpu_ms_per_frame", *(f"{p}_cpu_ms_per_frame" for p in
            (*CPU_PARTS, "rest")), "sync_share", "pss_mib_per_rank", "rss_mib_per_rank",
            "resident_gib", "last_hello_s", "first_update_s", "allreduce_ms", "allreduce_cpu_ms",
            "shared_sum_ms", "shared_sum_cpu_ms")  # fmt: skip
    short = [c.replace("_cpu_ms_per_frame", "").replace("_per_rank", "") for c in cols]
    print("N".rjust(4) + "".join(s.rjust(max(len(s) + 2, 10)) for s in short))
    for n, row in per_n.items():
        cells = (str(row[c]).rjust(max(len(s) + 2, 10)) for c, s in zip(cols, short, strict=True))
        print(str(n).rjust(4) + "".join(cells))
    print("(CPU columns: ms of a rank's process CPU per env frame; memory: peak per rank)")
    print("POD_SCALE " + json.dumps(result))


if __name__ == "__main__":
    main()
