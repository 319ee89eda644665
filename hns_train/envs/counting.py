"""Object counting: the paper's memory test. A pinned agent watches boxes leave its sight to the
left or to the right and must say how many went left.

The paper describes the test in a few sentences (section 6.2: the agent is pinned in place, 6
boxes each move left or right until a wall hides them, and for many steps after it is asked how
many went each way) and scores it by a classification head on the frozen policy's LSTM state
(`hns_train/eval/counting_probe.py`). It gives no other numbers, so the scene, timing and
rewards below are our choices (docs/fidelity.md), every number a field of the game config's
`counting` section (config.CountingConfig); the `object_counting` preset sets the world. As a
reinforcement-learning task, the agent answers with its x-force bin on the last step:

- World (layout.py, walls and placement "counting"): a 10 m floor with its outer walls, one agent
  (the hider slot) at (5, `counting.agent_y` 1.0) facing +y, and two screen walls (the inner wall
  height, 0.5 m, above every vision ray) on y = `counting.screen_y` 2.4 with a
  `counting.window` 2.2 m gap centred on the agent's line of sight. n boxes (cubes, n uniform in
  `n_boxes`: the paper's 6, or fewer) stand in a row on y = `counting.row_y` 3.0,
  `counting.spacing` 0.55 m apart, all seen through the window.
- Each box tosses a fair coin: k ~ Binomial(n, 1/2) go left. The k leftmost boxes of the row are
  the ones that go left, so that no two paths cross (boxes stay solid and never overlap): the
  count has the fair coins' distribution, and which boxes leave is the split of the row.
- Timing: `counting.show_steps` 10 steps standing still, then `counting.move_steps` 20 steps
  sliding along the row's line, at constant speed, to the hiding spots, then
  `counting.hidden_steps` 10 steps with every box hidden; the horizon is the sum (40).
  Spots: `counting.spot_margin` 0.5 m from the floor's left (right) edge, then
  `counting.spacing` apart inwards, in the row's order, so that the boxes keep their order and
  spacing >= counting.spacing on the way. The screen hides every spot (checked when the task is
  made, from the geometry of the agent's sight line to each box centre, which is what vision
  tests).
- Kinematics: every step, before the physics, the task pins (tasks.Pins) the boxes' x, y and yaw
  (0) for the end of the step and the agent's x, y and yaw, all at rest; z is left to the
  physics (resting on the floor). The agent's movement,
  grab and lock actions are replaced by the no-op. Moving boxes are seen at their new
  positions each step, with the zero velocity the task wrote.
- Answer: the agent's x-force bin (0..action_bins - 1) on the last step is its count of boxes
  that went left. Reward on the last step: `counting.correct_reward` (1) when right, else
  `counting.wrong_reward` (0); 0 on every other step. `task_score` is 1 when right (the mean over
  episodes is the accuracy); `boxes` (n), `went_left` (k) and `answer` go to the episode info.
"""

from __future__ import annotations

import numpy as np

from hns_train.envs import contract as C
from hns_train.envs.layout import CUBE, counting_row
from hns_train.envs.tasks import Pins, Task


def hiding_spots(cfg, n: int, k: int) -> np.ndarray:
    """(n,) x of each box's hiding spot, boxes in row order, the first k going left."""
    j = np.arange(n)
    left = cfg.counting.spot_margin + j * cfg.counting.spacing
    right = cfg.floor_size - cfg.counting.spot_margin - (n - 1 - j) * cfg.counting.spacing
    return np.where(j < k, left, right)


def screen_crossing(cfg, x: np.ndarray) -> np.ndarray:
    """|x offset| at which the sight line from the agent to a box centre at (x, counting.row_y)
    crosses the screen walls' line: inside counting.window / 2 it passes the window."""
    ratio = (cfg.counting.screen_y - cfg.counting.agent_y) / (
        cfg.counting.row_y - cfg.counting.agent_y
    )
    return np.abs(np.asarray(x) - cfg.floor_size / 2) * ratio


class ObjectCounting(Task, name="object_counting", stat_names=("boxes", "went_left", "answer")):
    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        _check_scene(cfg)
        W, nb = game.n_worlds, cfg.max_boxes
        self.agent = 0  # the one agent's slot (max_agents is 1)
        self.n_boxes = np.zeros(W, dtype=np.int64)
        self.went_left = np.zeros(W, dtype=np.int64)
        self.answer = np.full(W, -1, dtype=np.int64)
        self.correct = np.zeros(W, dtype=bool)
        self.start = np.zeros((W, nb))  # x of each box in the row
        self.end = np.zeros((W, nb))  # x of its hiding spot
        # what the task pins each step: x, y, yaw of every box (absent ones: their parked pose)
        # and of the agent
        A = game.n_agents
        self._pinned = np.array([*range(A, A + nb), self.agent])  # entities: boxes, the agent
        self._pose = np.zeros((W, nb + 1, 3))
        self._noop = np.asarray(C.noop_action(cfg.action_bins))

    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        g = self.game
        for w in worlds:
            layout = g.layouts[w]
            n = int((layout.box_kind == CUBE).sum())
            k = int(g.rngs[w].integers(0, 2, size=n).sum())  # a fair coin per box
            self.n_boxes[w], self.went_left[w] = n, k
            self._pose[w] = g.entity_qpos[w, self._pinned][:, [0, 1, 3]]  # the layout's
            self.start[w] = self.end[w] = self._pose[w, :-1, 0]  # absent boxes stay parked
            self.end[w, :n] = hiding_spots(self.cfg, n, k)
        self.answer[worlds] = -1
        self.correct[worlds] = False

    def act(self, actions: np.ndarray) -> None:
        self.answer[:] = actions[:, self.agent, 0]  # the x-force bin: the count, read at the end
        actions[...] = self._noop

    def pins(self) -> Pins:
        cfg, g = self.cfg, self.game
        # where the boxes are at the end of this step (g.t steps are done before it)
        frac = np.clip((g.t + 1 - cfg.counting.show_steps) / cfg.counting.move_steps, 0.0, 1.0)
        self._pose[:, :-1, 0] = self.start + frac[:, None] * (self.end - self.start)
        return Pins(self._pinned, self._pose)

    def reward(self, reward: np.ndarray) -> None:
        cfg = self.cfg
        reward[...] = 0.0
        last = self.game.t == cfg.horizon
        if last.any():
            right = self.answer == self.went_left
            self.correct[last] = right[last]
            reward[last, self.agent] = np.where(
                right[last], cfg.counting.correct_reward, cfg.counting.wrong_reward
            )

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return self.correct[worlds].astype(np.float64)

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "boxes": self.n_boxes[worlds].astype(np.float64),
            "went_left": self.went_left[worlds].astype(np.float64),
            "answer": self.answer[worlds].astype(np.float64),
        }


def _check_scene(cfg) -> None:
    """The counting scene as counting.py describes it, or a ValueError naming what is off."""
    errors = []
    if (cfg.walls, cfg.placement) != ("counting", "counting"):
        got = f"{cfg.walls!r}, {cfg.placement!r}"
        errors.append(f"walls and placement must be 'counting', got {got}")
    steps = cfg.counting.show_steps + cfg.counting.move_steps + cfg.counting.hidden_steps
    if cfg.horizon != steps:
        errors.append(f"horizon={cfg.horizon} must be show + move + hidden steps = {steps}")
    n = cfg.max_boxes
    if n >= cfg.action_bins:
        errors.append(f"n_boxes high={n} must be < action_bins={cfg.action_bins} (the answers)")
    half = cfg.counting.window / 2
    if n and screen_crossing(cfg, counting_row(cfg, n)).max() >= half:
        errors.append(f"a row of {n} boxes is wider than the window lets the agent see")
    wall_face = (cfg.cell + cfg.wall_thickness) / 2  # the outer walls' inner face, from the edge
    if cfg.counting.spot_margin - cfg.box_size / 2 < wall_face:
        errors.append(
            f"counting.spot_margin={cfg.counting.spot_margin} puts the outermost box into the "
            f"outer wall (it must be >= {wall_face + cfg.box_size / 2:.3f})"
        )
    inner = hiding_spots(cfg, n, n)[-1] if n else cfg.floor_size / 2
    if n and screen_crossing(cfg, inner) <= half:
        errors.append(f"the innermost of {n} hiding spots (x={inner:.2f}) is in sight")
    if errors:
        raise ValueError("object_counting: " + "; ".join(errors))
