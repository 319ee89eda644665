"""`VectorGame`: N worlds of one preset for actor workers, with automatic reset.

Stepping returns stacked numpy arrays in a `VectorStep`. The auto-reset contract is the one the
sample-chunk format (`hns_train/agents/chunks.py`) relies on:

- A world whose episode ended this step (`truncated[w]`; the game never terminates) is reset
  before `step` returns: `obs` rows of that world are the NEW episode's first observation and
  `agent_present` is the new episode's.
- The finished episode's last observation is in `final_obs` (rows valid where `truncated`), with
  `final_agent_present`, so an actor can evaluate V(final obs) for `truncated_value`.
- `rewards` are the finished step's rewards (of the old episode, for `final_agent_present`).
- `episode_stats` holds the statistics of the episodes that ended this step (the keys of
  `stat_keys`: the game's, then its task's; one value per world, NaN where the world did not
  finish): reported once.

Seeding: `seed` spawns one `numpy.random.SeedSequence` per world (`world_seeds`); world w draws
every episode's layout from one generator seeded with `world_seeds[w]`, so world w of a
`VectorGame` replays exactly like `HideAndSeekGame(cfg, 1)` reset with
`seeds=[world_seeds[w]]` and reset again whenever its episode ends.

Buffers: `reset` and `step` copy observations out of the game's own buffers (which the next step
overwrites) into new arrays, or into the arrays passed as `out` / `final_out` (W, A, ...) views
of the same keys: an actor passes slots of its shared-memory block (`distributed/shared_rows.py`)
so each observation is written once on its way to the policy.

Speed: physics and rays run in `mujoco.batch` on `threads` threads (see game.py); the rules and
observations are numpy over all worlds at once. Results do not depend on `threads`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hns_train.envs.config import GameConfig, game_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.tasks import stat_keys


class VectorStep(NamedTuple):
    """One step of every world. Shapes: W worlds, A agent slots. `VectorGame` fills it with
    numpy arrays; `WarpGame` (envs/warp) with torch tensors on its device, `episode_stats`
    included (so a pod sums them on the device with `nansum`)."""

    obs: dict[str, np.ndarray]  # (W, A, ...) next observation (new episode's first where reset)
    rewards: np.ndarray  # (W, A) float32, of the step just taken
    truncated: np.ndarray  # (W,) bool: the episode ended with this step (and was reset)
    agent_present: np.ndarray  # (W, A) bool: agents of the episode `obs` belongs to
    final_obs: dict[str, np.ndarray]  # (W, A, ...) last observation of the finished episode
    final_agent_present: np.ndarray  # (W, A) bool: agents of the episode `rewards` belong to
    episode_stats: dict[str, np.ndarray]  # stat keys -> (W,) float64, NaN where not truncated


class VectorGame:
    """`n_worlds` worlds of one game config, stepped together and reset automatically.

    cfg: a `GameConfig` or a preset name. threads: MuJoCo threads for physics and rays.
    """

    def __init__(
        self,
        cfg: GameConfig | str,
        n_worlds: int,
        seed: int | None = None,
        threads: int = 1,
    ):
        cfg = game_config(cfg)
        self.cfg = cfg
        self.n_worlds = n_worlds
        self.game = HideAndSeekGame(cfg, n_worlds, threads=threads)
        self.n_agents = self.game.n_agents
        self.action_nvec = self.game.action_nvec
        self.stat_keys = stat_keys(cfg)
        self._seed = seed
        self.world_seeds: tuple[np.random.SeedSequence, ...] = ()
        self._started = False

    @property
    def agent_present(self) -> np.ndarray:
        return self.game.agent_present.copy()

    def reset(
        self, seed: int | None = None, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Start a new episode in every world; returns the first observations (W, A, ...).

        seed: new per-world seeds spawned from it; None keeps the constructor's seed on the
        first call and continues every world's generator afterwards.
        out: arrays to write the observations into (returned), instead of new ones.
        """
        if seed is not None or not self._started:
            root = np.random.SeedSequence(self._seed if seed is None else seed)
            self.world_seeds = tuple(root.spawn(self.n_worlds))
            obs = self.game.reset(seeds=list(self.world_seeds))
        else:
            obs = self.game.reset()
        self._started = True
        return _copy(obs, out)

    def step(
        self,
        actions: np.ndarray,
        out: dict[str, np.ndarray] | None = None,
        final_out: dict[str, np.ndarray] | None = None,
    ) -> VectorStep:
        """Advance every world by one env step. actions: (W, A, 5) integers.

        out / final_out: arrays to write `obs` / `final_obs` into, instead of new ones;
        `final_obs` is written only when an episode ended (its rows are valid where
        `truncated`, as always)."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        obs, rewards, truncated, infos = self.game.step(actions)
        final_present = self.game.agent_present.copy()
        done = np.flatnonzero(truncated)
        stats = {k: np.full(self.n_worlds, np.nan) for k in self.stat_keys}
        if done.size:
            final_obs = _copy(obs, final_out)
            for w in done:
                for k in self.stat_keys:
                    stats[k][w] = infos[w][k]
            obs = self.game.reset(done)
        elif final_out is not None:
            final_obs = final_out
        else:
            final_obs = {k: np.zeros_like(v) for k, v in obs.items()}
        return VectorStep(
            obs=_copy(obs, out),
            rewards=rewards,
            truncated=truncated.copy(),
            agent_present=self.game.agent_present.copy(),
            final_obs=final_obs,
            final_agent_present=final_present,
            episode_stats=stats,
        )


def _copy(obs: dict[str, np.ndarray], out: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    # the game writes its observation buffers in place; callers keep what they are given
    if out is None:
        return {k: v.copy() for k, v in obs.items()}
    if set(out) != set(obs):
        raise ValueError(f"out holds keys {sorted(out)}; the observations are {sorted(obs)}")
    for k, v in obs.items():
        if out[k].shape != v.shape:
            raise ValueError(f"out[{k!r}] has shape {out[k].shape}; the observation is {v.shape}")
        np.copyto(out[k], v)
    return out
