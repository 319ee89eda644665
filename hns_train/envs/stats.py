"""Episode statistics (spec §5): the paper's behaviour metrics, reported in `info` at episode end.

Per world, over one episode:
- `max_box_move_prep` / `max_box_move`: the largest xy distance any box has moved from its
  initial position, at the end of preparation / at the end of the episode (same for ramps).
- `num_box_lock_prep` / `num_box_lock`: boxes locked at the end of preparation / of the episode
  (same for ramps).
- `hider_return` / `seeker_return`: a team member's summed reward (teams share their reward
  except for out-of-bounds penalties, so this is the mean over the team's members).
- `hidden_fraction`: the share of post-preparation steps in which no seeker saw any hider.
"""

from __future__ import annotations

import numpy as np

STAT_KEYS = (
    "max_box_move_prep",
    "max_box_move",
    "num_box_lock_prep",
    "num_box_lock",
    "max_ramp_move_prep",
    "max_ramp_move",
    "num_ramp_lock_prep",
    "num_ramp_lock",
    "hider_return",
    "seeker_return",
    "hidden_fraction",
)


class EpisodeStats:
    """Running statistics for W worlds with `n_boxes` box slots followed by ramp slots."""

    def __init__(self, n_worlds: int, n_boxes: int, n_objects: int):
        self.n_boxes = n_boxes
        self.values = np.zeros((n_worlds, len(STAT_KEYS)))
        self.start_xy = np.zeros((n_worlds, n_objects, 2))
        self.returns = np.zeros((n_worlds, 2))
        self.hidden_steps = np.zeros(n_worlds)
        self.play_steps = np.zeros(n_worlds)

    def reset(self, worlds: np.ndarray, object_xy: np.ndarray) -> None:
        self.values[worlds] = 0.0
        self.start_xy[worlds] = object_xy[worlds]
        self.returns[worlds] = 0.0
        self.hidden_steps[worlds] = 0.0
        self.play_steps[worlds] = 0.0

    def _snapshot(self, worlds, object_xy, object_present, locked, suffix: str) -> None:
        moved = np.linalg.norm(object_xy - self.start_xy, axis=-1) * object_present
        locked = locked & object_present
        nb = self.n_boxes
        cols = {
            f"max_box_move{suffix}": moved[:, :nb].max(axis=1, initial=0.0),
            f"max_ramp_move{suffix}": moved[:, nb:].max(axis=1, initial=0.0),
            f"num_box_lock{suffix}": locked[:, :nb].sum(axis=1),
            f"num_ramp_lock{suffix}": locked[:, nb:].sum(axis=1),
        }
        for key, value in cols.items():
            self.values[worlds, STAT_KEYS.index(key)] = value[worlds]

    def step(
        self,
        t_after: np.ndarray,
        prep_steps: int,
        in_prep: np.ndarray,
        rewards: np.ndarray,
        is_hider: np.ndarray,
        agent_present: np.ndarray,
        hiders_seen: np.ndarray,
        object_xy: np.ndarray,
        object_present: np.ndarray,
        locked: np.ndarray,
    ) -> None:
        for team, members in enumerate((is_hider, ~is_hider)):
            mask = agent_present & members[None, :]
            self.returns[:, team] += (rewards * mask).sum(1) / np.maximum(mask.sum(1), 1)
        play = ~in_prep
        self.play_steps += play
        self.hidden_steps += play & ~hiders_seen
        prep_end = np.flatnonzero(t_after == prep_steps)
        if prep_end.size:
            self._snapshot(prep_end, object_xy, object_present, locked, "_prep")

    def finish(self, worlds, object_xy, object_present, locked) -> list[dict[str, float]]:
        self._snapshot(worlds, object_xy, object_present, locked, "")
        col = STAT_KEYS.index
        self.values[worlds, col("hider_return")] = self.returns[worlds, 0]
        self.values[worlds, col("seeker_return")] = self.returns[worlds, 1]
        self.values[worlds, col("hidden_fraction")] = self.hidden_steps[worlds] / np.maximum(
            self.play_steps[worlds], 1
        )
        return [
            {k: float(v) for k, v in zip(STAT_KEYS, self.values[w], strict=True)} for w in worlds
        ]
