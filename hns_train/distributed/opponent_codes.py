"""The pipeline's controllers: codes drawn per episode from the pool, and the models they name.

The codes are `hns_train.agents.opponents`' (LATEST, RANDOM, NOOP, a snapshot version v >= 0 or
a pool guest, v >= `GUEST_BASE`, 2**40), one per agent row in an inference request. Actors draw
a `TeamControllers` per episode from the run's `PolicyPool` (the rules live in
`hns_train.agents.pool`); policy workers turn codes back into a model or a fixed opponent. A
snapshot code whose file is missing or broken is played by the latest policy and counted; up
to `MAX_BAD_CODES` such codes are remembered, so none is read again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hns_train.agents.opponents import LATEST, NOOP, RANDOM, code_of, fixed_opponent
from hns_train.agents.pool import PolicyPool, PoolConfig, SnapshotCache, TeamControllers
from hns_train.distributed.contract import DropLog

__all__ = ["LATEST", "NOOP", "RANDOM", "OpponentDraw", "Opponents", "code_of", "pool_dir"]
MAX_BAD_CODES = 10_000  # snapshot codes remembered as unusable (not looked up on disk again)


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
    """Inference side: snapshot models (small LRU cache) and fixed teams by code."""

    def __init__(
        self,
        config: PoolConfig,
        run_dir: str | Path,
        new_model: Callable,
        seed,
        name: str = "opponents",
    ) -> None:
        self.run_dir = run_dir
        self.config = config
        self.new_model = new_model
        self.rng = np.random.default_rng(seed)
        self._cache: SnapshotCache | None = None  # opened when the first snapshot is asked for
        self.unusable = DropLog(f"{name} snapshot codes")
        self._bad_codes: set[int] = set()

    @property
    def loads(self) -> int:
        """Snapshots read from disk so far (a cache too small for the pool shows here)."""
        return self._cache.misses if self._cache is not None else 0

    def snapshot(self, version: int):
        if self._cache is None:
            pool = PolicyPool(pool_dir(self.run_dir), self.config)
            self._cache = SnapshotCache(pool, self.config.snapshot_cache, build=self._model)
        return self._cache.get(version)

    def _model(self, state: dict):
        model = self.new_model()
        model.load_state_dict(state)
        return model

    def snapshot_or_latest(self, code: int, latest):
        """The model of snapshot `code`, or `latest` when that snapshot is missing or broken
        (counted in `unusable`; the code is not looked up on disk again)."""
        code = int(code)
        if code not in self._bad_codes:
            try:
                return self.snapshot(code)
            except (OSError, ValueError, RuntimeError) as err:  # no such snapshot, a broken file
                if len(self._bad_codes) < MAX_BAD_CODES:
                    self._bad_codes.add(code)
                self.unusable.drop(f"snapshot {code} unusable, the latest plays it: {err}")
                return latest
        self.unusable.drop(f"snapshot {code} unusable; the latest plays it")
        return latest

    def fixed_actions(self, code: int, rows: int) -> np.ndarray:
        name = {RANDOM: "random", NOOP: "noop"}.get(code)
        if name is None:
            raise ValueError(f"controller code {code} is not a fixed opponent")
        fake = {"observation_self": np.zeros((rows, 1), np.float32)}
        return fixed_opponent(name)(fake, self.rng)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.pool.close()
