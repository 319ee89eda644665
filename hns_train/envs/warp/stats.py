"""Episode statistics of the Warp game as tensor code on the device (`TensorStats`).

The same statistics, keys and numbers as `envs/stats.py` (that module's docstring defines them),
kept as (W, ...) tensors so a step adds no device-to-host copy: the counters update every world
with masks instead of picking worlds on the host (the end-of-preparation snapshot, the box-surf
test for every step instead of only when a seeker is lifted). `reset` and `finish` take a (W,)
bool mask of the worlds whose episodes start / end, so worlds end their episodes independently
and nothing is read on the host: `finish` returns a (W, len(STAT_KEYS)) float64 tensor with NaN
in the rows of worlds that did not finish. `TensorStats.step` is also the reference for the
running sums the C game's compiled step adds (tests/envs/test_fast_path.py);
tests/envs/test_warp_rules.py checks `box_surfing` against `stats.box_surfing`.
"""

from __future__ import annotations

import torch

from hns_train.envs.stats import STAT_KEYS, SURF_MIN_SPEED, on_box_top

COL = {k: i for i, k in enumerate(STAT_KEYS)}


def box_surfing(
    agent_pos, is_seeker, box_pos, box_yaw, box_vel, box_half, box_present, grabbed, agent_radius
) -> torch.Tensor:
    """(W,) bool: some seeker surfs a box this step (stats.box_surfing)."""
    standing = on_box_top(
        agent_pos, box_pos, torch.cos(box_yaw), torch.sin(box_yaw), box_half, agent_radius
    )
    moving = torch.linalg.vector_norm(box_vel[..., :2], dim=-1) > SURF_MIN_SPEED
    boxes = torch.arange(box_pos.shape[1], device=box_pos.device)
    driving = moving[:, None, :] | (grabbed[:, :, None] == boxes)
    surf = standing & driving & is_seeker[:, :, None] & box_present[:, None, :]
    return surf.flatten(1).any(dim=1)


class TensorStats:
    """Running statistics of W worlds with `n_boxes` box slots followed by ramp slots."""

    def __init__(self, n_worlds: int, n_boxes: int, n_objects: int, device):
        z = torch.zeros
        self.n_boxes = n_boxes
        self.values = z(n_worlds, len(STAT_KEYS), dtype=torch.float64, device=device)
        self.start_xy = z(n_worlds, n_objects, 2, dtype=torch.float64, device=device)
        self.returns = z(n_worlds, 2, dtype=torch.float64, device=device)
        self.hidden_steps = z(n_worlds, dtype=torch.float64, device=device)
        self.play_steps = z(n_worlds, dtype=torch.float64, device=device)

    def reset(self, mask: torch.Tensor, object_xy: torch.Tensor) -> None:
        """Zero the counters of the worlds where `mask` (W,) bool; remember where their objects
        start."""
        m = mask[:, None]
        self.values.copy_(torch.where(m, 0.0, self.values))
        xy = object_xy.to(torch.float64)
        self.start_xy.copy_(torch.where(m[..., None], xy, self.start_xy))
        self.returns.copy_(torch.where(m, 0.0, self.returns))
        self.hidden_steps.copy_(torch.where(mask, 0.0, self.hidden_steps))
        self.play_steps.copy_(torch.where(mask, 0.0, self.play_steps))

    def _snapshot(self, which, object_xy, object_present, locked, suffix: str) -> None:
        """Object moves and locks into the `suffix` columns of the worlds where `which`."""
        moved = torch.linalg.vector_norm(object_xy.to(torch.float64) - self.start_xy, dim=-1)
        moved = moved * object_present
        locked = (locked & object_present).to(torch.float64)
        nb = self.n_boxes

        def top(x):  # max over slots, 0 without slots (numpy's initial=0.0)
            return x.clamp_min(0.0).amax(dim=1) if x.shape[1] else x.new_zeros(x.shape[0])

        cols = {
            f"max_box_move{suffix}": top(moved[:, :nb]),
            f"max_ramp_move{suffix}": top(moved[:, nb:]),
            f"num_box_lock{suffix}": locked[:, :nb].sum(dim=1),
            f"num_ramp_lock{suffix}": locked[:, nb:].sum(dim=1),
        }
        for key, value in cols.items():
            col = self.values[:, COL[key]]
            self.values[:, COL[key]] = torch.where(which, value, col)

    def step(
        self,
        t_after,
        prep_steps: int,
        in_prep,
        rewards,
        team_masks,
        hiders_seen,
        object_xy,
        object_present,
        locked,
        surf,
    ) -> None:
        """One env step. team_masks: per team (hiders, seekers) the (W, A) members present and
        their count clipped to >= 1; surf (W,) from `box_surfing`."""
        self.values[:, COL["num_box_surf"]] += (surf & ~in_prep).to(torch.float64)
        for team, (mask, count) in enumerate(team_masks):
            self.returns[:, team] += (rewards * mask).sum(dim=1).to(torch.float64) / count
        play = (~in_prep).to(torch.float64)
        self.play_steps += play
        self.hidden_steps += play * (~hiders_seen).to(torch.float64)
        self._snapshot(t_after == prep_steps, object_xy, object_present, locked, "_prep")

    def finish(self, mask: torch.Tensor, object_xy, object_present, locked) -> torch.Tensor:
        """Final values (W, len(STAT_KEYS)) float64 of the episodes ending where `mask` (W,)
        bool, columns in `STAT_KEYS` order; NaN in the other rows."""
        self._snapshot(mask, object_xy, object_present, locked, "")
        hidden = self.hidden_steps / self.play_steps.clamp_min(1)
        for key, value in (
            ("hider_return", self.returns[:, 0]),
            ("seeker_return", self.returns[:, 1]),
            ("hidden_fraction", hidden),
        ):
            self.values[:, COL[key]] = torch.where(mask, value, self.values[:, COL[key]])
        return torch.where(mask[:, None], self.values, torch.nan)
