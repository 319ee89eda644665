"""Count-based exploration: the paper's intrinsic-motivation baseline, as task `count_based`.

Every agent's reward on every step is `count_based.bonus_scale` / sqrt(N(s)), where s is the state
after the step, discretised, and N(s) the number of steps that ended in s so far, this one
included (1, 1/sqrt(2), 1/sqrt(3), ... while the state stays the same). The game's own reward,
preparation phase and out-of-bounds penalty are off (the `count_based` preset: the quadrant
world, 2 v 2, prep_fraction 0); the paper gives neither the scale nor the discretisation, so
these are our choices (docs/fidelity.md):

- s: the xy of every box and ramp (`count_based.state` "objects"), or of every box, ramp and
  agent ("objects_agents"), each rounded to the nearest multiple of `count_based.cell` (0.5 m,
  about a box's side: pushing a box by its own width is a new state, jitter is not; rounding to
  the nearest cell puts the cell edges at odd multiples of 0.25 m, which the layout's 0.1 m-grid
  start positions never sit on). Absent entities are parked at fixed spots, so they add nothing.
- N: one hash table (dict) per `HideAndSeekGame`, shared by its worlds and kept across
  episodes; counts are therefore per environment process (each actor counts its own visits,
  as exploration bonuses computed in the actors do), and start at zero with the process.
- `task_score`: the number of states the episode visited first (new to the table);
  `states_seen`, the table's size at the episode's end, goes to the episode info.

Cost: one rounding of (W, entities, 2) positions and one dict update per world per step
(docs/benchmarks.md has the measured per-step cost against the plain game).
"""

from __future__ import annotations

import math

import numpy as np

from hns_train.envs.tasks import Task

INDEX_DTYPE = np.int32  # cell indices: +-2^31 cells of 0.5 m covers any reachable position


class CountBased(Task, name="count_based", stat_names=("states_seen",)):
    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        self.counts: dict[bytes, int] = {}
        self.new_states = np.zeros(game.n_worlds, dtype=np.int64)  # this episode, per world
        self.bonus = np.zeros(game.n_worlds)  # the last step's bonus, per world
        self._with_agents = cfg.count_based.state == "objects_agents"
        self._inv_cell = 1.0 / cfg.count_based.cell

    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        self.new_states[worlds] = 0

    def state_keys(self) -> np.ndarray:
        """(W, K) cell indices of the discretised state of every world."""
        g = self.game
        pos = g.object_pos[..., :2]
        if self._with_agents:
            pos = np.concatenate([pos, g.agent_pos[..., :2]], axis=1)
        cells = np.rint(pos * self._inv_cell).astype(INDEX_DTYPE)
        return cells.reshape(g.n_worlds, -1)

    def reward(self, reward: np.ndarray) -> None:
        counts, scale, bonus = self.counts, self.cfg.count_based.bonus_scale, self.bonus
        keys = self.state_keys()
        flat, size = keys.tobytes(), keys.shape[1] * keys.itemsize  # one copy, sliced per world
        for w in range(len(keys)):
            key = flat[w * size : (w + 1) * size]
            n = counts.get(key, 0) + 1
            counts[key] = n
            if n == 1:
                self.new_states[w] += 1
            bonus[w] = scale / math.sqrt(n)
        reward[...] = bonus[:, None]

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return self.new_states[worlds].astype(np.float64)

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        return {"states_seen": np.full(len(worlds), float(len(self.counts)))}
