"""Trainer worker: PPO on chunks from actors, with sample reuse and a staleness cut.

Chunks arrive over the sample stream and wait in a buffer of at most `sample_buffer_chunks`.
An optimisation step takes the `batch_chunks` least-used chunks (newest first among equals),
so each chunk is trained on up to `reuse` times (the paper: about 4) before it leaves. A chunk
whose oldest producing version is more than `max_staleness` versions behind the current one is
dropped, on arrival or when its turn comes.

Chunks are checked against the run's contract on arrival (`contract.check_chunk`: exact
observation keys and shapes, chunk length, LSTM size, action ranges, finite floats); a chunk
that does not fit is dropped and counted. An update that fails or leaves a non-finite weight,
normaliser or optimiser moment is undone: the state before it is restored, the batch is
dropped and the event is logged and counted (`skipped_updates`), so nothing non-finite is ever
published, checkpointed or snapshotted.

After every step the new parameters are published (version = optimisation steps); every
`checkpoint_every` versions or `checkpoint_every_s` seconds, whichever comes first, and when
the run stops, a checkpoint is written (weights, optimiser, normalisers, counters, RNG states);
every `pool.snapshot_every` versions a frozen snapshot joins the pool. On start the newest valid
checkpoint is restored, so `--resume` and a restarted trainer continue with counters intact.
The run's counters (frames, episodes, hours) come from the controller, which owns them, in
`counters` control messages. Those also say how long the run has left under `stop.minutes`
(`stop_in_s`); the trainer starts no update it expects to end after that (by the duration of
its last one), so the run stops on time instead of waiting for it.

Several trainers (`pipeline.n_trainers` > 1, see ddp.py): trainer i is rank i with its own sample
endpoint and `batch_chunks / n_trainers` chunks per step; ranks agree every iteration whether to
train and whether to stop, average their gradients, and only rank 0 publishes parameters and
writes checkpoints and snapshots.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from hns_train.agents.checkpoint import CheckpointDir, Counters, restore_training, training_state
from hns_train.agents.chunks import Chunk, stack_chunks
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.agents.ppo import PPO
from hns_train.distributed.contract import ContractError, DropLog, check_chunk, check_counters
from hns_train.distributed.opponent_codes import pool_dir
from hns_train.distributed.params import resolve_device, state_dict_to_arrays
from hns_train.distributed.streams import ParamPublisher, SampleReceiver
from hns_train.distributed.worker import Worker, WorkerSpec
from hns_train.envs.contract import observation_shapes

log = logging.getLogger(__name__)
MAX_RECV_PER_STEP = 64


@dataclass
class Sample:
    chunk: Chunk
    version: int  # oldest parameters version that produced it
    uses: int = 0
    arrival: int = 0


class TrainerWorker(Worker):
    kind = "trainer"

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        cfg = self.cfg
        self.device = resolve_device(cfg.pipeline.device)
        # Several trainers (DDP, ddp.py): rank = index; rank 0 alone publishes and writes.
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
        self.model = ActorCritic(
            observation_shapes(cfg.game_config()), cfg.agent.network, device=self.device
        )
        self.ppo = PPO(
            self.model,
            cfg.agent.ppo,
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
        if self.ddp is not None:  # every rank starts from rank 0's weights and normalisers
            self.ddp.broadcast_state(self.model)
        self.pool = PolicyPool(pool_dir(spec.run_dir), cfg.pool) if self.is_main else None
        if self.pool is not None:  # the untrained policy joins the pool before any update
            self.pool.maybe_add(self.version, self.model.state_dict())
        self.samples = SampleReceiver(
            spec.endpoints["samples_bind"][self.rank],
            hwm=16,
            security=self.security,
            max_message_bytes=self.max_message_bytes,
        )
        self.params = (
            ParamPublisher(spec.endpoints["params_bind"], security=self.security)
            if self.is_main
            else None
        )
        self.buffer: list[Sample] = []
        self._arrivals = 0
        self._last_stats: dict[str, float] = {}
        self._received = self._dropped_stale = 0
        self.bad_chunks = DropLog(f"{self.name} chunks")
        self._rejected_reported = 0
        self.skipped_updates = 0
        self._last_checkpoint = time.monotonic()
        self._steps = 0
        self._update_s = 0.0
        self._samples = self._new_samples = 0  # agent-steps in updates; of those, first uses
        self._last_update_s: float | None = None  # duration of the newest PPO update
        self._stop_at: float | None = None  # monotonic time the run stops at (stop.minutes)
        self._staleness: list[float] = []
        self._reuse: list[float] = []
        self.publish()

    @property
    def version(self) -> int:
        return self.ppo.version

    def publish(self) -> None:
        if self.params is None:
            return
        arrays = state_dict_to_arrays(self.model.state_dict())
        self.params.publish(self.version, arrays, {"version": self.version})

    # ------------------------------------------------------------------ loop
    def step(self) -> bool:
        if self.agreed_stop:
            return False
        got = self._receive()
        ready = self._usable()
        have = len(ready) >= self.batch_size and not self._would_end_late()
        if self.ddp is not None:
            # Every iteration: stop together, or train together only when every rank can.
            self.agreed_stop, have = self.ddp.agree(stop=self.stopping, ready=have)
            if self.agreed_stop:
                return False
        if not have:
            return got > 0
        self._train(ready)
        return True

    def _would_end_late(self) -> bool:
        """An update now would still run when the run is due to stop."""
        if self._stop_at is None or self._last_update_s is None:
            return False
        return time.monotonic() + self._last_update_s > self._stop_at

    @property
    def batch_size(self) -> int:
        """Chunks per optimisation step on this rank."""
        return self.cfg.pipeline.batch_chunks // self.cfg.pipeline.n_trainers

    def ready_to_stop(self) -> bool:
        return self.ddp is None or self.agreed_stop

    def _receive(self) -> int:
        count = 0
        timeout = self.poll_ms
        while count < MAX_RECV_PER_STEP:
            message = self.samples.recv(timeout_ms=timeout)
            timeout = 0
            if message is None:
                break
            count += 1
            try:
                chunk = self._check(message)
            except ContractError as err:
                self.bad_chunks.drop(str(err))
                continue
            self._received += 1
            if self.cfg.pipeline.discard_samples:
                continue
            version = int(chunk.policy_version.min())
            if self._stale(version):
                self._dropped_stale += 1
                continue
            self._arrivals += 1
            self.buffer.append(Sample(chunk, version, arrival=self._arrivals))
        overflow = len(self.buffer) - self.cfg.pipeline.sample_buffer_chunks
        if overflow > 0:  # the oldest arrivals go first
            self.buffer.sort(key=lambda s: s.arrival)
            self._reuse.extend(s.uses for s in self.buffer[:overflow])
            del self.buffer[:overflow]
        return count

    @property
    def _rejected(self) -> int:
        return self.bad_chunks.total + self.samples.rejected

    def _check(self, message) -> Chunk:
        p, net = self.cfg.pipeline, self.cfg.agent.network
        if message.kind != "chunk":
            raise ContractError(f"a {message.kind!r} message on the sample stream")
        return check_chunk(
            message.arrays,
            self.model.layout,
            chunk_len=p.chunk_len,
            bptt_len=self.cfg.agent.ppo.bptt_len,
            lstm_dim=net.lstm_dim,
            action_sizes=net.action_sizes,
        )

    def _stale(self, version: int) -> bool:
        return version < self.version - self.cfg.pipeline.max_staleness

    def _usable(self) -> list[Sample]:
        fresh = [s for s in self.buffer if not self._stale(s.version)]
        self._dropped_stale += len(self.buffer) - len(fresh)
        self._reuse.extend(s.uses for s in self.buffer if self._stale(s.version))
        self.buffer = fresh
        return fresh

    def _train(self, ready: list[Sample]) -> None:
        p = self.cfg.pipeline
        ready.sort(key=lambda s: (s.uses, -s.arrival))
        batch = ready[: self.batch_size]
        # An update on a large batch can outlast the heartbeat timeout on a CPU.
        self.control.send("busy")
        start = time.perf_counter()
        stats = self._guarded_update([s.chunk for s in batch])
        self._last_update_s = time.perf_counter() - start
        self._update_s += self._last_update_s
        if stats is None:  # undone: the batch is what broke it, it goes
            drop = {id(s) for s in batch}
            self.buffer = [s for s in self.buffer if id(s) not in drop]
            return
        self._last_stats = stats
        self._steps += 1
        for s in batch:
            size = s.chunk.num_steps * s.chunk.batch_size
            self._samples += size
            self._new_samples += size if s.uses == 0 else 0
            self._staleness.append(self.version - 1 - s.version)
            s.uses += 1
        # reuse = times a chunk was trained on when it leaves the buffer (used up, stale, overflow)
        self._reuse.extend(s.uses for s in batch if s.uses >= p.reuse)
        self.buffer = [s for s in self.buffer if s.uses < p.reuse]
        self.publish()
        if not self.is_main:
            return
        due_s = p.checkpoint_every_s and time.monotonic() - self._last_checkpoint >= (
            p.checkpoint_every_s
        )
        if self.version % p.checkpoint_every == 0 or due_s:
            self.save_checkpoint()
        c = self.counters_from_controller
        self.pool.maybe_add(self.version, self.model.state_dict(), c.frames, c.episodes)

    def _guarded_update(self, chunks: list[Chunk]) -> dict | None:
        """One PPO update, undone when it raises or leaves anything non-finite."""
        before = copy.deepcopy(self.ppo.state_dict())
        try:
            stats = self.ppo.update(stack_chunks(chunks))
            problem = _non_finite(self.ppo.state_dict())
            if problem is None and not all(np.isfinite(v) for v in stats.values()):
                problem = "non-finite loss statistics"
        except (ValueError, RuntimeError, FloatingPointError) as err:
            if self.ddp is not None:
                raise  # the ranks' collectives are out of step now: the group restarts
            stats, problem = None, f"{type(err).__name__}: {err}"
        if problem is None:
            return stats
        self.ppo.load_state_dict(before)
        self.skipped_updates += 1
        log.warning(
            "update %d undone (%s); the last good state is kept and %d chunks dropped "
            "(%d updates undone so far)",
            self.version + 1,
            problem,
            len(chunks),
            self.skipped_updates,
        )
        return None

    def save_checkpoint(self) -> Path | None:
        problem = _non_finite(self.ppo.state_dict())
        if problem is not None:  # never reached after _guarded_update; a last guard
            log.error("checkpoint not written: %s", problem)
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

    def counters(self) -> dict:
        out = {
            "version": self.version,
            "steps": self._steps,
            "update_s": self._update_s,
            "samples": self._samples,
            "new_samples": self._new_samples,
            "received": self._received,
            "dropped_stale": self._dropped_stale,
            "rejected": self._rejected - self._rejected_reported,
            "skipped_updates": self.skipped_updates,
            "buffer": len(self.buffer),
            "staleness": float(np.mean(self._staleness)) if self._staleness else None,
            "reuse": float(np.mean(self._reuse)) if self._reuse else None,
            "stats": self._last_stats,
            "counters": asdict(self.counters_from_controller),
        }
        self._rejected_reported = self._rejected
        self._steps = self._received = self._dropped_stale = 0
        self._samples = self._new_samples = 0
        self._update_s = 0.0
        self._staleness, self._reuse = [], []
        return out

    def shutdown(self) -> None:
        if self.is_main:
            self.save_checkpoint()

    def close_streams(self) -> None:
        self.samples.close()
        if self.params is not None:
            self.params.close()
        if self.pool is not None:
            self.pool.close()
        if self.ddp is not None:
            self.ddp.close()


def _non_finite(state, where: str = "state") -> str | None:
    """Where the first non-finite tensor of a nested state (weights, buffers, optimiser
    moments) is, or None."""
    if isinstance(state, torch.Tensor):
        bad = state.is_floating_point() and not bool(torch.isfinite(state).all())
        return f"{where} is non-finite" if bad else None
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        return None
    for key, value in items:
        problem = _non_finite(value, f"{where}/{key}")
        if problem is not None:
            return problem
    return None


def _autocast_dtype(mixed_precision: bool, device: torch.device) -> torch.dtype | None:
    """bf16 on GPUs that have it (no loss scaling needed); CPUs gain nothing from autocast."""
    if mixed_precision and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None
