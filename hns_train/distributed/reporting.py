"""What a run reports: metrics records, wandb, emergent-phase onsets and the progress bar.

The controller supervises; a `RunLog` turns what the workers report into the run's record.
Every `logging.every_s` it writes one `"kind": "train"` record to `metrics.jsonl` (and to wandb
when it is on) on the paper's axes (episodes, env frames, wall-clock hours, optimisation steps)
with the window's mean episode statistics, the trainer's loss statistics, queue depths, CPU cost
per unit of work (`WorkCosts`) and the eval workers' ratings. Each record goes through the phase
detector (`hns_train.eval.phases`); an onset is written as a `"kind": "phase"` record. On resume
the detector replays the records the controller read, so the phases already reached carry over.

The progress bar counts env frames from the start and is redrawn by the controller every few
seconds, so it moves in a terminal before the first optimisation step.
"""

from __future__ import annotations

import logging
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hns_train.config import RunConfig
from hns_train.envs.tasks import stat_keys
from hns_train.jsonl import append_record

log = logging.getLogger(__name__)
CPU_KINDS = ("actor", "policy", "trainer")
POD_PHASES = ("sim", "act", "learn")
# a pod's process CPU time split (pod_worker.py); what is left of its cpu_s is the rest
POD_CPU = ("collect", "learn", "sync", "duties", "setup")


class RunLog:
    """Metrics records, wandb, phase onsets and the progress bar of one run."""

    def __init__(self, cfg: RunConfig, run_dir: Path, hardware: dict, earlier: list[dict]) -> None:
        from hns_train.eval.phases import PhaseDetector, PhaseOnset

        self.cfg = cfg
        self.run_dir = run_dir
        self.hardware = hardware
        self.metrics_path = run_dir / "metrics.jsonl"
        self.last: dict = {}  # the newest record
        onsets = [PhaseOnset.from_record(r) for r in earlier if r.get("kind") == "phase"]
        self.phases = PhaseDetector.from_records(earlier, onsets)
        self.phases_reached = list(self.phases.fired)
        self.bar = None
        self.logger = None
        self.costs = WorkCosts(cfg.game_config().max_agents)
        self.stat_keys = stat_keys(cfg.game_config())  # heartbeats' `stat_sums`, in this order
        self.eval_matches = 0  # rated matches reported by eval workers
        self.eval_latest: dict = {}  # newest eval heartbeat carrying a rating
        self._stats = np.zeros(len(self.stat_keys))  # episode statistics summed over the window
        self._episodes = 0  # the window's frames are the costs' (`costs.frames`)

    def open(self, frames: int) -> None:
        lg = self.cfg.logging
        if lg.progress:
            self.bar = ProgressBar(self.cfg, "env frames", frames)
        if lg.wandb != "disabled":
            from hns_train.distributed.wandb_logger import open_run

            config = {**self.cfg.to_dict(), "hardware": self.hardware}
            self.logger = open_run(lg, self.run_dir, config, group=lg.group)

    # ------------------------------------------------------------------ heartbeats
    def absorb(self, kind: str, meta: dict) -> None:
        """One worker heartbeat's counters (already checked against the run's contract)."""
        self.costs.add(kind, meta)
        if kind in ("actor", "trainer"):  # actors, and pods: trainers that simulate
            self._episodes += int(meta.get("episodes", 0))
            if "stat_sums" in meta:  # of the run's length: check_heartbeat said so
                self._stats += np.asarray(meta["stat_sums"], float)
        elif kind == "eval":
            self._absorb_eval(meta)

    def _absorb_eval(self, meta: dict) -> None:
        """An eval worker's heartbeat (`distributed/evaluator.py`): count its matches, keep its
        rating of the latest policy, log its new videos and leaderboard to wandb."""
        self.eval_matches += int(meta.get("matches", 0))
        if meta.get("rating"):
            self.eval_latest = meta
        if self.logger is None:
            return
        for path in meta.get("new_videos") or []:
            try:
                self.logger.log_video(path, "eval/video", caption=Path(path).stem)
            except ValueError as err:  # the file went away; the run goes on
                log.warning("eval video not logged: %s", err)
        board = meta.get("leaderboard")
        if board:
            self.logger.log_table("eval/leaderboard", board["columns"], board["rows"])

    # ------------------------------------------------------------------ records
    def record(self, base: dict, elapsed_s: float, last_by_kind: dict[str, list[dict]]) -> None:
        """Complete the controller's `base` record with the window's figures; write it, log it,
        look for phase onsets, start a new window."""
        record = {**base, "throughput/env_fps": self.costs.frames / max(elapsed_s, 1e-9)}
        if self._episodes:
            means = self._stats / self._episodes
            keys = self.stat_keys
            record.update({f"episode/{k}": float(v) for k, v in zip(keys, means, strict=True)})
        record.update(self._worker_metrics(last_by_kind))
        record.update(self.costs.metrics(elapsed_s))
        record.update(self._eval_metrics())
        self._stats[:] = 0
        self._episodes = 0
        self.last = record
        append_record(self.metrics_path, record)
        if self.logger is not None:
            self.logger.log(record)
        if "episode/hider_return" in record:
            for onset in self.phases.update(record):
                self._log_phase(onset)

    def _log_phase(self, onset) -> None:
        entry = onset.to_record()
        self.phases_reached.append(entry["phase"])
        append_record(self.metrics_path, entry)
        if self.logger is not None:
            self.logger.log_phase(onset)
        if self.bar is not None:
            self.bar.write(f"phase reached: {entry['phase']} after {entry['episodes']:,} episodes")

    def _worker_metrics(self, by_kind: dict[str, list[dict]]) -> dict:
        out: dict = {}
        trainer = (by_kind.get("trainer") or [{}])[0]
        for key, value in (trainer.get("stats") or {}).items():
            out[f"loss/{key}"] = value
        for key in ("staleness", "reuse"):
            if trainer.get(key) is not None:
                out[f"{key}/mean"] = trainer[key]
        if "buffer" in trainer:
            out["queue/trainer_buffer"] = trainer["buffer"]
        policies = by_kind.get("policy", [])
        if policies:
            busy = np.mean([p.get("busy_s", 0.0) for p in policies])
            out["throughput/policy_busy"] = float(busy) / self.cfg.pipeline.heartbeat_s
        if "physics_warnings" in trainer:  # a pod
            out["env/physics_warnings"] = int(
                sum(t.get("physics_warnings", 0) for t in by_kind["trainer"])
            )
        actors = by_kind.get("actor", [])
        if actors:
            out["queue/actor_chunks"] = int(sum(a.get("queued_chunks", 0) for a in actors))
            out["env/physics_warnings"] = int(sum(a.get("physics_warnings", 0) for a in actors))
        return out

    def _eval_metrics(self) -> dict:
        """`rating/latest_<role>_{mu,sigma}`, `eval/win_rate/<opponent class>`, `eval/matches`."""
        m = self.eval_latest
        if not m:
            return {}
        out = {"eval/matches": self.eval_matches, "eval/version": int(m.get("version", -1))}
        for role, (mu, sigma) in m["rating"].items():
            out[f"rating/latest_{role}_mu"] = float(mu)
            out[f"rating/latest_{role}_sigma"] = float(sigma)
        for cls, rate in (m.get("win_rate") or {}).items():
            out[f"eval/win_rate/{cls}"] = float(rate)
        return out

    # ------------------------------------------------------------------ progress bar
    def show(self, frames: int, postfix: str) -> None:
        """Redraw the progress bar (if any) at `frames` with `postfix`."""
        if self.bar is not None:
            self.bar.show(frames, postfix)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.logger is not None:
            self.logger.finish()


class ProgressBar(tqdm):
    """Env frames against `stop.frames` on stderr, redrawn with a postfix: the run's and the
    population's."""

    def __init__(self, cfg: RunConfig, desc: str, frames: int = 0, disable: bool = False):
        total = cfg.stop.frames or None
        super().__init__(
            total=total,
            initial=frames,
            desc=desc,
            unit=" frames",
            dynamic_ncols=True,
            file=sys.stderr,
            disable=disable,
            # without a frame limit: the count, time and rate, no empty bar
            bar_format=None if total else "{desc}: {n} [{elapsed}, {rate_fmt}{postfix}]",
        )

    def show(self, frames: int, postfix: str) -> None:
        """Redraw at `frames` with `postfix` (tqdm only redraws itself on update())."""
        self.n = frames
        self.set_postfix_str(postfix, refresh=False)
        self.refresh()


def by_kind(states) -> dict[str, list[dict]]:
    """The last heartbeat of every worker, grouped by worker kind."""
    out: dict[str, list[dict]] = defaultdict(list)
    for state in states:
        out[state.spec.kind].append(state.last)
    return out


class WorkCosts:
    """Sums of CPU time and work per worker kind over the current logging window: what
    each worker kind costs per unit of work, from the workers' heartbeats.

    Every worker in its own process reports `cpu_s` (process CPU seconds since its previous
    heartbeat, `worker.py`); actors report frames, policy workers the agent rows they served,
    trainers the agent-steps their updates used (`samples`) and how many of those were used for
    the first time (`new_samples`). Over one logging window the controller turns them into:

        cpu/actor_ms_per_frame      actor CPU per env frame (a frame = one step of one world)
        cpu/policy_us_per_row       policy-worker CPU per agent row served (one agent, one step)
        cpu/policy_ms_per_frame     the same per env frame
        cpu/trainer_us_per_sample   trainer CPU per agent-step in an update (reuse counts again)
        cpu/trainer_ms_per_frame    the same per env frame produced
        cpu/ms_per_frame            all of the above together per env frame produced
        throughput/policy_rows_per_batch     agent rows per batch of requests a policy worker serves
        throughput/policy_rows_per_forward   agent rows per forward pass (a batch takes one pass
                                             per controller: the latest policy, each snapshot)
        throughput/trained_fps      env frames per second whose samples reached an update for
                                    the first time (agent-steps / agents per world)
        pod/{sim,act,learn}_ms_per_frame   a pod's wall time per env frame in simulation, acting
                                    and learning (pod_worker.py; it also reports its frames)
        cpu/pod_{collect,learn,sync,duties,setup}_ms_per_frame   a pod's process CPU per env frame
                                    collecting its rollout, in PPO, in the ranks' agreement and
                                    sums (sync), and in rank 0's publishing, checkpoints and
                                    snapshots (duties), in building it at the start (setup);
                                    cpu/pod_rest_ms_per_frame: the rest
        pod/sync_ms_per_frame       a pod's wall time per env frame in the agreement and sums,
                                    waits for slower ranks included

    A metric is left out when its window has no work or no CPU report (serial launcher).
    """

    def __init__(self, agents_per_frame: int) -> None:
        self.agents_per_frame = max(1, int(agents_per_frame))
        self._reset()

    def _reset(self) -> None:
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.reported: set[str] = set()
        self.frames = self.rows = self.batches = self.forwards = 0
        self.samples = self.new_samples = 0
        self.pod_s: dict[str, float] = defaultdict(float)
        self.pod_cpu_s: dict[str, float] = defaultdict(float)

    def add(self, kind: str, meta: dict) -> None:
        """One heartbeat's counters (already checked against the contract)."""
        if "cpu_s" in meta:
            self.cpu_s[kind] += float(meta["cpu_s"])
            self.reported.add(kind)
        self.frames += int(meta.get("frames", 0))  # actors, and pods
        for phase in POD_PHASES:
            self.pod_s[phase] += float(meta.get(f"{phase}_s", 0.0))
        for part in POD_CPU:
            self.pod_cpu_s[part] += float(meta.get(f"{part}_cpu_s", 0.0))
        self.pod_s["sync"] += float(meta.get("sync_s", 0.0))
        if kind == "policy":
            self.rows += int(meta.get("rows", 0))
            self.batches += int(meta.get("batches", 0))
            self.forwards += int(meta.get("forwards", 0))
        elif kind == "trainer":
            self.samples += int(meta.get("samples", 0))
            self.new_samples += int(meta.get("new_samples", 0))

    def metrics(self, elapsed_s: float) -> dict[str, float]:
        """The window's figures (see the module docstring); starts a new window."""
        out: dict[str, float] = {}
        if elapsed_s > 0:
            out["throughput/trained_fps"] = self.new_samples / self.agents_per_frame / elapsed_s
        per_frame = {k: self.cpu_s[k] for k in CPU_KINDS if k in self.reported}
        if self.frames:
            for phase in (*POD_PHASES, "sync"):
                if self.pod_s[phase]:
                    out[f"pod/{phase}_ms_per_frame"] = 1e3 * self.pod_s[phase] / self.frames
            if self.pod_cpu_s["collect"] and "trainer" in per_frame:
                for part in POD_CPU:
                    out[f"cpu/pod_{part}_ms_per_frame"] = 1e3 * self.pod_cpu_s[part] / self.frames
                rest = per_frame["trainer"] - sum(self.pod_cpu_s.values())
                out["cpu/pod_rest_ms_per_frame"] = 1e3 * max(rest, 0.0) / self.frames
            for kind, cpu in per_frame.items():
                out[f"cpu/{kind}_ms_per_frame"] = 1e3 * cpu / self.frames
            if per_frame:
                out["cpu/ms_per_frame"] = 1e3 * sum(per_frame.values()) / self.frames
        if self.batches:
            out["throughput/policy_rows_per_batch"] = self.rows / self.batches
        if self.forwards:
            out["throughput/policy_rows_per_forward"] = self.rows / self.forwards
        if self.rows and "policy" in per_frame:
            out["cpu/policy_us_per_row"] = 1e6 * per_frame["policy"] / self.rows
        if self.samples and "trainer" in per_frame:
            out["cpu/trainer_us_per_sample"] = 1e6 * per_frame["trainer"] / self.samples
        self._reset()
        return out
