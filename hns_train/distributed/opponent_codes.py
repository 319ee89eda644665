"""The pipeline's controllers: codes drawn per episode from the pool, and the models they name.

The codes are `hns_train.agents.opponents`' (LATEST, RANDOM, NOOP, a snapshot version v >= 0 or
a pool guest, v >= `GUEST_BASE`, 2**40), one per agent row in an inference request. Actors draw
a `TeamControllers` per episode from the run's `PolicyPool` (the rules live in
`hns_train.agents.pool`); policy workers turn codes back into a model (`Opponents`, through the
pod's `Snapshots` rule: a snapshot code whose file is missing or broken is played by the latest
policy, counted, and not read again); fixed opponents act by `agents.opponents.fixed_actions`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hns_train.agents.opponents import Snapshots, code_of
from hns_train.agents.pool import PolicyPool, PoolConfig, SnapshotCache, TeamControllers
from hns_train.distributed.contract import DropLog

__all__ = ["OpponentDraw", "Opponents", "pool_dir"]


def pool_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "pool"


class OpponentDraw:
    """Per-episode draw of (hider code, seeker code); opens the pool only when it is needed."""

    def __init__(self, config: PoolConfig, run_dir: str | Path, seed) -> None:
        self.rng = np.random.default_rng(seed)
        self.config = config
        self.pool = PolicyPool(pool_dir(run_dir), config) if config.draws_opponents else None

    def draw(self) -> tuple[int, int]:
        teams = self.pool.draw(self.rng) if self.pool is not None else TeamControllers()
        return code_of(teams.hiders), code_of(teams.seekers)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


class Opponents:
    """Inference side: snapshot models by code (small LRU cache of built models)."""

    def __init__(
        self, config: PoolConfig, run_dir: str | Path, new_model: Callable, name: str = "opponents"
    ) -> None:
        self.run_dir = run_dir
        self.config = config
        self.new_model = new_model
        self._snapshots: Snapshots | None = None  # opened when the first snapshot is asked for
        self.unusable = DropLog(f"{name} snapshot codes")

    @property
    def loads(self) -> int:
        """Snapshots read from disk so far (a cache too small for the pool shows here)."""
        return self._snapshots.cache.misses if self._snapshots is not None else 0

    def _model(self, state: dict):
        model = self.new_model()
        model.load_state_dict(state)
        return model

    def snapshot_or_latest(self, code: int, latest):
        """The model of snapshot `code`, or `latest` when that snapshot is missing or broken
        (counted in `unusable`; the code is not looked up on disk again)."""
        if self._snapshots is None:
            pool = PolicyPool(pool_dir(self.run_dir), self.config)
            cache = SnapshotCache(pool, self.config.snapshot_cache, build=self._model)
            self._snapshots = Snapshots(cache)
        model = self._snapshots.get(code)
        if model is None:
            why = self._snapshots.why(code)
            self.unusable.drop(f"snapshot {int(code)} unusable, the latest plays it: {why}")
            return latest
        return model

    def close(self) -> None:
        if self._snapshots is not None:
            self._snapshots.cache.pool.close()
