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

Both games keep these statistics with the code below, written once over the array API
(array-api-compat picks the library of the arrays given): numpy arrays in the C game, torch
tensors on the device in the Warp game, where a step adds no device-to-host copy (masked writes,
no world picked on the host). Nothing here imports torch.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace, device

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
COL = {k: i for i, k in enumerate(STAT_KEYS)}

# Box-surfing detection (see the module docstring); metres and metres per second.
SURF_MIN_HEIGHT = 0.25  # above a floor-resting agent: half a box (0.5 m) lifts it by 0.5
SURF_MAX_GAP = 0.1  # centre within this of "radius above the top face": standing on it
SURF_EDGE_MARGIN = 0.0  # shrink the footprint by this much (0: centre anywhere over the top)
SURF_MIN_SPEED = 0.2  # box xy speed that counts as moving (pushes reach several m/s)


class EpisodeStats:
    """Running statistics of W worlds with `n_boxes` box slots followed by ramp slots, kept in the
    array library of `like` (numpy by default; the Warp game passes a tensor on its device).

    Worlds are picked by (W,) bool masks and updated with masked writes, so on a device nothing
    is read back on the host. The per-step sums (team returns, play and hidden steps) are added
    by `add_step` (the Warp game) or by the C game's compiled step (kernels.rewards_and_stats)
    into `returns`, `play_steps` and `hidden_steps`, which `add_step` is the reference for."""

    def __init__(self, n_worlds: int, n_boxes: int, n_objects: int, like=None):
        like = np.empty(0) if like is None else like
        xp = self.xp = array_namespace(like)
        dev = device(like)

        def zeros(*shape):
            return xp.zeros(shape, dtype=xp.float64, device=dev)

        self.n_boxes = n_boxes
        self.values = zeros(n_worlds, len(STAT_KEYS))
        self.start_xy = zeros(n_worlds, n_objects, 2)
        self.returns = zeros(n_worlds, 2)
        self.hidden_steps = zeros(n_worlds)
        self.play_steps = zeros(n_worlds)
        self._zero_column = zeros(n_worlds, 1)  # the max over no object slots

    def reset(self, mask, object_xy) -> None:
        """Zero the counters of the worlds where `mask` (W,) bool; remember where their objects
        start. Writes in place: the compiled step holds these arrays."""
        xp, m = self.xp, mask[:, None]
        self.values[...] = xp.where(m, 0.0, self.values)
        xy = xp.astype(object_xy, xp.float64)
        self.start_xy[...] = xp.where(m[..., None], xy, self.start_xy)
        self.returns[...] = xp.where(m, 0.0, self.returns)
        self.hidden_steps[...] = xp.where(mask, 0.0, self.hidden_steps)
        self.play_steps[...] = xp.where(mask, 0.0, self.play_steps)

    def _snapshot(self, which, object_xy, object_present, locked, suffix: str) -> None:
        """Object moves and locks into the `suffix` columns of the worlds where `which` (W,)."""
        xp, nb = self.xp, self.n_boxes
        moved = xp.linalg.vector_norm(xp.astype(object_xy, xp.float64) - self.start_xy, axis=-1)
        moved = moved * xp.astype(object_present, xp.float64)
        locked = xp.astype(locked & object_present, xp.float64)

        def top(x):  # the largest move, 0 without slots
            return xp.max(xp.concat([self._zero_column, x], axis=1), axis=1)

        cols = {
            f"max_box_move{suffix}": top(moved[:, :nb]),
            f"max_ramp_move{suffix}": top(moved[:, nb:]),
            f"num_box_lock{suffix}": xp.sum(locked[:, :nb], axis=1),
            f"num_ramp_lock{suffix}": xp.sum(locked[:, nb:], axis=1),
        }
        for key, value in cols.items():
            self.values[:, COL[key]] = xp.where(which, value, self.values[:, COL[key]])

    def add_surfing(self, in_prep, seekers, game, agent_radius: float) -> None:
        """Count this step's box surfing (`box_surfing` over the box slots) where the step began
        past preparation (`in_prep` (W,) bool). seekers (W, A): the present seekers; `game`
        holds the state under the games' names: agent_pos, object_pos, object_yaw, object_vel,
        half, object_present (W, O, ...), grabbed (W, A)."""
        xp, nb = self.xp, self.n_boxes
        surf = box_surfing(
            game.agent_pos,
            seekers,
            game.object_pos[:, :nb],
            game.object_yaw[:, :nb],
            game.object_vel[:, :nb],
            game.half[:, :nb],
            game.object_present[:, :nb],
            game.grabbed,
            agent_radius,
        )
        self.values[:, COL["num_box_surf"]] += xp.astype(surf & ~in_prep, xp.float64)

    def mark_prep_end(self, t_after, prep_steps: int, object_xy, object_present, locked) -> None:
        """The `_prep` statistics of the worlds whose preparation ended with this step."""
        self._snapshot(t_after == prep_steps, object_xy, object_present, locked, "_prep")

    def add_step(self, in_prep, rewards, team_masks, hiders_seen) -> None:
        """One step's running sums: each team's return (team_masks: per team, hiders then
        seekers, the (W, A) float members present and their count clipped to >= 1), and the
        play and hidden steps after preparation."""
        xp = self.xp
        for team, (mask, count) in enumerate(team_masks):
            total = xp.sum(rewards * mask, axis=1)
            self.returns[:, team] += xp.astype(total, xp.float64) / count
        play = xp.astype(~in_prep, xp.float64)
        self.play_steps += play
        self.hidden_steps += play * xp.astype(~hiders_seen, xp.float64)

    def finish(self, mask, object_xy, object_present, locked):
        """Final values (W, len(STAT_KEYS)) float64 of the episodes ending where `mask` (W,)
        bool, columns in `STAT_KEYS` order; NaN in the other rows."""
        xp = self.xp
        self._snapshot(mask, object_xy, object_present, locked, "")
        hidden = self.hidden_steps / xp.clip(self.play_steps, min=1.0)
        for key, value in (
            ("hider_return", self.returns[:, 0]),
            ("seeker_return", self.returns[:, 1]),
            ("hidden_fraction", hidden),
        ):
            self.values[:, COL[key]] = xp.where(mask, value, self.values[:, COL[key]])
        return xp.where(mask[:, None], self.values, xp.nan)


def box_surfing(
    agent_pos, is_seeker, box_pos, box_yaw, box_vel, box_half, box_present, grabbed, agent_radius
):
    """(W,) bool: whether some seeker surfs a box this step (rule in the module docstring);
    arrays or tensors alike.

    agent_pos (W, A, 3) centres; is_seeker (W, A) present seekers; box_pos (W, B, 3) centres,
    box_yaw (W, B), box_vel (W, B, >=2) with xy velocity first, box_half (W, B, 3) half sizes in
    the box frame; grabbed (W, A) object index held by each agent or -1. An agent stands on a
    box's top face when it is over it, less `SURF_EDGE_MARGIN` from its edges, and resting on it
    (`SURF_MAX_GAP`, `SURF_MIN_HEIGHT`).
    """
    xp = array_namespace(agent_pos)
    rel = agent_pos[:, :, None, :2] - box_pos[:, None, :, :2]  # (W, A, B, 2)
    c, s = xp.cos(box_yaw)[:, None, :], xp.sin(box_yaw)[:, None, :]
    local_x = c * rel[..., 0] + s * rel[..., 1]
    local_y = -s * rel[..., 0] + c * rel[..., 1]
    hx = box_half[:, None, :, 0] - SURF_EDGE_MARGIN
    hy = box_half[:, None, :, 1] - SURF_EDGE_MARGIN
    over = (abs(local_x) <= hx) & (abs(local_y) <= hy)
    top = box_pos[:, None, :, 2] + box_half[:, None, :, 2]
    z = agent_pos[:, :, None, 2]
    on_top = (abs(z - (top + agent_radius)) <= SURF_MAX_GAP) & (z >= agent_radius + SURF_MIN_HEIGHT)
    moving = xp.linalg.vector_norm(box_vel[..., :2], axis=-1) > SURF_MIN_SPEED  # (W, B)
    boxes = xp.arange(box_pos.shape[1], device=device(box_pos))
    driving = moving[:, None, :] | (grabbed[:, :, None] == boxes)
    surf = over & on_top & driving & is_seeker[:, :, None] & box_present[:, None, :]
    # one axis: array-api-compat reduces a tuple of torch axes one at a time
    return xp.any(xp.reshape(surf, (surf.shape[0], -1)), axis=1)
