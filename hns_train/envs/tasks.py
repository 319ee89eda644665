"""Transfer tasks: the paper's intelligence tests on the hide-and-seek bodies and contract.

A task writes its reward over the hide-and-seek reward (replacing it, or adding to it) and adds
a score; everything else is the game of `game.py`: the same bodies, physics, locks and grabs,
the same observation keys and action layout, so a hide-and-seek policy loads into a task
unchanged (`hns_train/agents/transfer.py`).
`GameConfig.task` names the task (`"hide_and_seek"`: none, the game's own reward), or gives the
import path `package.module:Class` of a `Task` subclass in the user's own code
(docs/extending.md); the presets of `config.py` set each shipped task's world, and its numbers
are its own section of the config (`cfg.lock`, `cfg.blueprint`, `cfg.shelter`, `cfg.counting`,
`cfg.count_based`). Tasks run on the C game only; the Warp game refuses them.

A task is a part of the game that the game calls; it reads the game through `GameView` (the
state a task may read) and never writes it: what a task changes, it says through its hooks,
and the game applies it. At every reset and step a task may
- add observation rows of its own keys for the new episodes (`observations`, e.g. the sites of
  blueprint), which the game writes;
- filter the actions before they are applied (`act`, its own copy of the checked actions);
- say which objects may be locked this step (`lockable`, e.g. the order rule of sequential
  lock) and which entities it moves itself (`pins`: their poses at the end of the step, e.g.
  the boxes of object counting), which the game applies before the physics;
- write its reward (`reward`: (W, A) float32, in place): the array holds the game's reward of
  this step (team reward and penalties, hide-and-seek's), which the task may replace (the
  shipped tasks do) or add to; the game then zeroes the rows of absent agents and returns it,
  and the episode statistics' per-team returns are sums of it;
- give the episode's score at its end (`score`: (len(worlds),) float64), reported in `info` as
  `task_score` (success 0/1, a count or a reward, per task; see docs/transfer.md), with the
  task's own statistics (`extra_stats`, the keys `stat_names` lists). `stat_keys(cfg)` is every
  statistic a game of `cfg` reports, the game's first: what actors and pods sum and a run logs
  as `episode/<key>`.

Every episode still runs to the horizon (truncation only, as the game's contract): where the
original ended an episode on success, the task says how it treats the remaining steps.
Tasks are single-agent here as in the original (one hider for the lock tasks, whose `is_hider`
flag is 1 there; one seeker for the construction tasks, flag 0); the team that is absent has no
slot, and the rows of other agents are empty.
"""

from __future__ import annotations

import importlib
from typing import ClassVar, NamedTuple, Protocol

import numpy as np

from hns_train.envs.config import TASK_MODULES, GameConfig
from hns_train.envs.stats import STAT_KEYS
from hns_train.typed_config import import_class, is_import_path

HIDE_AND_SEEK = "hide_and_seek"


class GameView(Protocol):
    """What a task may read of the game (`HideAndSeekGame` has it all), current after every
    reset and step. Shapes: W worlds, A agent slots, Ob objects (boxes, then ramps), E = A + Ob
    entities (agents, then objects)."""

    n_worlds: int
    n_agents: int
    t: np.ndarray  # (W,) env steps done this episode
    is_hider: np.ndarray  # (A,)
    agent_present: np.ndarray  # (W, A)
    object_present: np.ndarray  # (W, Ob)
    agent_pos: np.ndarray  # (W, A, 3)
    object_pos: np.ndarray  # (W, Ob, 3)
    entity_centre: np.ndarray  # (W, E, 3) main geom centres: what vision rays aim at
    half: np.ndarray  # (W, Ob, 3) half sizes of the objects
    locked: np.ndarray  # (W, Ob)
    layouts: list  # each world's layout.Layout
    rngs: list  # each world's generator (a task's draws for an episode come from it)

    @property
    def object_yaw_cos(self) -> np.ndarray: ...  # (W, Ob)

    @property
    def object_yaw_sin(self) -> np.ndarray: ...  # (W, Ob)

    @property
    def entity_qpos(self) -> np.ndarray: ...  # (W, E, 4) joints x, y, z, yaw of each entity

    def first_hits(self, pnt: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """(W, R) geom that each of the (W, R, 3) rays hits first (-1: none)."""
        ...

    def geom_id(self, name: str) -> int:
        """The id of the geom `name` (every world's model has the same)."""
        ...


class Pins(NamedTuple):
    """Entities a task moves itself in a step: the game writes their x, y and yaw joints
    (`entity_qpos` columns 0, 1, 3) for the end of the step and zeroes their velocities; z is
    left to the physics."""

    entities: np.ndarray  # (n,) entity indices
    poses: np.ndarray  # (W, n, 3) x, y, yaw


class Task:
    """Base class: the hide-and-seek game's hooks, doing nothing; subclasses override."""

    name: ClassVar[str] = ""
    stat_names: ClassVar[tuple[str, ...]] = ()  # the keys `extra_stats` returns, in order

    def __init_subclass__(cls, name: str = "", stat_names: tuple[str, ...] = (), **kw) -> None:
        """`class Blueprint(Task, name="blueprint", stat_names=(...))` makes the task of that
        name (GameConfig.task) available, reporting those statistics; a task of the user's own
        code gives only its statistics and is named by its import path."""
        super().__init_subclass__(**kw)
        if stat_names:
            cls.stat_names = tuple(stat_names)
        if name:
            cls.name = name
            TASKS[name] = cls

    def __init__(self, cfg: GameConfig, game: GameView) -> None:
        self.cfg = cfg
        self.game = game
        W, A = game.n_worlds, game.n_agents
        self.returns = np.zeros((W, A))  # each agent's summed task reward this episode

    def reset(self, worlds: np.ndarray) -> None:
        """New episodes in `worlds` (after the game drew and observed them)."""
        self.returns[worlds] = 0.0

    def observations(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        """Rows of the task's own observation keys (contract.py) for the new episodes in
        `worlds`, each (len(worlds), A, ...), constant through the episode; after `reset`."""
        return {}

    def act(self, actions: np.ndarray) -> None:
        """Edit this step's checked (W, A, 5) int64 actions in place before they are applied."""

    def lockable(self, default: np.ndarray) -> np.ndarray:
        """(W, Ob) the objects that may be locked this step (after `act`); `default`: the
        config's (boxes_lockable, ramps_lockable), which the task must not edit."""
        return default

    def pins(self) -> Pins | None:
        """The entities the task moves itself this step (after `act`), or None."""
        return None

    def reward(self, reward: np.ndarray) -> None:
        """Write this step's (W, A) task reward into `reward` (after physics and observations)."""

    def score(self, worlds: np.ndarray) -> np.ndarray:
        """(len(worlds),) the task's score of the episodes ending now in `worlds`."""
        return np.zeros(len(worlds))

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        """Per-task statistics of the ending episodes (each of `stat_names` -> (len(worlds),))."""
        return {}

    # ------------------------------------------------------------------ used by the game
    def after_step(self, reward: np.ndarray) -> None:
        self.reward(reward)
        present = self.game.agent_present
        reward[~present] = 0.0
        self.returns += reward

    def finish(self, worlds: np.ndarray, infos: list[dict]) -> None:
        """Task score, statistics and returns into the ending episodes' infos."""
        g = self.game
        scores = self.score(worlds)
        extra = self.extra_stats(worlds)
        if tuple(extra) != self.stat_names:  # what a run logs is stat_keys(cfg), in that order
            raise RuntimeError(
                f"{type(self).__name__}.extra_stats gave {tuple(extra)}; "
                f"its stat_names are {self.stat_names}"
            )
        for i, w in enumerate(worlds):
            info = infos[w]
            for team, key in ((True, "hider_return"), (False, "seeker_return")):
                members = g.agent_present[w] & (g.is_hider == team)
                info[key] = float(self.returns[w, members].mean()) if members.any() else 0.0
            info["task_score"] = float(scores[i])
            for name, values in extra.items():
                info[name] = float(values[i])


TASKS: dict[str, type[Task]] = {}  # each task module adds its classes on its first import


def task_class(name: str) -> type[Task]:
    """The `Task` subclass of a task name or import path that `GameConfig.task` allowed (not
    hide-and-seek, which has none)."""
    if is_import_path(name):
        return import_class(name, Task, "game.task")
    importlib.import_module(f"hns_train.envs.{TASK_MODULES[name]}")
    return TASKS[name]


def make_task(cfg: GameConfig, game: GameView) -> Task | None:
    """The task `cfg.task` names for `game` (None for hide-and-seek itself)."""
    if cfg.task == HIDE_AND_SEEK:
        return None
    return task_class(cfg.task)(cfg, game)


def stat_keys(cfg: GameConfig) -> tuple[str, ...]:
    """Every episode statistic a game of `cfg` reports: the game's (`stats.STAT_KEYS`), then
    its task's `stat_names`."""
    if cfg.task == HIDE_AND_SEEK:
        return STAT_KEYS
    return STAT_KEYS + task_class(cfg.task).stat_names
