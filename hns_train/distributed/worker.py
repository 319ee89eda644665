"""What every worker shares: its spec, the control channel to the controller, and its loop;
how many workers of each kind a run starts (`worker_plan`), for every launcher alike.

A worker is a plain object with `step() -> bool` (one unit of work; True when it did some) and
`close()`. The same class runs under every launcher: the `serial` launcher calls `step()` of all
workers in turn in one process, the `local` launcher runs `run_worker(spec)` in a spawned
process, the `ray` launcher inside a Ray actor. Workers never block for long: every receive has
a timeout, so a stop request or a heartbeat is never more than ~`POLL_MS` away.

Control protocol (worker -> controller): `hello` once built, `heartbeat` every `heartbeat_s` seconds
with the worker's counters in `meta`, `busy` before a computation that may outlast the heartbeat
timeout (a learner's PPO update, a DDP rank's wait for its peers; the next heartbeat ends it,
within `update_timeout_s`), `stopped` when it has cleaned up (the trainer sends it after its
final checkpoint). Controller -> worker: `stop`, `counters`, and `alive` every `heartbeat_s`.
Every message a worker sends carries its `token` (made by the controller for this incarnation
of this worker); the controller drops messages without it.

CPU cost: a worker in its own process adds `cpu_s` to every heartbeat, the process CPU time
(all its threads: MuJoCo's, torch's, ZeroMQ's) since the previous one; the controller divides
it by the frames, rows and samples of the same period (`cpu/...` metrics). Under the serial
launcher all workers share one process, and no worker reports it.

Parent watch: a worker never outlives its controller. In its own process (local and ray
launchers) it asks Linux for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`), checks the
parent's pid every `PARENT_CHECK_S` (other systems, and a parent that died before the request),
and exits when it has heard nothing from the controller for `pipeline.controller_timeout_s`
(a worker whose parent is not the controller: a Ray actor). The serial launcher runs workers in
the controller's own process, where none of this applies. Other children (a population's member
runs, an eval worker's video renders) start by `start_module`, which asks Linux for a chosen
signal when their parent dies, and stop by `wait_or_kill`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hns_train.config import PACKAGE_ROOT, RunConfig, config_from_dict
from hns_train.distributed.security import RunKeys
from hns_train.distributed.streams import ControlClient

log = logging.getLogger(__name__)
POLL_MS = 5
PARENT_CHECK_S = 1.0
PR_SET_PDEATHSIG = 1


@dataclass
class WorkerSpec:
    """Everything a worker needs to start, in plain data (it crosses process boundaries)."""

    kind: str
    index: int
    config: dict[str, Any]
    run_dir: str
    endpoints: dict[str, Any] = field(default_factory=dict)
    incarnation: int = 0  # how many times this worker was restarted
    security: dict[str, Any] | None = None  # CURVE keys for cluster runs
    token: str = ""  # this incarnation's control-channel token (controller.py makes it)
    parent_pid: int = 0  # the process that must outlive this worker (0: whoever started it)

    @property
    def name(self) -> str:
        return f"{self.kind}{self.index}"

    @property
    def routing_id(self) -> str:
        """Socket identity of this incarnation: a restarted worker never meets its previous
        incarnation's connection, which sockets refuse to hand over (streams.py)."""
        return f"{self.name}.{self.incarnation}"

    def restarted(self, endpoints: dict[str, Any] | None = None, token: str = "") -> WorkerSpec:
        """The spec of this worker's next incarnation (optionally with new endpoints)."""
        return dataclasses.replace(
            self,
            incarnation=self.incarnation + 1,
            endpoints=self.endpoints if endpoints is None else endpoints,
            token=token,
        )


NO_ROOM_EXIT = 75  # a worker found no room on the disk (a write failed with ENOSPC)


def pool_dir(run_dir: str | Path) -> Path:
    """The run's policy pool (`agents/pool.py`): snapshots, guests and ratings."""
    return Path(run_dir) / "pool"


def worker_plan(cfg: RunConfig) -> dict[str, int]:
    """How many workers of each kind a run starts, in starting order (pods simulate
    themselves, pod_worker.py: no policy workers or actors beside them)."""
    p = cfg.pipeline
    pod = p.backend == "pod"
    return {
        "trainer": p.n_trainers,
        "policy": 0 if pod else p.n_policy_workers,
        "actor": 0 if pod else p.n_actors,
        "eval": cfg.eval.n_workers,
    }


class ControllerGone(RuntimeError):
    """The worker's controller died or has been silent too long: the worker must exit."""


class Worker:
    """Base class: control channel, heartbeats, the stop flag and what `close` lets go of."""

    poll_ms = POLL_MS  # longest wait per receive; the serial launcher sets 0 (nothing to wait for)

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.cfg: RunConfig = config_from_dict(spec.config, source=f"{spec.name} spec")
        # Cluster runs: every socket of this worker is a CURVE client/server with the run's keys.
        self.security = RunKeys.from_dict(spec.security) if spec.security else None
        self.max_message_bytes = self.cfg.pipeline.max_message_mb << 20  # one message, all frames
        # What `close` lets go of, the last taken first: streams, pools, shared memory, children.
        self.resources = contextlib.ExitStack()
        self.control = self.open_stream(
            ControlClient,
            spec.endpoints["control"],
            identity=spec.routing_id,
            token=spec.token or None,
        )
        self.stopping = False
        self.stopped = False
        self._last_beat = 0.0
        # In the controller's own process (inproc) a long step of one worker silences all.
        in_process = str(spec.endpoints["control"]).startswith("inproc://")
        self.controller_timeout_s = 0.0 if in_process else self.cfg.pipeline.controller_timeout_s
        self._last_heard = time.monotonic()
        self._cpu_at = time.process_time() if not in_process else None

    # --- to override
    def step(self) -> bool:
        raise NotImplementedError

    def counters(self) -> dict[str, Any]:
        """Numbers sent with every heartbeat (reset by the worker when they are deltas)."""
        return {}

    def on_control(self, message) -> None:
        """A control message other than `stop` (the trainer takes the run's counters)."""

    def shutdown(self) -> None:
        """Final work before `stopped` is reported (the trainer writes its checkpoint)."""

    def ready_to_stop(self) -> bool:
        """False while a requested stop still waits for peers (DDP trainers stop together)."""
        return True

    # --- shared
    def open_stream(self, stream_class, endpoint, **options):
        """A stream of this worker (streams.py), with the run's keys and message cap; `close`
        closes it."""
        stream = stream_class(
            endpoint, security=self.security, max_message_bytes=self.max_message_bytes, **options
        )
        return self.resources.enter_context(stream)

    def poll_control(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= self.cfg.pipeline.heartbeat_s:
            self._last_beat = now
            self._heartbeat()
        message = self.control.recv(timeout_ms=0)
        while message is not None:
            self._last_heard = now
            if message.kind == "stop":
                self.stopping = True
            elif message.kind != "alive":
                self.on_control(message)
            message = self.control.recv(timeout_ms=0)
        silent = time.monotonic() - self._last_heard
        if self.controller_timeout_s and silent > self.controller_timeout_s and not self.stopped:
            raise ControllerGone(
                f"nothing from the controller for {silent:.0f} s "
                f"(pipeline.controller_timeout_s={self.controller_timeout_s:g})"
            )
        if self.stopping and not self.stopped and self.ready_to_stop():
            self.shutdown()
            self._heartbeat()
            self.control.send("stopped")
            self.stopped = True

    def _heartbeat(self) -> None:
        meta = self.counters()
        if self._cpu_at is not None:
            cpu = time.process_time()
            meta["cpu_s"] = cpu - self._cpu_at
            self._cpu_at = cpu
        self.control.send("heartbeat", meta=meta)

    def close(self) -> None:
        self.resources.close()  # the control channel last


def build_worker(spec: WorkerSpec) -> Worker:
    """The worker class for `spec.kind` (imported here so each process loads only its own)."""
    if spec.kind == "actor":
        from hns_train.distributed.actor import ActorWorker as cls
    elif spec.kind == "policy":
        from hns_train.distributed.policy import PolicyWorker as cls
    elif spec.kind == "trainer" and spec.config.get("pipeline", {}).get("backend") == "pod":
        from hns_train.distributed.pod_worker import PodWorker as cls
    elif spec.kind == "trainer":
        from hns_train.distributed.trainer import TrainerWorker as cls
    elif spec.kind == "eval":
        from hns_train.distributed.evaluator import EvalWorker as cls
    else:
        raise ValueError(
            f"unknown worker kind {spec.kind!r}; allowed: {tuple(worker_plan(RunConfig()))}"
        )
    worker = cls(spec)
    # Hello once built: heartbeats are due from here on, not during start-up.
    worker.control.send("hello", meta={"pid": os.getpid(), "incarnation": spec.incarnation})
    return worker


class ParentWatch:
    """Exits with the parent: a death signal where Linux offers one, and a pid check."""

    def __init__(self, parent_pid: int = 0) -> None:
        self.parent = parent_pid or os.getppid()
        self._next_check = 0.0
        _die_with_parent()
        self.check()  # the parent may have died before the death signal was asked for

    def check(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + PARENT_CHECK_S
        if os.getppid() != self.parent:
            raise ControllerGone(f"the parent process {self.parent} is gone")


def _find_prctl():
    """libc's prctl, looked up once, in the parent: `_die_with_parent` also runs in children
    between fork and exec, where loading a library or logging could wait for ever on a lock that
    another thread of the parent held at the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as err:  # no prctl: the pid check still works
        log.warning("no parent-death signal (%s); watching the parent pid instead", err)
        return None


_PRCTL = _find_prctl()


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux for `sig` when the parent dies (also run in children before they exec)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def start_module(
    args: list[str], death_signal: int, env: dict | None = None, **popen: Any
) -> subprocess.Popen:
    """`python -m ARGS` in a new interpreter (not a fork: no socket or GL context of this process
    is shared), sent `death_signal` by Linux if this process dies first. The child finds this
    package without an install; `popen` goes to `subprocess.Popen` (stdout, stderr, ...)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        env=env,
        preexec_fn=functools.partial(_die_with_parent, death_signal),
        **popen,
    )


def wait_or_kill(process: subprocess.Popen, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for `process` to exit, then kill it: False when it was killed."""
    try:
        process.wait(timeout_s)
        return True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False


def run_worker(spec: WorkerSpec) -> None:
    """Process entry point: run one worker until the controller stops it or is gone."""
    # Ctrl-C goes to the whole process group; only the controller decides how to stop.
    if threading.current_thread() is threading.main_thread():  # (Ray may call from a thread)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # On a terminal a line first clears the controller's progress bar line (carriage return,
    # erase line), which the controller redraws below it: log lines never run into the bar.
    clear = "\r\x1b[K" if sys.stderr.isatty() else ""
    logging.basicConfig(level=logging.WARNING, format=f"{clear}%(asctime)s {spec.name} %(message)s")
    try:
        parent = ParentWatch(spec.parent_pid)
    except ControllerGone as err:
        log.warning("exiting: %s", err)
        return
    import torch

    torch.set_num_threads(max(1, int(spec.config["pipeline"]["torch_threads"])))
    try:
        worker = build_worker(spec)
        try:
            while not worker.stopped:
                worker.step()
                worker.poll_control()
                parent.check()
        finally:
            worker.close()
    except ControllerGone as err:
        log.warning("exiting: %s", err)
    except Exception as err:
        from hns_train.agents.checkpoint import disk_full

        if not disk_full(err):
            raise
        # A restart would meet the same full disk: this exit code tells the controller so.
        log.error("exiting: %s", err)
        sys.exit(NO_ROOM_EXIT)
