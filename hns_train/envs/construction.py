"""The construction transfer tasks: blueprint (cover marked sites with boxes) and shelter (shield
a cylinder from rays). One seeker-slot agent (is_hider 0) in the empty arena with 8 boxes; the
worlds are the `blueprint` and `shelter` presets of config.py, every number a GameConfig field
(docs/fidelity.md, "Transfer task: blueprint" / "shelter", gives each one's source).

Blueprint (horizon 150). 1-4 construction sites, squares of `site_size` 0.5 m (one box) placed
by layout.py in the middle 85% of the arena. A site has a centre and 4 corners at z
`site_height` 0.25; a box has 4 corners, the middles of its vertical edges (its centre
height). Each step:
- dense reward -`site_dense_scale` (0.05) x the mean, over every corner of every site, of the
  smooth-min (alpha `site_smoothmin_alpha` -1.5) of its distances to every box corner:
  sum(d exp(alpha d)) / sum(exp(alpha d)) over the corners of the present boxes;
- a site is done when some box centre lies within `site_activation_radius` 0.1 of its centre
  and each of its corners has a box corner within 0.1 (strictly closer, as the original);
  when every site is done: +`site_completed_reward` 3 per site.
The original ends the episode on completion; our contract runs every episode to its horizon,
so the completion reward is paid once, on the first step every site is done, and the episode
goes on with the dense reward only (undoing and redoing it pays nothing more).
`task_score` is 1.0 when the construction was completed in the episode; `sites_activated` is the
fraction of sites done at its last step. The agent sees the sites in `site_obs` (contract.py),
written at reset: they do not move.

Shelter (horizon 240). A static cylinder, diameter uniform in [1.5, 2] m, height 0.5 m, placed
by layout.py in the middle 70% of the arena. Rays: `shelter_rays_per_side` 25 start points per
side of the floor, `shelter_ray_margin_cells` 1.01 cells in from its edge (inside the outer
walls), at z 0, each aimed at the cylinder's centre (z = half its height), 100 in all. Each
step the reward is -`shelter_reward_scale` (0.001) x the number of rays whose first hit is the
cylinder. Rays are MuJoCo's (`mujoco.batch.Batch.ray`, what the game casts with more threads):
static geoms included, the floor's group excluded as for the game's rays, no body excluded;
walls, boxes and the agent block them. `task_score` is the fraction of rays blocked at the
episode's last step (1.0 = fully sheltered); `rays_hitting` is their number.
"""

from __future__ import annotations

import numpy as np

from hns_train.envs import contract as C
from hns_train.envs.tasks import Task, register
from hns_train.envs.world import RAY_GROUPS

# corner signs (x, y) of a site or a box, in the original's order
CORNER_SIGNS = np.array([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])


def site_rows(site_xy: np.ndarray, site_size: float, site_height: float) -> np.ndarray:
    """(S, SITE_DIM) site_obs rows: centre (x, y, z), then the 4 corners' (x, y, z)."""
    S = len(site_xy)
    centre = np.concatenate([site_xy, np.full((S, 1), site_height)], axis=1)
    corners = np.zeros((S, C.SiteColumns.N_CORNERS, 3))
    corners[:, :, :2] = site_xy[:, None, :] + CORNER_SIGNS * (site_size / 2)
    corners[:, :, 2] = site_height
    return np.concatenate([centre, corners.reshape(S, -1)], axis=1)


def box_corners(pos: np.ndarray, cos: np.ndarray, sin: np.ndarray, half: np.ndarray) -> np.ndarray:
    """(..., 4, 3) middles of the vertical edges of boxes with centres `pos` (..., 3), yaw
    cos / sin (...,) and half sizes `half` (..., 3)."""
    dx = CORNER_SIGNS[:, 0] * half[..., None, 0]
    dy = CORNER_SIGNS[:, 1] * half[..., None, 1]
    c, s = cos[..., None], sin[..., None]
    out = np.repeat(pos[..., None, :], 4, axis=-2)
    out[..., 0] += c * dx - s * dy
    out[..., 1] += s * dx + c * dy
    return out


def smooth_min(dist: np.ndarray, alpha: float, valid: np.ndarray, axis: int) -> np.ndarray:
    """sum(d exp(alpha d)) / sum(exp(alpha d)) over `axis`, over the `valid` entries only."""
    weight = np.exp(alpha * dist) * valid
    total = weight.sum(axis=axis)
    num = (dist * weight).sum(axis=axis)
    return np.divide(num, total, out=np.zeros_like(num), where=total > 0)


@register
class Blueprint(Task):
    name = "blueprint"

    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        W, S = game.n_worlds, cfg.max_sites
        self.site_present = np.zeros((W, S), dtype=bool)
        self.site_centre = np.zeros((W, S, 3))
        self.site_corner = np.zeros((W, S, 4, 3))
        self.completed = np.zeros(W, dtype=bool)  # construction finished this episode
        self.done = np.zeros((W, S), dtype=bool)  # sites done at the latest step

    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        cfg, g = self.cfg, self.game
        key = C.SITE_KEYS
        for w in worlds:
            layout = g.layouts[w]
            present = np.asarray(layout.site_present, dtype=bool)
            rows = site_rows(layout.site_xy, cfg.site_size, cfg.site_height)
            rows[~present] = 0.0
            self.site_present[w] = present
            self.site_centre[w] = rows[:, C.SiteColumns.POS]
            self.site_corner[w] = rows[:, C.SiteColumns.CORNERS].reshape(-1, 4, 3)
            seen = g.agent_present[w][:, None] & present[None, :]  # (A, S)
            g.obs[key.key][w] = np.where(seen[..., None], rows[None], 0.0)
            g.obs[key.visible_mask][w] = seen
            g.obs[key.exists_mask][w] = seen
        self.completed[worlds] = False
        self.done[worlds] = False

    def distances(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every world's (W, S, 4) smooth-min distance of each site corner to the box corners,
        (W, S) distance of each site centre to its nearest box centre, (W, S, 4) of each site
        corner to its nearest box corner (inf where no box is present)."""
        g, nb = self.game, self.cfg.max_boxes
        pos, half = g.object_pos[:, :nb], g.half[:, :nb]
        corners = box_corners(pos, g.object_yaw_cos[:, :nb], g.object_yaw_sin[:, :nb], half)
        box = g.object_present[:, :nb]  # (W, B)
        # site corner (W, S, 4) x box corner (W, B, 4)
        d = np.linalg.norm(
            self.site_corner[:, :, :, None, None, :] - corners[:, None, None, :, :, :], axis=-1
        )  # (W, S, 4, B, 4)
        valid = np.broadcast_to(box[:, None, None, :, None], d.shape)
        smooth = smooth_min(
            d.reshape(*d.shape[:3], -1),
            self.cfg.site_smoothmin_alpha,
            valid.reshape(d.shape[:3] + (-1,)),
            -1,
        )
        nearest_corner = np.where(valid, d, np.inf).min(axis=(-2, -1))
        dc = np.linalg.norm(self.site_centre[:, :, None, :] - pos[:, None, :, :], axis=-1)
        nearest_centre = np.where(box[:, None, :], dc, np.inf).min(axis=-1)
        return smooth, nearest_centre, nearest_corner

    def reward(self, reward: np.ndarray) -> None:
        cfg = self.cfg
        smooth, centre, corner = self.distances()
        present = self.site_present
        n_sites = present.sum(axis=1)
        corner_weight = np.repeat(present[:, :, None], 4, axis=2)
        mean = (smooth * corner_weight).sum(axis=(1, 2)) / np.maximum(4 * n_sites, 1)
        r = -cfg.site_dense_scale * mean
        radius = cfg.site_activation_radius
        self.done = (centre < radius) & (corner < radius).all(axis=-1) & present
        complete = (self.done == present).all(axis=1) & (n_sites > 0)
        first = complete & ~self.completed
        r = r + np.where(first, cfg.site_completed_reward * n_sites, 0.0)
        self.completed |= complete
        reward[...] = r[:, None].astype(reward.dtype)

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return self.completed[worlds].astype(np.float64)

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        n = self.site_present[worlds].sum(axis=1)
        return {"sites_activated": self.done[worlds].sum(axis=1) / np.maximum(n, 1)}


def shelter_ray_starts(cfg) -> np.ndarray:
    """(4 * rays_per_side, 3) ray start points along the floor's edges at z 0, in the
    original's order: for each step along a side, one point on each side, going round."""
    lo = cfg.shelter_ray_margin_cells * cfg.cell
    hi = cfg.floor_size - lo
    n = cfg.shelter_rays_per_side
    off = np.arange(n) / n * (hi - lo)
    pts = np.stack(
        [
            np.stack([lo + off, np.full(n, lo)], -1),
            np.stack([np.full(n, hi), lo + off], -1),
            np.stack([hi - off, np.full(n, hi)], -1),
            np.stack([np.full(n, lo), hi - off], -1),
        ],
        axis=1,
    ).reshape(-1, 2)
    return np.concatenate([pts, np.zeros((len(pts), 1))], axis=1)


@register
class Shelter(Task):
    name = "shelter"

    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        W = game.n_worlds
        self.starts = shelter_ray_starts(cfg)
        R = len(self.starts)
        self.pnt = np.ascontiguousarray(np.broadcast_to(self.starts, (W, R, 3)))
        self.vec = np.zeros((W, R, 3))
        self.groups = np.ascontiguousarray(RAY_GROUPS, dtype=np.uint8)
        self.hitting = np.zeros(W, dtype=np.int64)  # rays reaching the cylinder, latest step
        self.cylinder_geom = -1

    @property
    def n_rays(self) -> int:
        return len(self.starts)

    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        g, h = self.game, self.cfg.cylinder_height
        self.cylinder_geom = g.models[worlds[0]].geom("cylinder").id
        for w in worlds:
            target = np.array([*g.layouts[w].cylinder_xy, h / 2])
            v = target - self.starts
            self.vec[w] = v / np.linalg.norm(v, axis=1, keepdims=True)
        self.hitting[worlds] = self.count_hits()[worlds]

    def count_hits(self) -> np.ndarray:
        """(W,) rays of every world whose first hit is the cylinder (current state)."""
        _, geom = self.game.batch.ray(self.pnt, self.vec, self.groups, True, -1)
        return (geom == self.cylinder_geom).sum(axis=1)

    def reward(self, reward: np.ndarray) -> None:
        self.hitting = self.count_hits()
        r = -self.cfg.shelter_reward_scale * self.hitting
        reward[...] = r[:, None].astype(reward.dtype)

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return 1.0 - self.hitting[worlds] / self.n_rays

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        return {"rays_hitting": self.hitting[worlds].astype(np.float64)}
