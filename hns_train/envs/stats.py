"""Episode statistics (spec §5): the paper's behaviour metrics, reported in `info` at episode end.

Per world, over one episode:
- `max_box_move_prep` / `max_box_move`: the largest xy distance any box has moved from its
  initial position, at the end of preparation / at the end of the episode (same for ramps).
- `num_box_lock_prep` / `num_box_lock`: boxes locked at the end of preparation / of the episode
  (same for ramps).
- `hider_return` / `seeker_return`: a team member's summed reward (teams share their reward
  except for out-of-bounds penalties, so this is the mean over the team's members).
- `hidden_fraction`: the share of post-preparation steps in which no seeker saw any hider.
- `num_box_surf`: post-preparation steps in which some seeker surfs a box: the seeker's centre
  lies over the box's top face (inside its footprint, rotated with its yaw, shrunk by
  `SURF_EDGE_MARGIN`), at least `SURF_MIN_HEIGHT` above the height of an agent resting on the
  floor and within `SURF_MAX_GAP` of the height it would have resting on that top face, while the
  box moves (xy speed above `SURF_MIN_SPEED`) or is grabbed by that seeker. Each step counts once
  however many seekers surf. Ramps never count: their top is a slope, and climbing one is ramp use.
- `task_score`: a transfer task's score of the episode (`tasks.py`); 0 in hide-and-seek.
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
    "num_box_surf",
    "task_score",
)

# Box-surfing detection (see the module docstring); metres and metres per second.
SURF_MIN_HEIGHT = 0.25  # above a floor-resting agent: half a box (0.5 m) lifts it by 0.5
SURF_MAX_GAP = 0.1  # centre within this of "radius above the top face": standing on it
SURF_EDGE_MARGIN = 0.0  # shrink the footprint by this much (0: centre anywhere over the top)
SURF_MIN_SPEED = 0.2  # box xy speed that counts as moving (pushes reach several m/s)


class EpisodeStats:
    """Running statistics for W worlds with `n_boxes` box slots followed by ramp slots. The
    per-step sums (team returns, play and hidden steps) are added by the game's compiled step
    (kernels.rewards_and_stats) into `returns`, `play_steps` and `hidden_steps`."""

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

    def add_surfing(
        self,
        in_prep: np.ndarray,
        is_hider: np.ndarray,
        agent_present: np.ndarray,
        agent_pos: np.ndarray,
        object_pos: np.ndarray,
        object_yaw: np.ndarray,
        object_vel: np.ndarray,
        half: np.ndarray,
        object_present: np.ndarray,
        grabbed: np.ndarray,
        agent_radius: float = 0.15,
    ) -> None:
        """Count this step's box surfing (`box_surfing`) where the game is past preparation."""
        nb = self.n_boxes
        surf = box_surfing(
            agent_pos,
            ~is_hider[None, :] & agent_present,
            object_pos[:, :nb],
            object_yaw[:, :nb],
            object_vel[:, :nb],
            half[:, :nb],
            object_present[:, :nb],
            grabbed,
            agent_radius,
        )
        self.values[:, STAT_KEYS.index("num_box_surf")] += surf & ~in_prep

    def mark_prep_end(self, t_after, prep_steps, object_xy, object_present, locked) -> None:
        """The `_prep` statistics of worlds whose preparation ended with this step."""
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


def box_surfing(
    agent_pos: np.ndarray,
    is_seeker: np.ndarray,
    box_pos: np.ndarray,
    box_yaw: np.ndarray,
    box_vel: np.ndarray,
    box_half: np.ndarray,
    box_present: np.ndarray,
    grabbed: np.ndarray | None,
    agent_radius: float,
) -> np.ndarray:
    """(W,) whether some seeker surfs a box this step (rule in the module docstring).

    agent_pos (W, A, 3) centres; is_seeker (W, A) present seekers; box_pos (W, B, 3) centres,
    box_yaw (W, B), box_vel (W, B, >=2) with xy velocity first, box_half (W, B, 3) half sizes in
    the box frame; grabbed (W, A) object index held by each agent or -1.
    """
    standing = on_box_top(
        agent_pos, box_pos, np.cos(box_yaw), np.sin(box_yaw), box_half, agent_radius
    )
    moving = np.linalg.norm(box_vel[..., :2], axis=-1) > SURF_MIN_SPEED  # (W, B)
    driving = moving[:, None, :]
    if grabbed is not None:
        driving = driving | (grabbed[:, :, None] == np.arange(box_pos.shape[1])[None, None, :])
    surf = standing & driving & is_seeker[:, :, None] & box_present[:, None, :]
    return surf.any(axis=(1, 2))


def on_box_top(agent_pos, box_pos, cos_yaw, sin_yaw, box_half, agent_radius):
    """(W, A, B) whether each agent stands on each box's top face: over it, less
    `SURF_EDGE_MARGIN` from its edges, and resting on it (`SURF_MAX_GAP`, `SURF_MIN_HEIGHT`).

    Arrays or tensors alike (only operators and ``abs``), so the Warp game's tensor statistics
    share the rule; the caller takes cos_yaw and sin_yaw (W, B) of the boxes' yaw in its library.
    """
    rel = agent_pos[:, :, None, :2] - box_pos[:, None, :, :2]  # (W, A, B, 2)
    c, s = cos_yaw[:, None, :], sin_yaw[:, None, :]
    local_x = c * rel[..., 0] + s * rel[..., 1]
    local_y = -s * rel[..., 0] + c * rel[..., 1]
    hx = box_half[:, None, :, 0] - SURF_EDGE_MARGIN
    hy = box_half[:, None, :, 1] - SURF_EDGE_MARGIN
    over = (abs(local_x) <= hx) & (abs(local_y) <= hy)
    top = box_pos[:, None, :, 2] + box_half[:, None, :, 2]
    z = agent_pos[:, :, None, 2]
    on_top = (abs(z - (top + agent_radius)) <= SURF_MAX_GAP) & (z >= agent_radius + SURF_MIN_HEIGHT)
    return over & on_top
