"""Lock tasks: the original's LockObjectsTask, as `lock_and_return` and `sequential_lock`.

One agent (a hider, `is_hider` 1) must lock the boxes; its reward each step is the sum of
- `lock.reward` (5) for each box that became locked this step, minus `lock.unlock_penalty` (5) for
  each that became unlocked;
- a shaped reward, `lock.shaped_reward_scale` (0.5) times the distance gained towards the target:
  the next box to lock (the closest unlocked one, or in `sequential_lock` the first unlocked one
  in the fixed order 0, 1, 2, ...), then, once every box is locked, the agent's spawn point
  (`lock_and_return` only). When the target changes the original's rule applies: the target
  just locked pays its whole previous distance, a new target after an unlock (or a change of
  closest box) costs its whole new distance;
- `lock.success_reward` (1) on every step the task is complete: every box locked and, in
  `lock_and_return`, the agent within `lock.return_threshold` (0.1 m) of its spawn xy.

Distances are in the floor plane, between the agent's centre and the box centres the game uses
everywhere else (`entity_centre`, the point vision rays aim at; the original measured between
its joint coordinates, which are the bodies' lower corners: docs/fidelity.md). The spawn point
is the agent's xy after the reset.

`sequential_lock` also keeps the order rule of the original, which zeroed the lock action for
every unlocked box after the first unlocked one: those boxes are not lockable this step (the
task's `lockable`, per world), while locked boxes can still be unlocked.

An episode runs to the horizon as the original's did (success never ends it); `task_score` is 1
when the task is complete on the last step, else 0; `boxes_locked` (locked boxes on the last
step) and, in `lock_and_return`, `returned` (1 when within the threshold of the spawn point) go
to the episode's info.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hns_train.envs.tasks import Task

NO_BOX = -1  # no target box: every box is locked


class LockObjectsTask(Task):
    """The shared rules; subclasses say whether the boxes go in a fixed order and whether the
    agent must return to its spawn point."""

    in_order: ClassVar[bool] = False
    must_return: ClassVar[bool] = False

    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        if cfg.n_hiders != (1, 1) or cfg.n_seekers != (0, 0):
            raise ValueError(
                f"task {self.name!r} takes exactly one agent, a hider: n_hiders=(1, 1) and "
                f"n_seekers=(0, 0), got n_hiders={cfg.n_hiders}, n_seekers={cfg.n_seekers}"
            )
        if cfg.n_boxes[0] < 1:
            raise ValueError(f"task {self.name!r} needs a box to lock: n_boxes low >= 1")
        W, nb = game.n_worlds, cfg.max_boxes
        self.n_boxes = nb
        self.was_locked = np.zeros((W, nb), dtype=bool)
        self.target = np.full(W, NO_BOX, dtype=np.int64)  # the original's next_obj
        self.target_dist = np.zeros(W)
        self.spawn = np.zeros((W, 2))
        self.spawn_dist = np.zeros(W)
        self.complete = np.zeros(W, dtype=bool)

    # ------------------------------------------------------------------ state
    def _box_locked(self) -> np.ndarray:
        """(W, nb) present boxes that are locked."""
        g = self.game
        return g.locked[:, : self.n_boxes] & g.object_present[:, : self.n_boxes]

    def _agent_xy(self) -> np.ndarray:
        return self.game.agent_pos[:, 0, :2]

    def _box_xy(self) -> np.ndarray:
        A = self.game.n_agents
        return self.game.entity_centre[:, A : A + self.n_boxes, :2]

    def _next_target(self, unlocked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W,) the next box to lock (NO_BOX when none is left) and the agent's distance to it
        (0 when none): the first unlocked box in order, or the closest (ties: lowest index)."""
        dist = np.linalg.norm(self._box_xy() - self._agent_xy()[:, None], axis=-1)
        left = unlocked.any(axis=1)
        if self.in_order:
            box = unlocked.argmax(axis=1)
        else:
            box = np.where(unlocked, dist, np.inf).argmin(axis=1)
        target_dist = np.take_along_axis(dist, box[:, None], axis=1)[:, 0]
        return np.where(left, box, NO_BOX), np.where(left, target_dist, 0.0)

    def _unlocked(self, box_locked: np.ndarray) -> np.ndarray:
        return self.game.object_present[:, : self.n_boxes] & ~box_locked

    # ------------------------------------------------------------------ hooks
    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        box_locked = self._box_locked()
        target, target_dist = self._next_target(self._unlocked(box_locked))
        self.was_locked[worlds] = box_locked[worlds]
        self.target[worlds] = target[worlds]
        self.target_dist[worlds] = target_dist[worlds]
        self.spawn[worlds] = self._agent_xy()[worlds]
        self.spawn_dist[worlds] = 0.0
        self.complete[worlds] = False

    def reward(self, reward: np.ndarray) -> None:
        cfg = self.cfg
        scale = cfg.lock.shaped_reward_scale
        box_locked = self._box_locked()
        newly = (box_locked & ~self.was_locked).sum(axis=1)
        unlocked_now = (~box_locked & self.was_locked).sum(axis=1)
        r = cfg.lock.reward * newly - cfg.lock.unlock_penalty * unlocked_now

        unlocked = self._unlocked(box_locked)
        target, target_dist = self._next_target(unlocked)
        spawn_dist = np.linalg.norm(self._agent_xy() - self.spawn, axis=-1)
        had, has = self.target != NO_BOX, target != NO_BOX
        same = had & (target == self.target)
        old = np.maximum(self.target, 0)
        old_locked = had & np.take_along_axis(box_locked, old[:, None], axis=1)[:, 0]
        back = (self.spawn_dist - spawn_dist) if self.must_return else np.zeros_like(spawn_dist)
        shaped = np.select(
            [same, old_locked, had | has],
            [self.target_dist - target_dist, self.target_dist, -target_dist],
            back,
        )
        r = r + scale * shaped

        complete = ~unlocked.any(axis=1)
        if self.must_return:
            complete &= spawn_dist <= cfg.lock.return_threshold
        r = r + cfg.lock.success_reward * complete

        self.was_locked = box_locked
        self.target, self.target_dist = target, target_dist
        self.spawn_dist = spawn_dist
        self.complete = complete
        reward[...] = 0.0
        reward[:, 0] = r

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return self.complete[worlds].astype(np.float64)

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        stats = {"boxes_locked": self.was_locked[worlds].sum(axis=1).astype(np.float64)}
        if self.must_return:
            returned = self.spawn_dist[worlds] <= self.cfg.lock.return_threshold
            stats["returned"] = returned.astype(np.float64)
        return stats


class LockAndReturn(
    LockObjectsTask, name="lock_and_return", stat_names=("boxes_locked", "returned")
):
    """The original's lock_and_return.jsonnet: task 'all-return' with one box in 6 random
    rooms; lock it, then come back within 0.1 m of the spawn point."""

    must_return = True


class SequentialLock(LockObjectsTask, name="sequential_lock", stat_names=("boxes_locked",)):
    """The original's sequential_lock.jsonnet: task 'order' with the fixed order 0, 1, 2, 3 over
    4 boxes in the three closed rooms of the tri layout; only the next box in the order can be
    locked."""

    in_order = True

    def lockable(self, default: np.ndarray) -> np.ndarray:
        # the order rule: no unlocked box after the first unlocked one may be locked this step
        unlocked = self._unlocked(self._box_locked())
        first = unlocked.argmax(axis=1)
        later = unlocked & (np.arange(self.n_boxes) > first[:, None])
        allowed = default.copy()
        allowed[:, : self.n_boxes] &= ~later
        return allowed
