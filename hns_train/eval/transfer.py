"""Scoring a policy on a transfer task (docs/transfer.md): fresh episodes, the task's own score.

`evaluate_task(game_cfg, policy, episodes, seed)` plays `episodes` (at least two) episodes of
the task as one `crossplay.cross_play` pairing (worlds reset with seeds `seed`, `seed + 1`, ...;
torch's generator, which samples the actions, seeded with `seed` too), the policy playing the
task's agent (whichever team its slot is on; the empty team gets the no-op), and returns each
episode's `task_score` (the paper's per-task metric: success, or accuracy for object counting)
and the agent's return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hns_train.envs.config import GameConfig
from hns_train.eval.crossplay import cross_play, standard_error
from hns_train.eval.matches import FixedController


@dataclass
class TaskEval:
    scores: np.ndarray  # (episodes,) task_score
    returns: np.ndarray  # (episodes,) the agent's summed reward

    @property
    def score(self) -> float:
        return float(self.scores.mean())

    @property
    def mean_return(self) -> float:
        return float(self.returns.mean())

    def to_dict(self) -> dict[str, float]:
        """Means and their standard errors (NaN with one episode)."""
        return {
            "score": round(self.score, 4),
            "score_se": round(standard_error(self.scores), 4),
            "return": round(self.mean_return, 3),
            "return_se": round(standard_error(self.returns), 3),
            "episodes": len(self.scores),
        }


def evaluate_task(
    game_cfg: GameConfig, policy: Any, episodes: int, seed: int, worlds: int = 16
) -> TaskEval:
    """`policy` (a team controller, e.g. `policies.policy_controller`) on `episodes` episodes."""
    if game_cfg.task == "hide_and_seek":
        raise ValueError("evaluate_task scores a transfer task; the game's task is hide_and_seek")
    agent_is_hider = game_cfg.max_hiders > 0
    pairing = ("agent", "idle") if agent_is_hider else ("idle", "agent")
    controllers = {"agent": lambda: policy, "idle": lambda: FixedController("noop")}
    # cross_play seeds torch with `seed`: the same sampled actions for every network scored here
    played = cross_play(
        game_cfg, controllers, episodes, worlds, seed, pairings=(pairing,), stats=("task_score",)
    )[pairing]
    returns = played.hider_return if agent_is_hider else played.seeker_return
    return TaskEval(scores=played.stats["task_score"], returns=returns)
