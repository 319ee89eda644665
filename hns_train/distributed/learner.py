"""What every learner does around its PPO updates, held by both learner workers: the trainer
(trainer.py: PPO on chunks from actors) and the pod worker (pod_worker.py: simulates, acts and
learns in one process).

A learner worker is a worker of kind "trainer": rank `spec.index` of `pipeline.n_trainers` (DDP
through ddp.py when there are several), on `pipeline.device`. Its `Learner` owns:
- the model and its `PPO` (`agent.ppo`, the one set of PPO settings of every learner), restored
  on start from the newest valid checkpoint (`--resume` and a restarted learner continue with
  counters intact), else initialised from `agent.init` (a fine-tuning run,
  agents/transfer.py); every rank starts from rank 0's weights;
- the agreement of the ranks (`agree`): whether to train and whether to stop; a rank that may
  wait there for a slower peer says `busy` first, as before an update;
- guarded updates: an update that raises or leaves a non-finite weight, normaliser or optimiser
  moment is undone (the state before it is restored, the batch dropped, `skipped_updates`
  counted), so nothing non-finite is ever published, checkpointed or snapshotted;
- after every update (rank 0 only): the parameters published on the parameter stream (version =
  optimisation steps), a checkpoint every `checkpoint_every` versions or `checkpoint_every_s`
  seconds and at the stop, and a pool snapshot every `pool.snapshot_every` versions (the untrained
  policy joins the pool as version 0 before any update);
- the run's counters, which the controller owns and sends in `counters` control messages, with
  the time left under `stop.minutes`: a learner starts no update it expects to end after that,
  nor one past `stop.versions` (the controller sees the version only at the next heartbeat).

`LearnerWorker` is the worker around it: what the controller's messages ask of a learner
(counters, the stop, the final checkpoint) is the same for both kinds; how batches are made is
each kind's own `step`.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from hns_train.agents.checkpoint import CheckpointDir, Counters, restore_training, training_state
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.agents.ppo import PPO
from hns_train.agents.transfer import initialise
from hns_train.config import RunConfig
from hns_train.distributed.contract import ContractError, check_counters, state_dict_to_arrays
from hns_train.distributed.devices import resolve_device
from hns_train.distributed.streams import ParamPublisher
from hns_train.distributed.worker import Worker, WorkerSpec, pool_dir
from hns_train.envs.contract import observation_shapes

log = logging.getLogger(__name__)


class Learner:
    """The model, its PPO and everything a learner does around an update (module docstring)."""

    def __init__(
        self,
        cfg: RunConfig,
        spec: WorkerSpec,
        open_stream,
        busy: Callable[[], None],
        resources: contextlib.ExitStack,
    ) -> None:
        """`open_stream`, `busy` and `resources` are the worker's: its `open_stream`, its `busy`
        control message, and what its `close` lets go of (the pool and the rank group too)."""
        self.cfg = cfg
        self.busy = busy  # tells the controller an update may outlast the heartbeat timeout
        self.device = resolve_device(cfg.pipeline.device)
        # Several ranks (DDP, ddp.py): rank = index; rank 0 alone publishes and writes.
        self.rank, self.ddp = spec.index, None
        self.agreed_stop = False
        # The next agreement may wait for a peer longer than heartbeats allow (`agree`): a peer
        # still starting, still in its update or still simulating its rollout.
        self.peers_may_lag = True
        if cfg.pipeline.n_trainers > 1:
            from hns_train.distributed.ddp import DataParallel, rank_device

            self.device = rank_device(self.device, self.rank)
            self.ddp = DataParallel(
                self.rank,
                spec.endpoints["ddp"],
                self.device,
                cfg.pipeline.ddp_backend,
                cfg.pipeline.ddp_timeout_s,
            )
            resources.callback(self.ddp.close)
        self.is_main = self.rank == 0
        # The run's seed decides the initial networks (rank 0's reach every rank) and a pod's
        # sampled actions: torch's generator, per rank.
        seed = np.random.SeedSequence([cfg.seed, 5, self.rank]).generate_state(1)[0]
        torch.manual_seed(int(seed))
        self.model = ActorCritic(
            observation_shapes(cfg.game_config()), cfg.agent.network, device=self.device
        )
        self.ppo = PPO(
            self.model,
            cfg.agent.ppo,
            sync=self.ddp,
            autocast_dtype=_autocast_dtype(cfg.pipeline.mixed_precision, self.device),
        )
        self.rng = np.random.default_rng([cfg.seed, 3])
        self.checkpoints = CheckpointDir(
            Path(spec.run_dir) / "checkpoints", keep=cfg.pipeline.keep_checkpoints
        )
        self.counters_from_controller = Counters()
        latest = self.checkpoints.latest()
        if latest is not None:
            self.counters_from_controller = restore_training(latest, self.ppo, np_rng=self.rng)
            log.warning("resumed from %s at version %d", latest.path, self.ppo.version)
        else:  # a fine-tuning run starts from another run's networks (agent.init)
            initialise(self.model, cfg.agent.init)
        if self.ddp is not None:  # every rank starts from rank 0's weights and normalisers
            self.ddp.broadcast_state(self.model)
        self.pool = None
        if self.is_main:  # the untrained policy joins the pool before any update
            self.pool = resources.enter_context(PolicyPool(pool_dir(spec.run_dir), cfg.pool))
            self.pool.maybe_add(self.version, self.model.state_dict())
        self.params = (
            open_stream(ParamPublisher, spec.endpoints["params"]) if self.is_main else None
        )
        self.skipped_updates = 0
        self.duties_cpu_s = 0.0  # process CPU in after_update (rank 0's copies) since reported
        self._last_checkpoint = time.monotonic()
        self.last_update_s: float | None = None  # duration of the newest update
        self._stop_at: float | None = None  # monotonic time the run stops at (stop.minutes)
        self.last_stats: dict[str, float] = {}  # the newest kept update's statistics
        self._reset_window()
        self.publish()

    def _reset_window(self) -> None:
        """The per-heartbeat update counters (deltas since the last report)."""
        self.steps = 0  # kept updates
        self.update_s = 0.0  # time in updates, undone ones included
        self.samples = self.new_samples = 0  # agent-steps in kept updates; of those, first uses

    @property
    def version(self) -> int:
        return self.ppo.version

    def publish(self) -> None:
        if self.params is None:
            return
        arrays = state_dict_to_arrays(self.model.state_dict())
        self.params.publish(self.version, arrays, {"version": self.version})

    def agree(self, stop: bool, ready: bool) -> bool:
        """Whether to train now: this rank is `ready` and an update now would not go past the
        run's end (`would_end_late`); with several ranks, every rank must be so, and a stop
        asked by one is agreed by all (`agreed_stop`: no further update). Where a peer may be
        late (`peers_may_lag`) the rank says `busy` before it waits, once, not every step."""
        ready = ready and not self.would_end_late()
        if self.ddp is None:
            return ready
        if self.peers_may_lag:  # the wait is silent: the controller tolerates it as an update
            self.busy()
            self.peers_may_lag = False
        self.agreed_stop, ready = self.ddp.agree(stop=stop, ready=ready)
        return ready and not self.agreed_stop

    def would_end_late(self) -> bool:
        """An update now would go past the run's end: its version would pass `stop.versions`,
        or it would still run when `stop.minutes` is up."""
        if self.cfg.stop.versions and self.version >= self.cfg.stop.versions:
            return True
        if self._stop_at is None or self.last_update_s is None:
            return False
        return time.monotonic() + self.last_update_s > self._stop_at

    # ------------------------------------------------------------------ updates
    def guarded_update(self, update: Callable[[], dict], size: int) -> dict | None:
        """`update()` (one PPO update on a batch of `size` agent-steps, its statistics left on
        the device), undone when it raises or leaves anything non-finite; its statistics, read
        from the device once. After a kept update: `after_update`."""
        self.busy()
        self.peers_may_lag = True  # a peer's update may end after this one
        start = time.perf_counter()
        before = copy.deepcopy(self.ppo.state_dict())
        try:
            on_device = update()
            values = torch.stack(list(on_device.values())).tolist()  # the one host read
            stats = dict(zip(on_device, values, strict=True))
            problem = None
            if stats.pop("finite") != 1.0:
                problem = "a non-finite weight, normaliser or optimiser moment"
            elif not all(np.isfinite(v) for v in stats.values()):
                problem = "non-finite loss statistics"
        except (ValueError, RuntimeError, FloatingPointError) as err:
            if self.ddp is not None:
                raise  # the ranks' collectives are out of step now: the group restarts
            stats, problem = None, f"{type(err).__name__}: {err}"
        self.last_update_s = time.perf_counter() - start
        self.update_s += self.last_update_s
        if problem is None:
            self.after_update()
            return stats
        self.ppo.load_state_dict(before)
        self.skipped_updates += 1
        log.warning(
            "update %d undone (%s); the last good state is kept and its batch of %d agent-steps "
            "dropped (%d updates undone so far)",
            self.version + 1,
            problem,
            size,
            self.skipped_updates,
        )
        return None

    def count_update(self, stats: dict, samples: int, new_samples: int) -> None:
        """Count a kept update of `samples` agent-steps (`new_samples` of them trained on for
        the first time) and keep its statistics for the next report."""
        self.last_stats = stats
        self.steps += 1
        self.samples += samples
        self.new_samples += new_samples

    def report(self) -> dict:
        """What every learner sends with its heartbeat: the version, the updates since the
        last report (reset here), the newest statistics and the run's counters."""
        out = {
            "version": self.version,
            "steps": self.steps,
            "update_s": self.update_s,
            "samples": self.samples,
            "new_samples": self.new_samples,
            "skipped_updates": self.skipped_updates,
            "stats": self.last_stats,
            "counters": asdict(self.counters_from_controller),
        }
        self._reset_window()
        return out

    def after_update(self) -> None:
        """Publish the new parameters; rank 0 writes a due checkpoint and pool snapshot. Its
        CPU time is counted apart (`duties_cpu_s`): the other ranks wait for it at the next
        agreement."""
        cpu = time.process_time()
        try:
            self._duties()
        finally:
            self.duties_cpu_s += time.process_time() - cpu

    def _duties(self) -> None:
        self.publish()
        if not self.is_main:
            return
        p = self.cfg.pipeline
        due_s = p.checkpoint_every_s and time.monotonic() - self._last_checkpoint >= (
            p.checkpoint_every_s
        )
        if self.version % p.checkpoint_every == 0 or due_s:
            self.save_checkpoint()
        c = self.counters_from_controller
        self.pool.maybe_add(self.version, self.model.state_dict(), c.frames, c.episodes)

    def save_checkpoint(self) -> Path | None:
        if self.ppo.finite().item() != 1.0:  # never reached after guarded_update; a last guard
            log.error("checkpoint not written: a non-finite tensor in the learner's state")
            return None
        self._last_checkpoint = time.monotonic()
        state, meta = training_state(
            self.ppo, self.counters_from_controller, self.cfg.to_dict(), np_rng=self.rng
        )
        return self.checkpoints.save(self.version, state, meta)

    def take_counters(self, meta: dict) -> None:
        """The run's counters from the controller (and the time left under stop.minutes)."""
        try:
            check_counters(meta)
        except ContractError as err:
            log.warning("counters from the controller dropped: %s", err)
            return
        self.counters_from_controller = Counters(
            version=self.version,
            frames=int(meta["frames"]),
            episodes=int(meta["episodes"]),
            wall_clock_s=float(meta["wall_clock_s"]),
        )
        stop_in = meta.get("stop_in_s")
        self._stop_at = None if stop_in is None else time.monotonic() + float(stop_in)


# glibc's malloc (mallopt's parameter numbers, malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# blocks up to this size come from the heap, and are reused once freed (glibc's largest on 64-bit)
MMAP_THRESHOLD_BYTES = 32 << 20
# free memory at the top of the heap kept for the next update rather than given back
TRIM_THRESHOLD_BYTES = 1 << 30


def reuse_freed_memory(in_own_process: bool) -> None:
    """An update's activations come from the heap and stay there for the next update.

    Memory given back to the system comes back as fresh pages, each faulted in and zeroed by
    the kernel on first touch: with every block of 1 MiB and more on mmap (and so given back
    when freed), one 5,120-sample update (quadrant, one thread) faulted 300 k pages and took
    1.42 s, 0.5 s of it in the kernel, against 0.97 s with the heap reused; a pod of 64 worlds
    ran 3.35 CPU ms per frame against 2.93. A learner keeps its update's memory resident
    between updates (the ranks of a run update together, so a node holds its peak at each
    update anyway); PPO's passes of at most `cpu_pass_samples` keep its blocks under the
    heap's 32 MiB limit, and that pod's peak is 1.1-1.2 GiB (1.42 before). Only in a
    learner's own process (the local and Ray launchers), and only with glibc.
    """
    if not in_own_process or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):  # another C library: its own policy stays
        log.debug("mallopt unavailable: the allocator keeps its own thresholds")


class LearnerWorker(Worker):
    """A worker of kind "trainer" holding a `Learner`: the controller's counters, the stop
    (together with the other ranks) and the final checkpoint. Each kind's `step` makes its
    batches and hands the update to `learner.guarded_update`."""

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        reuse_freed_memory(self._cpu_at is not None)
        self.learner = Learner(
            self.cfg, spec, self.open_stream, lambda: self.control.send("busy"), self.resources
        )
        self.rank = self.learner.rank

    def on_control(self, message) -> None:
        if message.kind == "counters":
            self.learner.take_counters(message.meta)

    def ready_to_stop(self) -> bool:
        return self.learner.ddp is None or self.learner.agreed_stop

    def shutdown(self) -> None:
        if self.learner.is_main:
            self.learner.save_checkpoint()


def _autocast_dtype(mixed_precision: bool, device: torch.device) -> torch.dtype | None:
    """bf16 on GPUs that have it (no loss scaling needed); CPUs gain nothing from autocast."""
    if mixed_precision and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None
