"""`hns-train plan` (`python -m hns_train.plan`): how to lay out a run on a machine and how long
each phase of the quadrant game would take there.

It owns the sizing of a run: a calibration (about a minute: real pods, `pipeline.backend=pod`,
one thread each and one per core up to `CALIBRATION_RANKS`, so that they share caches and memory
as a full node's ranks do, trained through the controller exactly as a run trains; their process
CPU per env frame split into collecting the rollout, which holds the physics and the act
forward, and PPO; and their wall-clock rate, whose ratio to the CPU's rate is what the
controller, the OS and the ranks' waits take),
the machine's cores, GPUs and memory (detected, or given by `--cores/--gpus/--nodes/--memory`),
the layout it recommends (one pod per core as DDP ranks of one policy, configs/quadrant_node.yaml;
as many as memory allows), the config file written for it, and the projection: trained
frames/s and the hours to each phase at the paper's sample counts
(`hns_train.eval.baselines.load_quadrant_onsets`). Every printed figure says whether it was
measured here or projected, and on what assumption.

What a run of N pod ranks measures per rank (`rank_figures`, `RankWatch`: CPU split, peak PSS and
RSS per process, seconds to the first update) is the same code here and in bench/pod_scale.py,
which checks the projection against a real run at N ranks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from hns_train.atomic_file import atomic_write_bytes
from hns_train.config import CONFIG_DIR, ConfigError, find_config, load_config
from hns_train.eval.baselines import load_baselines, load_quadrant_onsets

PROG = "hns-train plan"
BASE_CONFIG = "quadrant_node.yaml"
CPU_PARTS = ("collect", "learn", "sync", "duties")
GIB = 2**30
CALIBRATION_S = 30.0  # the calibration run measures this long after its first update
CALIBRATION_LIMIT_MIN = 5.0  # and gives up after this long, start-up included
CALIBRATION_RANKS = 4  # at most this many ranks calibrate (one per core of this machine)
CONTROLLER_GIB = 1.0  # memory kept for the controller process (measured ~0.5-0.8 GiB here)
GPU_FEED_CORES = 2  # cores left to feed a GPU (as the pipeline's projection, docs/benchmarks.md)
GPU_ENVS_PER_ACTOR = 16  # an actor's worlds in the GPU layout, in a ring of 2 (quadrant.yaml)
GPU_BATCH_CHUNKS = 288  # chunks of 8 worlds x 4 agents x 80 steps per GPU: >= 64k chunks of 10


# ----------------------------------------------------------------------------- measuring ranks


def process_memory(pid: int) -> tuple[int, int] | None:
    """(PSS, RSS) bytes of a live process (/proc/PID/smaps_rollup); None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = {}
    for line in text.splitlines()[1:]:
        name, _, rest = line.partition(":")
        if rest.split():
            kib[name] = int(rest.split()[0])
    return kib.get("Pss", 0) * 1024, kib.get("Rss", 0) * 1024


class RankWatch:
    """While a controller runs: every second, the peak PSS and RSS of each of its workers and of
    this process (the controller's, "controller"), and when the first update came; with
    `stop_after_s`, it stops the run that long after the first update (a measurement that
    does not depend on how long the start took)."""

    def __init__(self, controller, every_s: float = 1.0, stop_after_s: float | None = None):
        self.controller, self.every_s, self.stop_after_s = controller, every_s, stop_after_s
        self.peak: dict[str, tuple[int, int]] = {}
        self.peak_total = (0, 0)  # the largest sums over the processes at one sample
        # (seconds, version) at the first update seen and at the newest
        self.first: tuple[float, int] | None = None
        self.newest: tuple[float, int] | None = None
        self.start = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def first_update_s(self) -> float | None:
        """Seconds from the start to the first update seen; None before it."""
        return None if self.first is None else self.first[0]

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            now = time.monotonic() - self.start
            version = self.controller.version
            if version >= 1 and self.first is None:
                self.first = (now, version)
            if version >= 1 and (self.newest is None or version > self.newest[1]):
                self.newest = (now, version)
            after, first = self.stop_after_s, self.first_update_s
            if after is not None and first is not None and now >= first + after:
                self.controller.request_stop(f"measured {after:g} s after the first update")
            pids = {n: s.pid for n, s in list(self.controller.workers.items()) if s.pid}
            pids["controller"] = os.getpid()
            total = [0, 0]
            for name, pid in pids.items():
                seen = process_memory(pid)
                if seen is not None:
                    old = self.peak.get(name, (0, 0))
                    self.peak[name] = (max(old[0], seen[0]), max(old[1], seen[1]))
                    total = [total[0] + seen[0], total[1] + seen[1]]
            self.peak_total = (max(self.peak_total[0], total[0]), max(self.peak_total[1], total[1]))

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def env_fps(self, frames_per_version: int) -> float | None:
        """Env frames/s of every rank together from the first update to the newest (each
        version: every rank's rollout of `frames_per_version` frames in all), None before a
        second update."""
        if self.first is None or self.newest[0] <= self.first[0]:
            return None
        (t0, v0), (t1, v1) = self.first, self.newest
        return (v1 - v0) * frames_per_version / (t1 - t0)


def rank_figures(controller, watch: RankWatch) -> dict:
    """What the ranks (trainer workers) of a finished run did, per env frame and per rank: their
    process CPU split, memory, start-up and first update."""
    cfg = controller.cfg
    ranks = [s for s in controller.workers.values() if s.spec.kind == "trainer"]
    frames = max(sum(s.totals["frames"] for s in ranks), 1)
    agents = cfg.game_config().max_agents
    # A run stops inside a rollout: its frames are collected but not learned from. So the
    # update's cost is per frame of the rollouts trained on (each update: one whole rollout).
    updates = sum(s.totals["steps"] for s in ranks)
    rollout = cfg.pod.worlds * cfg.pipeline.chunk_len  # a rank's env frames per update
    trained = max(updates * rollout, 1)
    # the loop's CPU: building the learner, game and pod at the start is reported apart
    setup = sum(s.totals["setup_cpu_s"] for s in ranks)
    parts = {p: sum(s.totals[f"{p}_cpu_s"] for s in ranks) for p in CPU_PARTS}
    parts["rest"] = max(sum(s.totals["cpu_s"] for s in ranks) - setup - sum(parts.values()), 0)
    per_frame = {p: v / (trained if p in ("learn", "sync") else frames) for p, v in parts.items()}
    cpu = sum(per_frame.values())  # per env frame of a rollout collected and learned from
    mem = [watch.peak.get(s.spec.name, (0, 0)) for s in ranks]
    ctrl = watch.peak.get("controller", (0, 0))
    hellos = [s.hello_s for s in ranks if s.hello_s is not None]
    wall = {p: sum(s.totals[f"{p}_s"] for s in ranks) for p in ("sim", "act", "learn", "sync")}
    return {
        "cpu_ms_per_frame": round(1e3 * cpu, 3),
        **{f"{p}_cpu_ms_per_frame": round(1e3 * v, 3) for p, v in per_frame.items()},
        **{f"{p}_wall_ms_per_frame": round(1e3 * v / frames, 3) for p, v in wall.items()},
        "sync_share": round(per_frame["sync"] / max(cpu, 1e-12), 4),
        # the learning policy's share of the agent-steps (the rest are pool opponents')
        "trained_share": round(sum(s.totals["samples"] for s in ranks) / trained / agents, 4),
        "pss_mib_per_rank": round(sum(m[0] for m in mem) / max(len(mem), 1) / 2**20, 1),
        "rss_mib_per_rank": round(sum(m[1] for m in mem) / max(len(mem), 1) / 2**20, 1),
        "controller_pss_mib": round(ctrl[0] / 2**20, 1),
        "controller_rss_mib": round(ctrl[1] / 2**20, 1),
        "pss_gib": round((sum(m[0] for m in mem) + ctrl[0]) / GIB, 2),
        "resident_gib": round((sum(m[1] for m in mem) + ctrl[1]) / GIB, 2),
        "setup_cpu_s_per_rank": round(setup / max(len(ranks), 1), 2),
        # the most the ranks and the controller held at one time (sampled every second)
        "peak_total_pss_gib": round(watch.peak_total[0] / GIB, 2),
        "peak_total_rss_gib": round(watch.peak_total[1] / GIB, 2),
        "last_hello_s": round(max(hellos), 1) if hellos else None,
        "first_update_s": (
            round(watch.first_update_s, 1) if watch.first_update_s is not None else None
        ),
        "env_fps_between_updates": (
            None if (fps := watch.env_fps(len(ranks) * rollout)) is None else round(fps, 1)
        ),
    }


def run_pods(cfg, stop_after_s: float | None = None) -> tuple[object, dict]:
    """Train `cfg` (pods) to its stop, or `stop_after_s` after its first update; its summary
    and `rank_figures`."""
    from hns_train.distributed.controller import Controller  # torch: only when measuring

    controller = Controller(cfg)
    watch = RankWatch(controller, stop_after_s=stop_after_s)
    try:
        summary = controller.run()
    finally:
        watch.close()
    return summary, rank_figures(controller, watch)


# ----------------------------------------------------------------------------- the machine


@dataclass
class Machine:
    cores: int
    gpus: int
    nodes: int
    memory_gib: float
    detected: bool  # this machine, not one described on the command line

    def label(self) -> str:
        gpu = f" + {self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else ""
        node = f" x {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{self.cores} cores{gpu}, {self.memory_gib:.0f} GiB{node}"


def detect() -> Machine:
    """This machine: usable cores, GPUs torch sees, available memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = 0
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                mem = int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return Machine(int(cores or 1), gpus, 1, round(mem, 1), True)


# ----------------------------------------------------------------------------- calibration


@dataclass
class Calibration:
    """A pod rank's costs on this machine (measured), per env frame of process CPU, with
    `ranks` ranks running at once."""

    ranks: int
    cpu_ms: float  # everything the rank process spent per env frame
    collect_ms: float  # simulation, the act forward and recording
    sim_share: float  # the physics' share of the collection's wall time
    learn_ms: float  # PPO
    trained_share: float  # the learning policy's share of the agent-steps
    pss_gib: float  # one rank's memory (PSS), the rollout and model included
    # the ranks' env frames/s over their CPU's rate (ranks x 1000 / cpu_ms): what the controller,
    # the OS and the ranks' waits for each other leave them
    wall_efficiency: float
    seconds: float
    load: tuple[float, float]

    @property
    def per_core_fps(self) -> float:
        """Env frames/s a core gives as a rank of a run: CPU rate x wall efficiency."""
        return 1e3 / self.cpu_ms * self.wall_efficiency

    @property
    def sim_ms(self) -> float:
        return self.collect_ms * self.sim_share


def calibrate(cfg, seconds: float, ranks: int = 1) -> Calibration:
    """`ranks` real pod ranks (one thread each) trained through the controller until `seconds`
    after their first update (at most `CALIBRATION_LIMIT_MIN` in all): a rank's CPU per env
    frame, split, its memory, and the ranks' wall-clock rate against their CPU's."""
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hns-plan-") as runs:
        one = _with(cfg, [
            f"runs_dir={runs}", "name=calibration", f"pipeline.n_trainers={ranks}",
            "pipeline.launcher=local", "pod.threads=1", f"stop.minutes={CALIBRATION_LIMIT_MIN}",
            "stop.versions=0", "eval.n_workers=0", "logging.wandb=disabled",
            "logging.progress=false",
        ])  # fmt: skip
        summary, fig = run_pods(one, stop_after_s=seconds)
    if not summary.frames or summary.version < 1:
        raise RuntimeError(
            f"calibration: no update in {CALIBRATION_LIMIT_MIN:g} minutes (the machine is too "
            f"busy or too slow for {cfg.pod.worlds} worlds: fewer with pod.worlds=N)"
        )
    collect = fig["collect_cpu_ms_per_frame"]
    collect_wall = fig["sim_wall_ms_per_frame"] + fig["act_wall_ms_per_frame"]
    cpu_fps = ranks * 1e3 / fig["cpu_ms_per_frame"]
    wall_fps = fig["env_fps_between_updates"]
    return Calibration(
        ranks=ranks,
        cpu_ms=fig["cpu_ms_per_frame"],
        collect_ms=collect,
        sim_share=fig["sim_wall_ms_per_frame"] / max(collect_wall, 1e-9),
        learn_ms=fig["learn_cpu_ms_per_frame"],
        trained_share=fig["trained_share"],
        pss_gib=fig["pss_mib_per_rank"] / 1024,
        wall_efficiency=min(wall_fps / cpu_fps, 1.0) if wall_fps else 1.0,
        seconds=seconds,
        load=(round(load0, 2), round(os.getloadavg()[0], 2)),
    )


def _with(cfg, overrides: list[str]):
    """`cfg` with `overrides` applied (through its dict, so every check runs again)."""
    path = Path(tempfile.mkstemp(suffix=".yaml", prefix="hns-plan-")[1])
    try:
        path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        return load_config(path, overrides)
    finally:
        path.unlink()


# ----------------------------------------------------------------------------- the plan


@dataclass
class Plan:
    machine: Machine
    backend: str
    ranks: int
    settings: list[str]  # the layout's, then the user's overrides
    env_fps: float
    trained_fps: float
    batch_chunks10: float  # the update batch in chunks of 10 agent-steps
    how: str  # measured / projected, and on what
    notes: list[str]


def plan_for(machine: Machine, cal: Calibration, cfg, overrides: list[str]) -> Plan:
    """The layout and projected rates for `machine`, from this machine's calibration."""
    game = cfg.game_config()
    rows_per_world = game.max_agents * cfg.pipeline.chunk_len
    notes = []
    by_memory = int((machine.memory_gib - CONTROLLER_GIB) // max(cal.pss_gib, 1e-3))
    if machine.gpus:
        # the pipeline: actors step the game on the cores, the GPU acts and trains
        cores = max(machine.cores - GPU_FEED_CORES, 1) * machine.nodes
        env_fps = cores * 1e3 / max(cal.collect_ms, 1e-9) * cal.wall_efficiency
        actors = max(machine.cores - GPU_FEED_CORES, 1)
        # a chunk: one column per agent of an actor's group of worlds (envs / ring), chunk_len
        # steps; GPU_BATCH_CHUNKS of them are the paper's 64k chunks of 10 steps
        columns = GPU_ENVS_PER_ACTOR // 2 * game.max_agents
        settings = [
            "pipeline.backend=c", "pipeline.device=cuda", f"pipeline.n_actors={actors}",
            f"pipeline.envs_per_actor={GPU_ENVS_PER_ACTOR}", "pipeline.ring_size=2",
            "pipeline.n_policy_workers=1", f"pipeline.n_trainers={machine.gpus}",
            f"pipeline.batch_chunks={GPU_BATCH_CHUNKS * machine.gpus}",
            f"pipeline.sample_buffer_chunks={2 * GPU_BATCH_CHUNKS}",
        ]  # fmt: skip
        how = (
            f"projected: {cores} cores stepping the game and collecting at this machine's "
            f"measured {cal.collect_ms:.2f} CPU ms per frame (physics, observations and the act "
            "forward, which the GPU would take over: a cautious figure) and its measured wall "
            f"efficiency {cal.wall_efficiency:.2f}; the GPU assumed to "
            "keep up with every forward and PPO update (not calibrated: never measured)"
        )
        notes.append(
            "a GPU pod (pipeline.backend=pod pipeline.device=cuda, MuJoCo Warp, thousands of "
            "worlds) may be faster; its rate was never measured here: bench/gpu_day.sh measures it"
        )
        ranks = machine.gpus
        batch = (
            GPU_BATCH_CHUNKS * machine.gpus * columns * cfg.pipeline.chunk_len
            * cal.trained_share / 10
        )  # fmt: skip
    else:
        per_node = min(machine.cores, max(by_memory, 1))
        if per_node < machine.cores:
            notes.append(
                f"memory: {per_node} ranks per node fit in {machine.memory_gib:.0f} GiB at "
                f"{cal.pss_gib:.2f} GiB each (measured), not one per core"
            )
        ranks = per_node * machine.nodes
        env_fps = ranks * cal.per_core_fps
        launcher = "ray" if machine.nodes > 1 else "local"  # one Ray cluster over the nodes
        settings = [
            "pipeline.backend=pod", f"pipeline.launcher={launcher}", f"pipeline.n_trainers={ranks}",
            f"pod.worlds={cfg.pod.worlds}", "pod.threads=1",
        ]  # fmt: skip
        how = (
            f"projected: {ranks} ranks x this machine's measured {cal.cpu_ms:.2f} CPU ms per "
            f"frame of a pod rank and wall efficiency {cal.wall_efficiency:.2f} "
            f"({cal.ranks} calibrating at once), one rank per core (the agreement and gradient "
            "sums assumed not to grow with the ranks, as bench/pod_scale.py checks on one host)"
        )
        if machine.nodes > 1:
            how += "; across nodes the gradient sums cross the network (never measured)"
        batch = ranks * cfg.pod.worlds * rows_per_world * cal.trained_share / 10
    paper = next(r for r in load_baselines().rapid.runs if r.batch_chunks)
    if batch < paper.batch_chunks:
        notes.append(
            f"update batch {batch:,.0f} chunks of {paper.chunk_length} steps, under the "
            f"paper's {paper.batch_chunks:,} (it learned every phase with 32k, not with 8k or "
            "16k): raise pod.worlds where memory allows"
        )
    mine = {s.partition("=")[0] for s in settings}
    settings += [o for o in overrides if o.partition("=")[0] not in mine]
    return Plan(
        machine, "pod" if not machine.gpus else "pipeline (c actors, GPU)", ranks, settings,
        env_fps, env_fps * cal.trained_share, batch, how, notes,
    )  # fmt: skip


def phase_hours(env_fps: float) -> list[tuple[str, float, float]]:
    """(phase, frames, hours) to each quadrant onset at `env_fps` env frames/s."""
    return [(o.phase, o.frames, o.frames / env_fps / 3600) for o in load_quadrant_onsets()]


def write_config(plan: Plan, base: str, path: Path) -> None:
    """A config for `plan`: the calibrated config `base` with the plan's settings."""
    data: dict = {"base": base, "name": f"plan_{plan.ranks}"}
    for setting in plan.settings:
        key, _, value = setting.partition("=")
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    text = f"# Written by `{PROG}` for {plan.machine.label()}: {plan.how}.\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (text + yaml.safe_dump(data, sort_keys=False)).encode())


def show(plan: Plan, cal: Calibration) -> list[str]:
    lines = [
        f"machine: {plan.machine.label()} ({'detected' if plan.machine.detected else 'given'})",
        f"  backend: {plan.backend}; settings: {' '.join(plan.settings)}",
        f"  update batch: {plan.batch_chunks10:,.0f} trained chunks of 10 steps",
        f"  env frames/s {plan.env_fps:,.0f}, trained frames/s {plan.trained_fps:,.0f} "
        f"({plan.how})",
    ]
    for phase, frames, hours in phase_hours(plan.env_fps):
        lines.append(f"  {phase:<14} from {frames / 1e6:,.0f} M frames: {hours:,.1f} h")
    lines += [f"  note: {n}" for n in plan.notes]
    return lines


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Calibrate here (about a minute), then print the layout, a config file and "
        "the projected hours to each quadrant phase, for this machine or the ones described.",
    )
    parser.add_argument("--config", default=BASE_CONFIG, help="the settings to calibrate")
    parser.add_argument("--cores", type=int, nargs="+", help="cores per node (default: here)")
    parser.add_argument(
        "--gpus", type=int, nargs="+", help="GPUs per node (default: here); with --cores, each pair"
    )
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--memory", type=float, help="GiB per node (default: available here)")
    parser.add_argument("--seconds", type=float, default=CALIBRATION_S, help="calibration run")
    parser.add_argument(
        "--out", type=Path, default=Path("plan.yaml"), help="config written for the first machine"
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    for name in ("nodes", "seconds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name}={getattr(args, name)} must be > 0")
    if args.cores and min(args.cores) < 1:
        parser.error(f"--cores {args.cores}: every count must be >= 1")
    if (args.gpus and min(args.gpus) < 0) or (args.memory is not None and args.memory <= 0):
        parser.error("--gpus must be >= 0 and --memory > 0 (GiB)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        cfg = load_config(args.config, ["pipeline.backend=pod", *args.overrides])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    here = detect()
    ranks = min(here.cores, CALIBRATION_RANKS)
    print(f"calibrating for {args.seconds:.0f} s: {ranks} pod rank{'s' if ranks > 1 else ''} "
          f"of {Path(args.config).name} ({cfg.pod.worlds} worlds, one thread each) on "
          f"{here.label()}", flush=True)  # fmt: skip
    try:
        cal = calibrate(cfg, args.seconds, ranks)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(
        f"measured: {cal.cpu_ms:.3f} CPU ms per env frame per rank (collect {cal.collect_ms:.3f}"
        f", physics ~{cal.sim_ms:.3f} of it; learn {cal.learn_ms:.3f}) = "
        f"{1e3 / cal.cpu_ms:,.0f} env frames/s per core of CPU; the {cal.ranks} ranks ran at "
        f"{cal.wall_efficiency:.2f} of that rate on the clock; trained share "
        f"{cal.trained_share:.2f}"
        f"; {cal.pss_gib:.2f} GiB per rank (PSS); load {cal.load[0]}-{cal.load[1]}"
    )
    machines = [
        Machine(
            cores,
            gpus,
            args.nodes,
            here.memory_gib if args.memory is None else args.memory,
            args.cores is None and args.gpus is None and args.nodes == 1,
        )
        for gpus in (args.gpus or [here.gpus])
        for cores in (args.cores or [here.cores])
    ]
    plans = [plan_for(m, cal, cfg, args.overrides) for m in machines]
    for plan in plans:
        print("\n".join(show(plan, cal)))
    onsets = load_quadrant_onsets()
    print(
        "phase onsets (an assumption: that this run learns per frame as the paper's did): "
        + ", ".join(f"{o.phase} {o.episodes / 1e6:g} M episodes" for o in onsets)
        + f" of {onsets[0].steps_per_episode} steps; source: {onsets[0].source.cite()}"
    )
    shipped = find_config(args.config).resolve().is_relative_to(CONFIG_DIR.resolve())
    base = Path(args.config).name if shipped else str(Path(args.config).resolve())
    write_config(plans[0], base, args.out)
    print(f"config written: {args.out} (train it: hns-train --config {args.out})")
    if plans[0].backend == "pod":
        print(
            f"check the projection here: python bench/pod_scale.py --config {args.out} "
            f"--ranks {plans[0].ranks}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
