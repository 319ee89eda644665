"""Trainer worker: PPO on chunks from actors, with sample reuse and a staleness cut.

Chunks arrive over the sample stream and wait in a buffer of at most `sample_buffer_chunks`.
An optimisation step takes the `batch_chunks` least-used chunks (newest first among equals),
so each chunk is trained on up to `reuse` times (the paper: about 4) before it leaves. A chunk
whose oldest producing version is more than `max_staleness` versions behind the current one is
dropped, on arrival or when its turn comes.

Chunks are checked against the run's contract as the sample stream receives them
(`contract.check_chunk`: exact observation keys and shapes, chunk length, LSTM size, action
ranges, finite floats); a chunk that does not fit is dropped and counted. Guarded updates,
publishing, checkpoints, pool snapshots, resume and the run's counters (and the stop on time)
are the `Learner`'s this worker holds, see learner.py.

Several trainers (`pipeline.n_trainers` > 1, see ddp.py): trainer i is rank i with its own sample
endpoint and `batch_chunks / n_trainers` chunks per step; ranks agree every iteration whether to
train and whether to stop, average their gradients, and only rank 0 publishes parameters and
writes checkpoints and snapshots.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from hns_train.agents.chunks import Chunk, stack_chunks
from hns_train.distributed.contract import ContractError, check_chunk
from hns_train.distributed.learner import LearnerWorker
from hns_train.distributed.streams import SampleReceiver
from hns_train.distributed.worker import WorkerSpec

log = logging.getLogger(__name__)
MAX_RECV_PER_STEP = 64


@dataclass
class Sample:
    chunk: Chunk
    version: int  # oldest parameters version that produced it
    uses: int = 0
    arrival: int = 0


class TrainerWorker(LearnerWorker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.samples = self.open_stream(
            SampleReceiver,
            spec.endpoints["samples"][self.rank],
            hwm=16,
            check=self._check,
            what=f"{self.name} chunks",
        )
        self.buffer: list[Sample] = []
        self._arrivals = 0
        self._received = self._dropped_stale = 0
        self._rejected_reported = 0
        self._staleness: list[float] = []
        self._reuse: list[float] = []

    # ------------------------------------------------------------------ loop
    def step(self) -> bool:
        if self.learner.agreed_stop:
            return False
        got = self._receive()
        ready = self._usable()
        # Every iteration: stop together, or train together only when every rank can.
        if not self.learner.agree(stop=self.stopping, ready=len(ready) >= self.batch_size):
            return got > 0 and not self.learner.agreed_stop
        self._train(ready)
        return True

    @property
    def batch_size(self) -> int:
        """Chunks per optimisation step on this rank."""
        return self.cfg.pipeline.batch_chunks // self.cfg.pipeline.n_trainers

    def _receive(self) -> int:
        before = self._received
        timeout = self.poll_ms
        while self._received - before < MAX_RECV_PER_STEP:
            chunk = self.samples.recv(timeout_ms=timeout)  # checked by `_check`
            timeout = 0
            if chunk is None:
                break
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
        return self._received - before

    def _check(self, message) -> Chunk:
        """The chunk a sample message carries, when it fits the run's contract."""
        p, net = self.cfg.pipeline, self.cfg.agent.network
        if message.kind != "chunk":
            raise ContractError(f"a {message.kind!r} message on the sample stream")
        return check_chunk(
            message.arrays,
            self.learner.model.layout,
            chunk_len=p.chunk_len,
            bptt_len=self.cfg.agent.ppo.bptt_len,
            lstm_dim=net.lstm_dim,
            action_sizes=net.action_sizes,
        )

    def _stale(self, version: int) -> bool:
        return version < self.learner.version - self.cfg.pipeline.max_staleness

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
        size = sum(s.chunk.num_steps * s.chunk.batch_size for s in batch)
        chunks = stack_chunks([s.chunk for s in batch])
        stats = self.learner.guarded_update(lambda: self.learner.ppo.update_async(chunks), size)
        if stats is None:  # undone: the batch is what broke it, it goes
            drop = {id(s) for s in batch}
            self.buffer = [s for s in self.buffer if id(s) not in drop]
            return
        first_uses = sum(s.chunk.num_steps * s.chunk.batch_size for s in batch if s.uses == 0)
        self.learner.count_update(stats, size, first_uses)
        for s in batch:
            self._staleness.append(self.learner.version - 1 - s.version)
            s.uses += 1
        # reuse = times a chunk was trained on when it leaves the buffer (used up, stale, overflow)
        self._reuse.extend(s.uses for s in batch if s.uses >= p.reuse)
        self.buffer = [s for s in self.buffer if s.uses < p.reuse]

    def counters(self) -> dict:
        out = {
            **self.learner.report(),
            "received": self._received,
            "dropped_stale": self._dropped_stale,
            "rejected": self.samples.rejected - self._rejected_reported,
            "buffer": len(self.buffer),
            "staleness": float(np.mean(self._staleness)) if self._staleness else None,
            "reuse": float(np.mean(self._reuse)) if self._reuse else None,
        }
        self._rejected_reported = self.samples.rejected
        self._received = self._dropped_stale = 0
        self._staleness, self._reuse = [], []
        return out
