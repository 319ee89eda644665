"""Policy worker: batched inference for actors, with the latest parameters and pool snapshots.

Requests (`act`) carry, per agent row, the raw observation, LSTM state, episode-start flag and a
controller code (`agents/opponents.py`). The worker takes every request queued at once (up to
`max_inference_batch` rows: batches grow by themselves while the device is busy), groups rows
by controller (`act_by_controller`, the pod's dispatcher too), runs one forward pass per group,
and answers each actor with actions, log-probs,
de-normalised values and new states, plus the version of the latest parameters it used.

Parameters arrive over the parameter stream from the trainer (newest only; a restarted trainer
publishes an older version, which replaces the newer one it lost). Until the first parameters
arrive the worker answers nothing: an actor never acts with weights the trainer does not know.
Snapshots are loaded from the run's pool on demand and kept in a small LRU cache.

On one host a request's arrays lie in the actor's shared-memory block and the message carries
only their address (`shared_rows.py`); the worker reads them there, read-only.

Requests and parameters are checked against the run's contract (`contract.py`) as their streams
receive them, and dropped when they do not fit. Rows whose snapshot cannot be loaded (a code
naming no snapshot of the pool, or a broken file) are served by the latest policy, counted in
`unknown_snapshots`.
"""

from __future__ import annotations

import itertools
import logging
import time
from functools import partial

import numpy as np
import torch

from hns_train.agents.opponents import (
    LATEST,
    Snapshots,
    act_by_controller,
    controller_groups,
    fixed_actions,
)
from hns_train.agents.policy import ActorCritic, ActOutput
from hns_train.agents.pool import PolicyPool, SnapshotCache
from hns_train.distributed.contract import (
    ContractError,
    DropLog,
    check_params,
    check_request,
    param_layout,
)
from hns_train.distributed.devices import resolve_device
from hns_train.distributed.shared_rows import ADDRESS_KEYS, SharedReader
from hns_train.distributed.streams import InferenceServer, ParamSubscriber
from hns_train.distributed.worker import Worker, WorkerSpec, pool_dir
from hns_train.envs.contract import observation_shapes

log = logging.getLogger(__name__)


class PolicyWorker(Worker):
    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.device = resolve_device(self.cfg.pipeline.device)
        self.shapes = observation_shapes(self.cfg.game_config())
        self.model = self._new_model()
        self.server = self.open_stream(
            InferenceServer,
            spec.endpoints["inference"][spec.index],
            max_requests=max(1, self.cfg.pipeline.max_inference_batch),
            check=self._checked,
        )
        self.params = self.open_stream(
            ParamSubscriber,
            spec.endpoints["params"],
            check=partial(check_params, layout=param_layout(self.model)),
            what=f"{self.name} parameters",
        )
        self.snapshots: Snapshots | None = None  # opened when the first snapshot is asked for
        self.unusable = DropLog(f"{self.name} snapshot codes")
        self.rng = np.random.default_rng([self.cfg.seed, 2, spec.index])  # fixed opponents
        folder = spec.endpoints.get("shared_rows")
        lstm = self.cfg.agent.network.lstm_dim
        self.shared = SharedReader(folder, self.shapes, lstm) if folder else None
        if self.shared is not None:
            self.resources.callback(self.shared.close)
        self.version = -1
        self._rows = 0
        self._batches = 0
        self._forwards = 0  # model forward passes: one per controller in a batch
        self._busy_s = 0.0

    def _new_model(self) -> ActorCritic:
        return ActorCritic(self.shapes, self.cfg.agent.network, device=self.device).eval()

    def step(self) -> bool:
        message = self.params.poll_latest(timeout_ms=0)  # newest, or a new publisher's
        if message is not None:
            self.version = load_params(message, self.model, self.device)
        if self.version < 0:
            time.sleep(self.poll_ms / 1000)
            return False
        requests = self.server.recv(timeout_ms=self.poll_ms)
        if not requests:
            return False
        start = time.perf_counter()
        self._serve(requests)
        self._busy_s += time.perf_counter() - start
        self._batches += 1
        return True

    def _checked(self, message):
        """The request with its arrays (read from shared memory when it carries an address)
        checked against the run's contract: one that does not fit is dropped, never served."""
        arrays = message.arrays
        if ADDRESS_KEYS[0] in message.meta:
            if self.shared is None or arrays:
                raise ContractError(
                    "a shared-memory address reached a worker of a run without shared "
                    "memory, or came with arrays"
                )
            arrays = self.shared.read(message.meta)
        lstm = self.cfg.agent.network.lstm_dim
        message.arrays = check_request(arrays, self.model.layout, lstm)
        return message

    def _serve(self, requests) -> None:
        # every request passed `check_request`, which keeps exactly the layout's arrays
        parts = [m.arrays for _, m in requests]
        batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        obs = {k[4:]: v for k, v in batch.items() if k.startswith("obs/")}
        codes = batch["code"]
        out = self._act(obs, batch["state"], batch["episode_start"], codes)
        self._rows += len(codes)
        self._forwards += len(np.unique(codes[codes >= LATEST]))
        bounds = itertools.pairwise([0, *itertools.accumulate(len(p["code"]) for p in parts)])
        for (client, message), (start, end) in zip(requests, bounds, strict=True):
            # ActOutput's fields are the reply's arrays (`contract.reply_layout`)
            reply = {name: rows[start:end] for name, rows in out._asdict().items()}
            self.server.reply(
                client, "act_result", reply, {**message.meta, "version": self.version}
            )

    def _act(self, obs, state, starts, codes) -> ActOutput:
        """Host arrays in and out; every row acted by its controller (`act_by_controller`)."""
        device = self.device
        out = act_by_controller(
            controller_groups(codes, device),
            self._network,
            self._fixed,
            self.model.obs_to_tensors(obs, 1),
            torch.as_tensor(np.asarray(state, np.float32), device=device),
            torch.as_tensor(np.asarray(starts, bool), device=device),
        )
        return ActOutput(*(x.cpu().numpy() for x in out))

    def _network(self, code: int) -> ActorCritic:
        """The latest model, or snapshot `code`'s (the latest when that one is unusable)."""
        if code == LATEST:
            return self.model
        if self.snapshots is None:
            pool = self.resources.enter_context(
                PolicyPool(pool_dir(self.spec.run_dir), self.cfg.pool)
            )
            cache = SnapshotCache(pool, self.cfg.pool.snapshot_cache, build=self._loaded_model)
            self.snapshots = Snapshots(cache)
        model = self.snapshots.get(code)
        if model is None:
            why = self.snapshots.why(code)
            self.unusable.drop(f"snapshot {code} unusable, the latest plays it: {why}")
            return self.model
        return model

    def _loaded_model(self, state: dict) -> ActorCritic:
        model = self._new_model()
        model.load_state_dict(state)
        return model

    def _fixed(self, code: int, n: int) -> torch.Tensor:
        actions = fixed_actions(code, n, self.rng, self.cfg.agent.network.move_bins)
        return torch.as_tensor(actions, device=self.device)

    def counters(self) -> dict:
        out = {
            "version": self.version,
            "rows": self._rows,
            "batches": self._batches,
            "forwards": self._forwards,
            "busy_s": self._busy_s,
            "rejected": self.server.rejected + self.params.rejected,
            "unknown_snapshots": self.unusable.total,
            # snapshots read from disk: a cache too small for the pool shows here
            "snapshot_loads": self.snapshots.cache.misses if self.snapshots is not None else 0,
        }
        self._rows = self._batches = self._forwards = 0
        self._busy_s = 0.0
        return out


def load_params(message, model, device) -> int:
    """Load a parameter message that passed `contract.check_params` into `model`; its version."""
    model.load_state_dict(
        {k: torch.as_tensor(np.array(v), device=device) for k, v in message.arrays.items()}
    )
    return int(message.meta["version"])
