"""Recording episodes into replays (`replay.py` is the format): the recorder, the match hook
and scripted action sources.

`ReplayRecorder` copies one world's state after every step of a `HideAndSeekGame` (no
rendering). `MatchRecording` is the `play_matches` step hook that records some worlds of a round
and saves them with team names and versions (`team_metadata`) in the replay metadata, which
videos print over the picture; `play_recorded` plays a round with it and names the replays, for
evaluation workers and `python -m hns_train.eval play`; bench/reproduce.py uses the hook too.
`record_episode` plays one world with any action source: `random_actions`, or
`object_seeking_actions` (walk to boxes and ramps, grab, lock: the example replays).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from hns_train.envs import contract
from hns_train.envs.config import GameConfig
from hns_train.envs.layout import Layout
from hns_train.eval.replay import (
    FORMAT_NAME,
    FORMAT_VERSION,
    FRAME_ARRAYS,
    STEP_ARRAYS,
    Replay,
    save,
)

# what a `mujoco.batch.Batch` state row holds (time, qpos, qvel, warm start, ctrl, eq_active, ...)
BATCH_STATE = mujoco.mjtState.mjSTATE_INTEGRATION


class ReplayRecorder:
    """Records world `world` of a `HideAndSeekGame` as it is stepped.

    Call `record_reset()` after `game.reset(...)` has (re)started that world, then
    `record_step(rewards, actions, info)` after every `game.step(...)`. Each call copies a few
    small arrays (no rendering, no allocation beyond the copies).
    """

    def __init__(self, game, world: int = 0, metadata: dict | None = None):
        if not 0 <= world < game.n_worlds:
            raise ValueError(f"world {world} is outside the game's 0..{game.n_worlds - 1}")
        self.game = game
        self.world = world
        self.metadata = dict(metadata or {})
        self._frames: dict[str, list] = {}
        self._steps: dict[str, list] = {}
        self._layout: Layout | None = None
        self._seed: int | None = None
        self.episode_stats: dict | None = None
        self._scratch: mujoco.MjData | None = None

    @property
    def n_steps(self) -> int:
        return len(self._steps.get("rewards", []))

    def record_reset(self, seed: int | None = None) -> None:
        """Start a new recording from the world's state right after reset."""
        g, w = self.game, self.world
        if g.models[w] is None:
            raise RuntimeError("the game has not been reset: call game.reset() first")
        self._layout = g.layouts[w]
        self._seed = seed
        self._scratch = mujoco.MjData(g.models[w])  # the world's batch state row unpacks here
        self._frames = {k: [] for k in FRAME_ARRAYS}
        self._steps = {k: [] for k in STEP_ARRAYS}
        self.episode_stats = None
        self._record_frame()

    def record_step(self, rewards, actions, info: dict | None = None) -> None:
        """Record the step the game just took: its rewards (W, A) and actions (W, A, 5)."""
        if self._layout is None:
            raise RuntimeError("call record_reset() before record_step()")
        g, w = self.game, self.world
        if g.layouts[w] is not self._layout:
            raise RuntimeError("the recorded world was reset; start a new recording")
        self._steps["rewards"].append(np.asarray(rewards)[w].astype(np.float32))
        self._steps["actions"].append(np.asarray(actions)[w].astype(np.int8))
        self._record_frame()
        self._steps["ctrl"].append(self._last_ctrl)
        if info:
            self.episode_stats = {k: float(v) for k, v in info.items()}

    def _record_frame(self) -> None:
        g, w = self.game, self.world
        m, d, idx = g.models[w], self._scratch, g.index
        # unpacking the row (mj_setState, microseconds) into one scratch MjData rather than
        # allocating an MjData per step (about 1.3 ms each)
        mujoco.mj_setState(m, d, g.batch.state[w], BATCH_STATE)
        f = self._frames
        t = int(g.t[w])
        f["t"].append(t)
        f["prep"].append(t < g.cfg.prep_steps)
        f["qpos"].append(d.qpos.copy())
        f["qvel"].append(d.qvel.copy())
        f["qacc_warmstart"].append(d.qacc_warmstart.copy())
        f["time"].append(d.time)
        self._last_ctrl = d.ctrl.copy()  # the controls of the step that led here
        locked = g.locked[w].copy()
        f["locked"].append(locked)
        f["lock_team"].append(g.lock_team[w].astype(np.int8))
        pins = m.jnt_range[idx.object_jnt, 0]
        f["lock_qpos"].append(np.where(locked[:, None], pins, 0.0))
        grabbed = g.grabbed[w].copy()
        f["grabbed"].append(grabbed.astype(np.int8))
        weld = np.zeros((g.n_agents, 7))
        for a in np.flatnonzero(grabbed >= 0):
            weld[a] = m.eq_data[idx.weld[a, grabbed[a]], 3:10]
        f["grab_weld"].append(weld)
        f["sees_agent"].append(g.sees_agent[w].copy())
        f["sees_object"].append(g.sees_object[w].copy())

    def to_replay(self) -> Replay:
        if self._layout is None:
            raise RuntimeError("nothing recorded: call record_reset() first")
        g = self.game
        m = g.models[self.world]
        n_steps = self.n_steps
        sizes = dict(
            n_frames=n_steps + 1,
            n_steps=n_steps,
            nq=m.nq,
            nv=m.nv,
            nu=m.nu,
            n_agents=g.n_agents,
            n_objects=g.n_objects,
        )
        arrays = {}
        for table, length in ((FRAME_ARRAYS, n_steps + 1), (STEP_ARRAYS, n_steps)):
            rows = self._frames if table is FRAME_ARRAYS else self._steps
            for name, (dtype, shape) in table.items():  # reshape: an episode of 0 steps too
                arrays[name] = np.asarray(rows[name], dtype=dtype).reshape(length, *shape(sizes))
        header = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "game_config": asdict(g.cfg),
            "sizes": {k: int(v) for k, v in sizes.items()},
            "layout_counts": {
                "n_hiders": int(self._layout.n_hiders),
                "n_seekers": int(self._layout.n_seekers),
            },
            "seed": None if self._seed is None else int(self._seed),
            "world": int(self.world),
            "metadata": dict(self.metadata),
            "episode_stats": self.episode_stats,
            "mujoco_version": mujoco.__version__,
            "created_unix": time.time(),
        }
        return Replay(cfg=g.cfg, layout=self._layout, arrays=arrays, header=header)

    def save(self, path) -> Path:
        return save(self.to_replay(), path)


def team_metadata(name: str, version: int | None = None, **extra: Any) -> dict[str, Any]:
    """What a replay says about a team (videos print name and version over the picture)."""
    return {"name": name, "version": version, **extra}


def team_label(info: Any) -> str:
    """A team's `team_metadata` as the videos and the html page print it: "name vN" (the version
    once where the name already says it), or "" when the replay says nothing."""
    if not isinstance(info, dict):
        return str(info) if info else ""
    name, version = info.get("name"), info.get("version")
    tag = f"v{version}" if version is not None else ""
    if name is not None and tag in str(name).split():
        tag = ""  # `A ckpt_...pt v305`
    return " ".join(p for p in (str(name) if name is not None else "", tag) if p)


class MatchRecording:
    """`play_matches` hook recording worlds `worlds` of one round of W matches.

    `seed` must be the seed given to `play_matches` (world w starts from `seed + w`); the hook
    records one round only, so use it with `n_matches <= W`."""

    def __init__(self, game, worlds: Sequence[int], seed: int | None, metadata: dict) -> None:
        self.seed = seed
        self.recorders = [ReplayRecorder(game, int(w), metadata) for w in worlds]
        self._rounds = 0

    def __call__(self, game, actions, rewards, infos) -> None:
        if actions is None:
            self._rounds += 1
            if self._rounds > 1:
                raise RuntimeError("MatchRecording records one round: play n_matches <= worlds")
            for rec in self.recorders:
                rec.record_reset(None if self.seed is None else self.seed + rec.world)
            return
        for rec in self.recorders:
            rec.record_step(rewards, actions, infos[rec.world])

    def save(self, paths: Sequence[Path]) -> list[Path]:
        """Write the recorded worlds, in the order of `worlds`, to `paths` (.npz)."""
        if len(paths) != len(self.recorders):
            raise ValueError(f"{len(self.recorders)} recordings but {len(paths)} paths")
        return [rec.save(p) for rec, p in zip(self.recorders, paths, strict=True)]


def play_recorded(
    game, hiders, seekers, n: int, seed: int, metadata: dict, names: Sequence[Path], progress=False
) -> tuple[list, list[Path | None]]:
    """One round of `n` matches (at most the game's worlds) by `play_matches`, the first
    `len(names)` worlds recorded with `metadata` and saved to `names`. Returns the match results
    and each match's replay path (None for a match not recorded)."""
    from hns_train.eval.matches import play_matches  # torch: not for the render path

    hook = MatchRecording(game, range(len(names)), seed, metadata) if names else None
    results = play_matches(game, hiders, seekers, n, seed, on_step=hook, progress=progress)
    paths: list[Path | None] = [None] * n
    if hook is not None:
        paths[: len(names)] = hook.save(names)
    return results, paths


def episode_steps(cfg: GameConfig, n_steps: int | None, name: str = "n_steps") -> int:
    """The steps an episode of `cfg` is recorded for: `n_steps`, None for all of it. The game
    ends every episode at its horizon, so more is refused (`name` is what the caller calls it)
    rather than cut short without a word."""
    if n_steps is None:
        return cfg.horizon
    if not 0 <= n_steps <= cfg.horizon:
        raise ValueError(
            f"{name} must be in 0..{cfg.horizon} (the {cfg.preset} preset's horizon, where its "
            f"episodes end; default: all of it), got {n_steps}"
        )
    return n_steps


def record_episode(
    cfg: GameConfig,
    act: Callable[[dict[str, np.ndarray]], np.ndarray],
    seed: int | None = None,
    metadata: dict | None = None,
    n_steps: int | None = None,
) -> Replay:
    """Play one episode of one world with `act` (obs dict (1, A, ...) -> actions (1, A, 5)).

    `act` can be any action source: a trained policy wrapped to numpy, a scripted rule, or
    `random_actions(...)`. Returns the replay; `save(replay, path)` writes it.
    """
    from hns_train.envs.game import HideAndSeekGame  # the game pulls in all of envs/

    n_steps = episode_steps(cfg, n_steps)
    game = HideAndSeekGame(cfg, n_worlds=1, seed=seed)
    obs = game.reset(seeds=[seed])
    rec = ReplayRecorder(game, 0, metadata)
    rec.record_reset(seed)
    for _ in range(n_steps):
        actions = np.asarray(act(obs))
        obs, rewards, truncated, infos = game.step(actions)
        rec.record_step(rewards, actions, infos[0])
        if truncated[0]:
            break
    return rec.to_replay()


def random_actions(cfg: GameConfig, seed: int | None = None) -> Callable[[dict], np.ndarray]:
    """Every agent acting as the built-in random team does (`agents/opponents.py`): each action
    column drawn uniformly over its range."""
    from hns_train.agents import opponents  # torch: not for the render path, which needs none

    rng = np.random.default_rng(seed)

    def act(obs: dict) -> np.ndarray:
        W, A = obs[contract.SELF_KEY].shape[:2]
        actions = opponents.fixed_actions(opponents.RANDOM, W * A, rng, cfg.action_bins)
        return actions.reshape(W, A, -1)

    return act


def object_seeking_actions(
    cfg: GameConfig, seed: int | None = None, p_lock: float = 0.5, noise: float = 0.3
) -> Callable[[dict], np.ndarray]:
    """A scripted action source that exercises grabs and locks: each agent walks to the nearest
    existing box or ramp (with `noise` of its moves random), turns at random so its vision cone
    sweeps the object, holds grab, and presses lock with probability `p_lock`."""
    if cfg.max_boxes + cfg.n_ramps == 0:  # nothing to walk to: refused before a step is played
        raise ValueError(
            f"object-seeking actions need boxes or ramps; the {cfg.preset} preset has none "
            "(random actions need none)"
        )
    rng = np.random.default_rng(seed)
    mid = cfg.action_bins // 2

    def act(obs: dict) -> np.ndarray:
        _, boxes, ramps = contract.ENTITY_KEYS
        xy_cols = contract.ObjectColumns.XY
        me = obs[contract.SELF_KEY]  # (W, A, SELF_DIM)
        W, A = me.shape[:2]
        xy = [obs[boxes.key][..., xy_cols], obs[ramps.key][..., xy_cols]]
        exists = [obs[boxes.exists_mask], obs[ramps.exists_mask]]
        obj_xy = np.concatenate(xy, axis=2)  # (W, A, O, 2)
        obj_ok = np.concatenate(exists, axis=2) > 0
        delta = obj_xy - me[..., None, contract.SelfColumns.XY]
        dist = np.where(obj_ok, np.linalg.norm(delta, axis=-1), np.inf)
        nearest = np.argmin(dist, axis=-1)
        step = np.take_along_axis(delta, nearest[..., None, None], axis=2)[..., 0, :]
        move = np.clip(np.round(step * 4), -mid, mid).astype(int) + mid
        bins = cfg.action_bins
        a = np.empty((W, A, contract.N_ACTION_DIMS), dtype=contract.ACTION_DTYPE)
        a[..., :2] = np.where(rng.random((W, A, 1)) < noise, rng.integers(0, bins, (W, A, 2)), move)
        a[..., 2] = rng.integers(0, bins, (W, A))
        a[..., contract.GRAB] = 1
        a[..., contract.LOCK] = rng.random((W, A)) < p_lock
        return a

    return act
