"""Controller: one per run. Starts the workers, watches them, owns the counters and the logs.

Responsibilities:
- the run directory (`runs/<name>/`: config.yaml, checkpoints/, pool/, replays/,
  metrics.jsonl, wandb/), owned by one controller at a time (`run_lock.py`) and, on resume, the
  version of the newest checkpoint and the frame, episode and hour counts of the last record;
- refusals before any worker starts: settings this machine cannot run (`devices.py`), a disk
  without room for two checkpoints; and the end of a run that cannot go on: a write that found
  the disk full (a worker exits with `NO_ROOM_EXIT`) stops the run, never restarts into it, and a
  run whose workers made no frame ends with an error;
- endpoints for every worker, and their start through a launcher (serial, local, ray);
- heartbeats: a worker whose process died, or that was silent for `heartbeat_timeout_s`, is
  restarted (a trainer from the newest checkpoint; with `restart_trainer=false` a dead trainer
  stops the run with an error instead); a learner in a PPO update or a DDP rank waiting for its
  peers (`busy`) may be silent for `update_timeout_s`;
- progress, not only liveness: a worker that heartbeats but makes no progress for
  `stall_timeout_s` is restarted too. Progress per kind: an actor steps worlds, or holds
  chunks the trainer does not take (then it waits on the trainer, not stuck); a policy worker
  has parameters; a trainer receives or trains, or nothing waits for it (no actor holds
  chunks). Eval workers play long rounds and are watched for liveness only;
- the control channel: each worker incarnation gets a random token in its spec and every
  message must carry it (no worker can speak for another, whatever its socket identity); the
  controller sends `alive` to every worker each `heartbeat_s` (workers whose parent is not the
  controller exit without it) and checks every heartbeat against the run's contract
  (`contract.check_heartbeat`); a bad message is dropped and counted (`control/rejected`);
- the run's counters on the paper's axes (episodes, env frames, wall-clock hours, optimisation
  steps) and the end summary; every `logging.every_s` it hands them, with the workers' last
  heartbeats, to its `RunLog` (`reporting.py`: metrics.jsonl, wandb, phase onsets, the progress
  bar), and redraws the bar every `BAR_REFRESH_S`;
- stopping: at a stop limit, on SIGINT/SIGTERM, or on a fatal error, it asks every worker to
  stop (policy workers first, so that none answers an actor that has already left), waits (at
  most `STOP_GRACE_S`) for the trainer's final checkpoint, and leaves no process behind; a
  worker that never said hello is not waited for. A trainer in a PPO update
  finishes it first, so trainers get the time left under `stop.minutes` with the counters and
  start no update they expect to end after it: the run stops on time.

Env frames = environment steps summed over worlds; episodes = finished episodes.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hns_train.agents.checkpoint import (
    Checkpoint,
    CheckpointDir,
    disk_full,
    load_checkpoint,
    resolve_checkpoint,
    room_problem,
)
from hns_train.agents.network_kinds import network_config, weights_problem
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.atomic_file import atomic_write_bytes
from hns_train.config import RunConfig, save_config
from hns_train.distributed.contract import ContractError, DropLog, check_heartbeat, check_hello
from hns_train.distributed.devices import check_devices
from hns_train.distributed.launchers import make_endpoints, make_launcher, run_keys
from hns_train.distributed.message_sizes import MessageSize, check_message_sizes
from hns_train.distributed.reporting import RunLog, by_kind
from hns_train.distributed.run_lock import LOCK_NAME, SOCKETS_PREFIX, claim, owned_folder
from hns_train.distributed.shared_rows import shared_folder
from hns_train.distributed.streams import ControlServer
from hns_train.distributed.worker import NO_ROOM_EXIT, WorkerSpec, pool_dir, worker_plan
from hns_train.envs.contract import observation_shapes
from hns_train.jsonl import append_record, read_logged

log = logging.getLogger(__name__)
STOP_GRACE_S = 60.0
SERVERS_STOP_S = 10.0  # longest wait for policy workers to stop before the others are asked
STARTUP_GRACE_S = 120.0  # from start to hello: spawning and importing torch on a busy machine
BAR_REFRESH_S = 1.0  # progress bar redraws: tqdm only redraws itself on update()


# the heartbeat counters a WorkerState sums (deltas since a worker's previous heartbeat)
TOTALS = (
    "frames", "steps", "samples", "cpu_s", "update_s", "sim_s", "act_s", "learn_s", "sync_s",
    "collect_cpu_s", "learn_cpu_s", "sync_cpu_s", "duties_cpu_s", "setup_cpu_s",
)  # fmt: skip


@dataclass
class WorkerState:
    spec: WorkerSpec
    last_seen: float
    restarts: int = 0
    stopped: bool = False
    connected: bool = False  # has said hello since its last start
    busy: bool = False  # announced a computation longer than heartbeats allow (PPO update)
    stop_sent: bool = False  # asked to stop (the run is ending)
    pid: int | None = None
    last: dict = field(default_factory=dict)
    # its heartbeats' counters summed over the run, restarts included (TOTALS): what each
    # rank of a group did (tests, bench/pod_scale.py)
    totals: dict = field(default_factory=lambda: dict.fromkeys(TOTALS, 0.0))
    started_at: float = 0.0  # monotonic time of its latest start
    hello_s: float | None = None  # seconds from that start to its hello (spawn, imports, setup)
    # when its last heartbeat showed progress (see _progressed)
    progress_at: float = field(default_factory=time.monotonic)


@dataclass
class Summary:
    run_dir: str
    version: int
    frames: int
    episodes: int
    hours: float
    fps: float
    restarts: int
    reason: str
    phases: list[str]
    last_record: dict
    new_frames: int = 0  # frames of this invocation (a resumed run started with frames - this)

    def lines(self) -> list[str]:
        r = self.last_record
        ret = [
            f"run directory   {self.run_dir}",
            f"stopped         {self.reason}",
            f"optimisation    {self.version} steps",
            f"env frames      {self.frames:,} ({self.fps:,.0f} per second)",
            f"episodes        {self.episodes:,}",
            f"wall clock      {self.hours * 3600:,.0f} s",
            f"restarts        {self.restarts}",
        ]
        if "episode/hider_return" in r:
            ret.append(
                f"last returns    hiders {r['episode/hider_return']:+.2f}, "
                f"seekers {r['episode/seeker_return']:+.2f}"
            )
        ret.append(f"phases reached  {', '.join(self.phases) if self.phases else 'none yet'}")
        return ret


class Stoppable:
    """What a run's and a population's controller share about starting and stopping: the
    run directory taken and let go of (`_claim_and_open`); the first reason asked for to stop
    is the one kept (`stop_reason`), and an error stops with its message; and the run time the
    stop limits and records count (`elapsed_s`)."""

    stop_reason = ""
    error = ""
    prior_s = 0.0  # run time before this invocation (a resumed run's)
    start: float  # time.monotonic() when this invocation started

    def elapsed_s(self) -> float:
        return self.prior_s + time.monotonic() - self.start

    def request_stop(self, reason: str) -> None:
        """Stop after the current tick (safe from signal handlers and other threads)."""
        self.stop_reason = self.stop_reason or reason

    def _fail(self, err: BaseException) -> None:
        self.error = f"{type(err).__name__}: {err}"
        self.request_stop(f"error: {self.error}")

    def _stop_at_limits(self, stop, version: int, frames: int) -> None:
        """Ask to stop at the first limit of the `stop` settings that is reached; the minutes
        are the run's time (`elapsed_s`), as its records' hours count it."""
        if stop.versions and version >= stop.versions:
            self.request_stop(f"reached stop.versions={stop.versions}")
        elif stop.frames and frames >= stop.frames:
            self.request_stop(f"reached stop.frames={stop.frames}")
        elif stop.minutes and self.elapsed_s() >= stop.minutes * 60:
            self.request_stop(f"reached stop.minutes={stop.minutes}")

    def _claim_and_open(self, resume: bool) -> None:
        """Take `run_dir` (one owner per run directory), then `_open` the rest of the start,
        which hands each thing it holds to `_held`: let go of at the end, the last taken first.
        A failed start holds nothing, and a new run's directory is left as `claim` found it.

        The run's clock starts here, with the command: its start-up (the launcher, Ray, the
        sockets, the league) counts towards `stop.minutes`, as the user waiting on it sees."""
        self.start = time.monotonic()
        self.owner = claim(self.run_dir, resume)
        self._held = contextlib.ExitStack()
        self._held.callback(self.owner.release)
        try:
            self._open(resume)
        except BaseException:
            self._held.close()
            if not resume:  # the directory held nothing but the lock (`claim`)
                _empty_run_dir(self.run_dir)
            raise


class Controller(Stoppable):
    def __init__(self, cfg: RunConfig, resume: bool = False) -> None:
        # The run's network, built once on the CPU (tens of ms, a few MB; torch's meta-device
        # mode would skip the initialisation but costs seconds on its first use in a process):
        # its parameters are a message, and a checkpoint to resume from must fit it.
        self._network = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, "cpu")
        # A message every socket would refuse is a config error, found before anything starts.
        self.message_sizes = check_message_sizes(cfg, self._network)
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        check_devices(cfg)  # what a worker would refuse on this machine, refused here
        self._claim_and_open(resume)  # what it holds is let go of by `_stop_workers`

    # ------------------------------------------------------------------ setup
    def _open(self, resume: bool) -> None:
        """The start, once the run directory is this controller's: its folders and files, the
        launcher, the sockets and the counters; each thing held is handed to `_held`."""
        cfg = self.cfg
        self._prepare_run_dir(resume)
        save_config(cfg, self.run_dir / "config.yaml")
        self.hardware = hardware_info()
        atomic_write_bytes(self.run_dir / "hardware.yaml", yaml.safe_dump(self.hardware).encode())
        # the sockets and their folders go once the workers are gone (the launcher's join)
        sockets = self._held.enter_context(contextlib.ExitStack())
        self.launcher = make_launcher(cfg)
        self._held.callback(self.launcher.join, timeout_s=10.0)
        # short ipc paths (the OS limits their length); folders of killed controllers go
        folder = owned_folder(SOCKETS_PREFIX)
        sockets.callback(shutil.rmtree, folder, ignore_errors=True)
        scheme = cfg.pipeline.transport if self.launcher.scheme != "inproc" else "inproc"
        # Cluster runs: CURVE keys made here, per run, handed to workers in their specs.
        self.security = run_keys(cfg)
        place = getattr(self.launcher, "addresses", None)  # Ray: on the nodes it placed workers
        self.endpoints = make_endpoints(cfg, scheme, folder, place)
        # One host: inference requests travel through shared memory (shared_rows.py).
        if cfg.pipeline.launcher != "ray" and cfg.pipeline.shared_memory:
            self.endpoints["shared_rows"] = shared_folder()
            sockets.callback(shutil.rmtree, self.endpoints["shared_rows"], ignore_errors=True)
        self.control = ControlServer(
            self.endpoints["control"],
            security=self.security,
            max_message_bytes=cfg.pipeline.max_message_mb << 20,
        )
        sockets.enter_context(self.control)
        # Several trainers find each other through a store this controller hosts (ddp.py).
        self._ddp_store = None
        sockets.callback(setattr, self, "_ddp_store", None)  # dropping the store closes it
        self._ddp_generation = 0
        if cfg.pipeline.n_trainers > 1:
            self._open_rendezvous()
        self.workers: dict[str, WorkerState] = {}
        self.control_drops = DropLog("controller: control messages")
        self.restarts = 0

        self.version = self.frames = self.episodes = 0
        earlier = self._restore_counters() if resume else []
        self.frames_at_start = self.frames
        self._last_record_time = self.start
        self._last_counters_sent = 0.0
        self._last_bar_refresh = 0.0
        self.log = RunLog(cfg, self.run_dir, self.hardware, earlier)

    def _prepare_run_dir(self, resume: bool) -> None:
        """The run directory's folders, after the checks that may refuse the run: the pool
        index, the checkpoint to resume from, and room on the disk for two checkpoints."""
        if pool_dir(self.run_dir).is_dir():  # a pool index that cannot be read stops the run
            PolicyPool(pool_dir(self.run_dir)).close()
        self._resume_from = _resume_checkpoint(self.run_dir, self._network) if resume else None
        del self._network  # a few MB the run has no more use for
        checkpoints = self.run_dir / "checkpoints"
        newest = CheckpointDir(checkpoints).newest_size() if checkpoints.is_dir() else None
        self.checkpoint_bytes = newest or checkpoint_bytes_estimate(self.message_sizes)
        problem = room_problem(checkpoints, self.checkpoint_bytes)
        if problem:
            raise ValueError(f"{problem}; free some space, or choose another runs_dir=...")
        for sub in ("checkpoints", "pool", "replays"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)

    def _restore_counters(self) -> list[dict]:
        """The run's counters where it stopped: the version of the newest checkpoint (the
        networks go back to it), frames, episodes and hours of the run's last record when it
        has one beyond the checkpoint's (those frames were played; counts never go back).
        Returns the run's records, read once: the run log replays them.

        A `resume` record marks the point in metrics.jsonl where the run continues."""
        latest = self._resume_from
        counters = latest.meta.get("counters", {})
        self.version = int(counters.get("version", 0))
        self.frames = int(counters.get("frames", 0))
        self.episodes = int(counters.get("episodes", 0))
        self.prior_s = float(counters.get("wall_clock_s", 0.0))
        earlier = read_logged(self.run_dir / "metrics.jsonl")  # damaged lines said once
        for record in reversed(earlier):
            if record.get("kind") in ("train", "resume"):
                self.frames = max(self.frames, int(record.get("frames", 0)))
                self.episodes = max(self.episodes, int(record.get("episodes", 0)))
                self.prior_s = max(self.prior_s, float(record.get("hours", 0.0)) * 3600)
                break
        mark = {
            "kind": "resume",
            "time": time.time(),
            "checkpoint": str(latest.path),
            "version": self.version,
            "frames": self.frames,
            "episodes": self.episodes,
            "hours": self.prior_s / 3600,
        }
        append_record(self.run_dir / "metrics.jsonl", mark)
        return earlier

    def _open_rendezvous(self) -> None:
        from hns_train.distributed.ddp import make_store, rendezvous_info

        p = self.cfg.pipeline
        host = getattr(self.launcher, "host", "127.0.0.1")
        if self._ddp_store is None:
            self._ddp_store, self._ddp_port = make_store(host, p.ddp_timeout_s)
        self.endpoints = {
            **self.endpoints,
            "ddp": rendezvous_info(
                host,
                self._ddp_port,
                p.n_trainers,
                self._ddp_generation,
                folder=self.endpoints.get("shared_rows"),  # one host only
            ),
        }

    def _restart_trainer_group(self) -> None:
        """A DDP rank cannot rejoin a running group: restart every rank in a new generation,
        all resuming from the newest checkpoint."""
        from hns_train.distributed.ddp import sums_tag
        from hns_train.distributed.host_sums import remove_files

        self._ddp_generation += 1
        self._open_rendezvous()
        trainers = [s for s in self.workers.values() if s.spec.kind == "trainer"]
        for state in trainers:
            self.launcher.kill(state.spec.name)
        if self.endpoints.get("shared_rows"):  # what the killed ranks' sums left
            remove_files(Path(self.endpoints["shared_rows"]), sums_tag(self._ddp_generation - 1))
        for state in trainers:
            self._start(state.spec.restarted(self.endpoints, token=_token()))

    def specs(self) -> list[WorkerSpec]:
        data = self.cfg.to_dict()
        keys = None if self.security is None else self.security.to_dict()
        return [
            WorkerSpec(
                kind, i, data, str(self.run_dir), self.endpoints, security=keys, token=_token()
            )
            for kind, n in worker_plan(self.cfg).items()
            for i in range(n)
        ]

    def _start(self, spec: WorkerSpec) -> None:
        now = time.monotonic()
        state = self.workers.get(spec.name)
        if state is None:
            self.workers[spec.name] = WorkerState(spec, now, progress_at=now, started_at=now)
        else:
            state.spec, state.last_seen, state.progress_at = spec, now, now
            state.started_at, state.hello_s = now, None
            state.stopped = state.connected = state.busy = state.stop_sent = False
        self.launcher.start(spec)

    # ------------------------------------------------------------------ run
    def run(self) -> Summary:
        with stop_signals(self.request_stop):
            try:
                self.log.open(self.frames)
                self._refresh_bar()
                # a run resumed at its limits has nothing left to do: no worker starts
                self._stop_at_limits(self.cfg.stop, self.version, self.frames)
                if not self.stop_reason:
                    for spec in self.specs():
                        self._start(spec)
                while not self.stop_reason:
                    self.launcher.step()
                    self.tick()
            except Exception as err:  # a controller bug must still stop every worker
                if not disk_full(err):
                    self._fail(err)
                    raise
                self._no_room(str(err))
            finally:
                self._stop_workers()
                self._final_record()
                self.log.close()
        self._check_made_frames()
        return self.summary()

    def _no_room(self, cause: str) -> None:
        """A write failed for want of space: the run ends, never restarts into the same wall."""
        problem = room_problem(self.run_dir, self.checkpoint_bytes) or cause
        newest = CheckpointDir(self.run_dir / "checkpoints").latest()
        kept = f"newest good checkpoint kept: {newest.path.name}" if newest else "no checkpoint"
        self.error = f"disk full: {problem}; {kept}; free some space, then --resume {self.run_dir}"
        self.stop_reason = f"error: {self.error}"

    def _final_record(self) -> None:
        try:
            self._record()
        except Exception as err:  # the disk is full: the summary still says where the run got
            if not disk_full(err):
                raise
            if not self.error:
                self._no_room(str(err))

    def _check_made_frames(self) -> None:
        """A run that trained nothing never ends as a success."""
        if self.error or self.frames > self.frames_at_start:
            return
        if not self.workers:
            return  # resumed at its limits (`run`): nothing was left to do
        waited = time.monotonic() - self.start
        self.error = (
            f"no worker made a frame in {waited:.0f} s ({self.restarts} restarts); "
            "see the workers' messages above"
        )
        self.stop_reason = f"{self.stop_reason}; error: {self.error}"

    def tick(self) -> None:
        now = time.monotonic()
        wait_ms = 0 if self.launcher.scheme == "inproc" else 5
        for name, message in self.control.recv(timeout_ms=wait_ms):
            self._on_message(name.decode(errors="replace"), message, now)
        if now - self._last_counters_sent >= min(1.0, self.cfg.pipeline.heartbeat_s):
            self._last_counters_sent = now
            self._send_counters()
        self._watch(now)
        if now - self._last_record_time >= self.cfg.logging.every_s:
            self._record()
        self._stop_at_limits(self.cfg.stop, self.version, self.frames)
        if now - self._last_bar_refresh >= BAR_REFRESH_S:
            self._last_bar_refresh = now
            self._refresh_bar()

    def _on_message(self, routing_id: str, message, now: float) -> None:
        name = routing_id.rpartition(".")[0]
        state = self.workers.get(name)
        if state is None or routing_id != state.spec.routing_id:
            self.control_drops.drop("from no worker this run runs now", routing_id)
            return
        meta = dict(message.meta)
        token = meta.pop("token", None)
        if not isinstance(token, str) or not hmac.compare_digest(token, state.spec.token):
            self.control_drops.drop(f"{message.kind!r} without {name}'s token", name)
            return
        try:
            if message.kind == "hello":
                check_hello(meta)
            elif message.kind == "heartbeat":
                check_heartbeat(state.spec.kind, meta, self.run_dir, len(self.log.stat_keys))
            elif message.kind not in ("stopped", "busy"):
                raise ContractError(f"unknown control message kind {message.kind!r}")
        except ContractError as err:
            self.control_drops.drop(f"{message.kind} does not fit: {err}", name)
            return
        state.last_seen = now
        state.connected = True
        if message.kind == "hello":
            state.pid = meta["pid"]
            state.progress_at = now
            state.hello_s = now - state.started_at
            if state.spec.kind == "trainer":  # its first checkpoint must know the run's frames
                self._send_counters(only=state)
        elif message.kind == "stopped":
            state.stopped = True
        elif message.kind == "busy":
            state.busy = True
        elif message.kind == "heartbeat":
            state.busy = False
            state.last = meta
            for key in TOTALS:
                state.totals[key] += float(meta.get(key, 0.0))
            if self._progressed(state.spec.kind, meta):
                state.progress_at = now
            self._absorb(state.spec.kind, meta)

    def _progressed(self, kind: str, meta: dict) -> bool:
        """Whether a heartbeat shows progress, or a wait that is another worker's doing (the
        other workers' heartbeats are looked at only then: with many ranks, every heartbeat
        would otherwise walk every worker)."""

        def last(other: str) -> list[dict]:
            return [s.last for s in self.workers.values() if s.spec.kind == other]

        if kind == "actor":  # stepping, or waiting on the trainer or on parameters
            return (
                meta.get("frames", 0) > 0
                or meta.get("queued_chunks", 0) > 0
                or any(p.get("version", -1) < 0 for p in last("policy"))
            )
        if kind == "policy":  # has parameters, or no trainer could have sent them yet
            trainer = self.workers.get("trainer0")
            return meta.get("version", -1) >= 0 or trainer is None or not trainer.connected
        # a trainer takes chunks, or none wait for it; none ever wait for a pod, which
        # heartbeats only between env steps (pod_worker.py): one that stops stepping falls silent
        if kind == "trainer":
            if meta.get("steps", 0) > 0 or meta.get("received", 0) > 0:
                return True
            if self.cfg.pipeline.backend == "pod":  # no actors: O(1) per rank's heartbeat
                return True
            return not any(a.get("queued_chunks", 0) > 0 for a in last("actor"))
        return True  # eval: rounds take long; watched for liveness only

    def _absorb(self, kind: str, meta: dict) -> None:
        self.log.absorb(kind, meta)
        # actors and pods (trainers that simulate) report frames and episodes
        self.frames += int(meta.get("frames", 0))
        self.episodes += int(meta.get("episodes", 0))
        if kind == "trainer":
            # The trainer's word is the run's version; a restarted one goes back to its
            # checkpoint, and the counters with it.
            self.version = int(meta.get("version", self.version))

    # ------------------------------------------------------------------ progress bar
    def _refresh_bar(self) -> None:
        self.log.show(self.frames, self._postfix())

    def _postfix(self) -> str:
        stop, last = self.cfg.stop, self.log.last
        ready = sum(s.connected for s in self.workers.values())
        parts = [] if ready == len(self.workers) else [f"workers {ready}/{len(self.workers)} up"]
        parts.append(f"episodes {self.episodes:,}")
        parts.append(f"opt steps {self.version}" + (f"/{stop.versions}" if stop.versions else ""))
        if "episode/hider_return" in last:
            parts.append(
                f"returns {last['episode/hider_return']:+.1f}/{last['episode/seeker_return']:+.1f}"
            )
        if stop.minutes:
            left = max(0.0, self._stop_in_s())
            parts.append(f"stop in {int(left // 60)}:{int(left % 60):02d}")
        return ", ".join(parts)

    def _send_counters(self, only: WorkerState | None = None) -> None:
        """The run's counters to every trainer (or to `only`), `alive` to the others."""
        meta = {
            "frames": self.frames,
            "episodes": self.episodes,
            "wall_clock_s": self.elapsed_s(),
            "stop_in_s": self._stop_in_s(),
        }
        for state in [only] if only is not None else self.workers.values():
            if not state.connected or state.stopped:
                continue
            if state.spec.kind == "trainer":
                self.control.send(_rid(state), "counters", meta=meta, timeout_ms=0)
            else:  # the trainer takes its counters as the sign of life
                self.control.send(_rid(state), "alive", timeout_ms=0)

    def _watch(self, now: float) -> None:
        p = self.cfg.pipeline
        dead = set(self.launcher.dead())
        exit_code = getattr(self.launcher, "exit_code", None)  # launchers of local processes
        for name, state in list(self.workers.items()):
            why = "" if state.stopped else self._trouble(state, name in dead, now)
            if not why:
                continue
            if name in dead and exit_code is not None and exit_code(name) == NO_ROOM_EXIT:
                self._no_room(f"{name} found no room on the disk")
                return
            if state.spec.kind == "trainer" and not p.restart_trainer:
                self.error = f"trainer {why}; set pipeline.restart_trainer=true to restart it"
                self.stop_reason = f"error: {self.error}"
                state.stopped = True
                return
            if state.restarts >= p.max_restarts:
                self.error = f"{name} {why} and reached pipeline.max_restarts={p.max_restarts}"
                self.stop_reason = f"error: {self.error}"
                return
            log.warning("%s %s: restarting it", name, why)
            state.restarts += 1
            self.restarts += 1
            if state.spec.kind == "trainer" and p.n_trainers > 1:
                self._restart_trainer_group()
                return
            self.launcher.kill(name)
            self._start(state.spec.restarted(token=_token()))

    def _trouble(self, state: WorkerState, exited: bool, now: float) -> str:
        """Why a worker must restart: it exited, was silent or made no progress ("" if none).

        In one process (serial) every worker waits while another works: silence says nothing.
        A worker that announced a long computation (`busy`: a PPO update, a DDP rank's wait for
        its peers) may be silent until it speaks again, for `update_timeout_s` at most (0: as
        long as its process lives).
        Before its hello a worker is still starting (spawn, imports): a longer grace."""
        p = self.cfg.pipeline
        if exited:
            return "exited"
        silent = now - state.last_seen
        if state.busy:
            if self.launcher.scheme != "inproc" and 0 < p.update_timeout_s < silent:
                return f"silent in an update for {silent:.0f} s, past pipeline.update_timeout_s"
            return ""
        limit = p.heartbeat_timeout_s
        if not state.connected:
            limit = max(limit, STARTUP_GRACE_S)
        if self.launcher.scheme != "inproc" and silent > limit:
            return f"silent for {silent:.0f} s"
        if state.connected and 0 < p.stall_timeout_s < now - state.progress_at:
            return f"made no progress for {now - state.progress_at:.0f} s"
        return ""

    def _stop_in_s(self) -> float | None:
        """Seconds left under `stop.minutes` (None without that limit); trainers get it with the
        counters and start no PPO update they expect to end after it."""
        if not self.cfg.stop.minutes:
            return None
        return self.cfg.stop.minutes * 60 - self.elapsed_s()

    def _stop_workers(self) -> None:
        try:
            self._ask_to_stop()
        finally:  # whatever happened above, no process is left behind
            for name, state in self.workers.items():
                if not state.connected:  # still starting: nothing of it to wait for
                    self.launcher.kill(name)
            self._held.close()  # the workers joined, then the sockets, then the directory

    def _ask_to_stop(self) -> None:
        """Stop every worker that is connected and wait for it; the rest are killed.

        Policy workers go first, and the others once those have stopped (or after
        `SERVERS_STOP_S`): a policy worker still serving when an actor has left would answer a
        request of that actor, and its socket would report the reply as dropped. In this order
        a normal stop drops nothing, and a drop warning always means a real loss."""
        # a trainer in a PPO update finishes it first: say so, where one runs to write it
        writing = any(
            s.spec.kind == "trainer" and s.connected and not s.stopped
            for s in self.workers.values()
        )
        then = ": final checkpoint" if writing else ""
        self.log.show(self.frames, f"stopping ({self.stop_reason}){then}")
        deadline = time.monotonic() + STOP_GRACE_S
        servers = [s for s in self.workers.values() if s.spec.kind == "policy"]
        self._send_stop(servers)
        self._wait_stopped(servers, min(deadline, time.monotonic() + SERVERS_STOP_S))
        self._send_counters()  # the trainer's final checkpoint holds the run's last counts
        self._send_stop(list(self.workers.values()))
        self._wait_stopped(list(self.workers.values()), deadline)

    def _send_stop(self, states: list[WorkerState]) -> None:
        for state in states:
            if state.stopped or state.stop_sent:
                continue
            # A worker that never said hello cannot be asked: it is killed by join().
            state.stop_sent = True
            if not state.connected or not self.control.send(_rid(state), "stop", timeout_ms=100):
                state.stopped = True

    def _wait_stopped(self, states: list[WorkerState], deadline: float) -> None:
        while time.monotonic() < deadline:
            if all(s.stopped for s in states):
                break
            self.launcher.step()
            now = time.monotonic()
            for name, message in self.control.recv(timeout_ms=20):
                self._on_message(name.decode(errors="replace"), message, now)
            for name in self.launcher.dead():
                self.workers[name].stopped = True

    # ------------------------------------------------------------------ logs
    def _record(self) -> None:
        now = time.monotonic()
        elapsed = max(now - self._last_record_time, 1e-9)
        self._last_record_time = now
        base = {
            "kind": "train",
            "time": time.time(),
            "hours": self.elapsed_s() / 3600,
            "episodes": self.episodes,
            "frames": self.frames,
            "version": self.version,
            "restarts": self.restarts,
            "control/rejected": self.control_drops.total,
        }
        self.log.record(base, elapsed, by_kind(self.workers.values()))

    def summary(self) -> Summary:
        new_frames = self.frames - self.frames_at_start
        return Summary(
            run_dir=str(self.run_dir),
            version=self.version,
            frames=self.frames,
            episodes=self.episodes,
            hours=self.elapsed_s() / 3600,
            fps=new_frames / max(time.monotonic() - self.start, 1e-9),
            restarts=self.restarts,
            reason=self.stop_reason,
            phases=list(self.log.phases_reached),
            last_record=self.log.last,
            new_frames=new_frames,
        )


@contextlib.contextmanager
def stop_signals(request_stop: Callable[[str], None]) -> Iterator[None]:
    """SIGINT and SIGTERM ask for a clean stop (`request_stop("signal SIGINT")`) while the
    block runs, on the main thread (elsewhere Python cannot install handlers)."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(
                sig, lambda signum, frame: request_stop(f"signal {signal.Signals(signum).name}")
            )
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _rid(state: WorkerState) -> bytes:
    return state.spec.routing_id.encode()


def _token() -> str:
    return secrets.token_hex(16)


def _empty_run_dir(run_dir: Path) -> None:
    """Remove all that a start of a new run made in `run_dir`, but the lock file."""
    for path in run_dir.iterdir():  # all made by this controller: no links among them
        if path.is_dir():
            shutil.rmtree(path)
        elif path.name != LOCK_NAME:
            path.unlink()


def _resume_checkpoint(run_dir: Path, model: ActorCritic) -> Checkpoint:
    """The newest checkpoint of a run to resume, loaded and fitting `model`, the run's network;
    an error naming what was found."""
    try:
        checkpoint = load_checkpoint(resolve_checkpoint(run_dir / "checkpoints"))
    except ValueError as err:  # a CheckpointError too: a file that verifies but does not load
        raise ValueError(
            f"--resume {run_dir}: nothing to resume from ({err}); start a new run with another "
            "name=..., or restore a checkpoint into that folder"
        ) from None
    weights = checkpoint.state.get("ppo", {}).get("model")  # (else the trainer says what it is)
    if weights is not None:
        # Refused here, before any worker starts: a trainer could not load it, and each
        # restart would fail the same way.
        problem = weights_problem(model, weights, network_config(checkpoint.meta))
        if problem:
            raise ValueError(
                f"--resume {run_dir}: {Path(checkpoint.path).name} does not fit this run's "
                f"network and game ({problem}); a run resumes with the agent.network and game "
                "settings it was trained with: drop the overrides that change them, or start a "
                "new run (another name=...)"
            )
    return checkpoint


def checkpoint_bytes_estimate(sizes: list[MessageSize]) -> int:
    """Size of a new run's checkpoints, from its messages' (`check_message_sizes`, parameters
    first): the parameter message three times (weights and the optimiser's two moments) and
    room for RNG states and metadata."""
    return 3 * sizes[0].nbytes + (256 << 10)


def hardware_info() -> dict:
    """What this run's controller host has, for comparisons with the baselines' hardware."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "gpus": gpus,
        "gpu_name": torch.cuda.get_device_name(0) if gpus else None,
    }
