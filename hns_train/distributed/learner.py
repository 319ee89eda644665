"""What every learner worker does around its PPO updates: the trainer (trainer.py: PPO on
chunks from actors) and the pod (pod_worker.py: simulates, acts and learns in one process).

A learner is a worker of kind "trainer": rank `spec.index` of `pipeline.n_trainers` (DDP through
ddp.py when there are several), on `pipeline.device`. It owns:
- the model and its `PPO`, restored on start from the newest valid checkpoint (`--resume` and a
  restarted learner continue with counters intact), else initialised from `agent.init` (a
  fine-tuning run, agents/transfer.py); every rank starts from rank 0's weights;
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
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

import numpy as np
import torch

from hns_train.agents.checkpoint import CheckpointDir, Counters, restore_training, training_state
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.agents.ppo import PPO
from hns_train.agents.transfer import initialise
from hns_train.config import PipelineConfig
from hns_train.distributed.contract import ContractError, check_counters
from hns_train.distributed.opponent_codes import pool_dir
from hns_train.distributed.params import resolve_device, state_dict_to_arrays
from hns_train.distributed.streams import ParamPublisher
from hns_train.distributed.worker import Worker, WorkerSpec
from hns_train.envs.contract import observation_shapes

log = logging.getLogger(__name__)


class LearnerWorker(Worker):
    kind = "trainer"

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        cfg = self.cfg
        self.device = resolve_device(cfg.pipeline.device)
        # Several ranks (DDP, ddp.py): rank = index; rank 0 alone publishes and writes.
        self.rank, self.ddp = spec.index, None
        self.agreed_stop = False
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
            self.ppo_config(),
            sync=None if self.ddp is None else self.ddp.sync,
            autocast_dtype=_autocast_dtype(cfg.pipeline.mixed_precision, self.device),
        )
        self.rng = np.random.default_rng([cfg.seed, 3])
        self.checkpoints = CheckpointDir(
            Path(spec.run_dir) / "checkpoints", keep=cfg.pipeline.keep_checkpoints
        )
        self.counters_from_controller = Counters()
        latest = self.checkpoints.latest()
        if latest is not None:
            info = restore_training(latest, self.ppo, np_rng=self.rng)
            self.counters_from_controller = info.counters
            log.warning("resumed from %s at version %d", latest.path, self.ppo.version)
        else:  # a fine-tuning run starts from another run's networks (agent.init)
            initialise(self.model, cfg.agent.init)
        if self.ddp is not None:  # every rank starts from rank 0's weights and normalisers
            self.ddp.broadcast_state(self.model)
        self.pool = PolicyPool(pool_dir(spec.run_dir), cfg.pool) if self.is_main else None
        if self.pool is not None:  # the untrained policy joins the pool before any update
            self.pool.maybe_add(self.version, self.model.state_dict())
        self.params = (
            ParamPublisher(spec.endpoints["params_bind"], security=self.security)
            if self.is_main
            else None
        )
        self.skipped_updates = 0
        self._last_checkpoint = time.monotonic()
        self._last_update_s: float | None = None  # duration of the newest update
        self._stop_at: float | None = None  # monotonic time the run stops at (stop.minutes)

    def ppo_config(self):
        """The PPO settings of this learner (`agent.ppo`; a pod replaces the passes)."""
        return self.cfg.agent.ppo

    @property
    def version(self) -> int:
        return self.ppo.version

    @property
    def pipeline(self) -> PipelineConfig:
        return self.cfg.pipeline

    def publish(self) -> None:
        if self.params is None:
            return
        arrays = state_dict_to_arrays(self.model.state_dict())
        self.params.publish(self.version, arrays, {"version": self.version})

    def ready_to_stop(self) -> bool:
        return self.ddp is None or self.agreed_stop

    def would_end_late(self) -> bool:
        """An update now would go past the run's end: its version would pass `stop.versions`,
        or it would still run when `stop.minutes` is up."""
        if self.cfg.stop.versions and self.version >= self.cfg.stop.versions:
            return True
        if self._stop_at is None or self._last_update_s is None:
            return False
        return time.monotonic() + self._last_update_s > self._stop_at

    # ------------------------------------------------------------------ updates
    def guarded_update(self, batch, size: int) -> dict | None:
        """One PPO update on `batch` (chunks or a rollout of `size` agent-steps), undone when it
        raises or leaves anything non-finite; its statistics, read from the device once."""
        self.control.send("busy")  # an update on a large batch can outlast the heartbeat timeout
        start = time.perf_counter()
        before = copy.deepcopy(self.ppo.state_dict())
        try:
            on_device = self.update_async(batch)
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
        self._last_update_s = time.perf_counter() - start
        if problem is None:
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

    def update_async(self, batch) -> dict[str, torch.Tensor]:
        """The update itself, statistics left on the device (a pod adds its own)."""
        return self.ppo.update_async(batch)

    def after_update(self) -> None:
        """Publish the new parameters; rank 0 writes a due checkpoint and pool snapshot."""
        self.publish()
        if not self.is_main:
            return
        p = self.pipeline
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

    # ------------------------------------------------------------------ control
    def on_control(self, message) -> None:
        if message.kind == "counters":
            m = message.meta
            try:
                check_counters(m)
            except ContractError as err:
                log.warning("counters from the controller dropped: %s", err)
                return
            self.counters_from_controller = Counters(
                version=self.version,
                frames=int(m["frames"]),
                episodes=int(m["episodes"]),
                wall_clock_s=float(m["wall_clock_s"]),
            )
            stop_in = m.get("stop_in_s")
            self._stop_at = None if stop_in is None else time.monotonic() + float(stop_in)

    def shutdown(self) -> None:
        if self.is_main:
            self.save_checkpoint()

    def close_streams(self) -> None:
        if self.params is not None:
            self.params.close()
        if self.pool is not None:
            self.pool.close()
        if self.ddp is not None:
            self.ddp.close()


def _autocast_dtype(mixed_precision: bool, device: torch.device) -> torch.dtype | None:
    """bf16 on GPUs that have it (no loss scaling needed); CPUs gain nothing from autocast."""
    if mixed_precision and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None
