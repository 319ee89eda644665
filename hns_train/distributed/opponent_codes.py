"""The pipeline's controllers: codes drawn per episode from the pool, and the models they name.

The codes are `hns_train.agents.opponents`' (LATEST, RANDOM, NOOP, a snapshot version v >= 0 or
a pool guest, v >= `GUEST_BASE`, 2**40), one per agent row in an inference request. Actors draw
a `TeamControllers` per episode from the run's `PolicyPool` (the rules live in
`hns_train.agents.pool`); policy workers turn codes back into models (policy.py) through
`agents.opponents.Snapshots`, the pod's rule too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hns_train.agents.opponents import code_of
from hns_train.agents.pool import PolicyPool, PoolConfig, TeamControllers

__all__ = ["OpponentDraw", "pool_dir"]


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
