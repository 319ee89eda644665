"""The construction transfer tasks: blueprint (cover marked sites with boxes) and shelter (shield
a cylinder from rays). One seeker-slot agent (is_hider 0) in the empty arena with 8 boxes; the
worlds are the `blueprint` and `shelter` presets of config.py, every number a GameConfig field
(docs/fidelity.md, "Transfer task: blueprint" / "shelter", gives each one's source).

Blueprint (horizon 150). 1-4 construction sites, squares of `site_size` 0.5 m (one box) placed
by layout.py in the middle 85% of the arena. A site has a centre and 4 corners at z
`site_height` 0.25; a box has 4 corners, the middles of its vertical edges (its centre
height). Each step:
- dense reward -`blueprint.dense_scale` (0.05) x the mean, over every corner of every site, of the
  smooth-min (alpha `blueprint.smoothmin_alpha` -1.5) of its distances to every box corner:
  sum(d exp(alpha d)) / sum(exp(alpha d)) over the corners of the present boxes;
- a site is done when some box centre lies within `blueprint.activation_radius` 0.1 of its centre
  and each of its corners has a box corner within 0.1 (strictly closer, as the original);
  when every site is done: +`blueprint.completed_reward` 3 per site.
The original ends the episode on completion; our contract runs every episode to its horizon,
so the completion reward is paid once, on the first step every site is done, and the episode
goes on with the dense reward only (undoing and redoing it pays nothing more).
`task_score` is 1.0 when the construction was completed in the episode; `sites_activated` is the
fraction of sites done at its last step. The agent sees the sites in `site_obs` (contract.py),
written at reset: they do not move.

Shelter (horizon 240). A static cylinder, diameter uniform in [1.5, 2] m, height 0.5 m, placed
by layout.py in the middle 70% of the arena. Rays: `shelter.rays_per_side` 25 start points per
side of the floor, `shelter.ray_margin_cells` 1.01 cells in from its edge (inside the outer
walls), at z 0, each aimed at the cylinder's centre (z = half its height), 100 in all. Each
step the reward is -`shelter.reward_scale` (0.001) x the number of rays whose first hit is the
cylinder. Rays are MuJoCo's (`mujoco.batch.Batch.ray`, what the game casts with more threads):
static geoms included, the floor's group excluded as for the game's rays, no body excluded;
walls, boxes and the agent block them. `task_score` is the fraction of rays blocked at the
episode's last step (1.0 = fully sheltered); `rays_hitting` is their number.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hns_train.envs import contract as C
from hns_train.envs.tasks import Task

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


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def site_progress(
    site_corner, site_centre, site_present, pos, cos, sin, half, box_present, alpha, radius,
    mean_out, done_out,
):  # fmt: skip
    """Every world's mean, over its present sites' corners, of the smooth-min (`alpha`) of the
    corner's distances to the present boxes' corners (`mean_out` (W,)), and which sites are
    done (`done_out` (W, S): a box centre and, for each site corner, a box corner closer than
    `radius`). site_corner (W, S, 4, 3), site_centre (W, S, 3), site_present (W, S); box
    centres `pos` (W, B, 3), yaw `cos` / `sin` (W, B), `half` sizes (W, B, 3), box_present
    (W, B). A box's corners are the middles of its vertical edges (its centre's height)."""
    W, S = site_present.shape
    B = pos.shape[1]
    for w in range(W):
        total, count = 0.0, 0
        for s in range(S):
            done_out[w, s] = False
            if not site_present[w, s]:
                continue
            near = np.inf
            for b in range(B):
                if box_present[w, b]:
                    d = 0.0
                    for k in range(3):
                        d += (site_centre[w, s, k] - pos[w, b, k]) ** 2
                    near = min(near, np.sqrt(d))
            aligned = near < radius
            for k in range(4):
                sx, sy, sz = (
                    site_corner[w, s, k, 0],
                    site_corner[w, s, k, 1],
                    site_corner[w, s, k, 2],
                )
                num, den, nearest = 0.0, 0.0, np.inf
                for b in range(B):
                    if not box_present[w, b]:
                        continue
                    c, sn = cos[w, b], sin[w, b]
                    for j in range(4):
                        dx = CORNER_SIGNS[j, 0] * half[w, b, 0]
                        dy = CORNER_SIGNS[j, 1] * half[w, b, 1]
                        ex = pos[w, b, 0] + c * dx - sn * dy - sx
                        ey = pos[w, b, 1] + sn * dx + c * dy - sy
                        ez = pos[w, b, 2] - sz
                        d = np.sqrt(ex * ex + ey * ey + ez * ez)
                        e = np.exp(alpha * d)
                        num += d * e
                        den += e
                        nearest = min(nearest, d)
                total += num / den if den > 0 else 0.0
                count += 1
                aligned = aligned and nearest < radius
            done_out[w, s] = aligned
        mean_out[w] = total / count if count else 0.0


class Blueprint(Task, name="blueprint", stat_names=("sites_activated",)):
    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        W, S = game.n_worlds, cfg.max_sites
        self.site_present = np.zeros((W, S), dtype=bool)
        self.site_centre = np.zeros((W, S, 3))
        self.site_corner = np.zeros((W, S, 4, 3))
        self.completed = np.zeros(W, dtype=bool)  # construction finished this episode
        self.done = np.zeros((W, S), dtype=bool)  # sites done at the latest step
        self.site_obs = np.zeros((W, game.n_agents, S, C.SITE_DIM))  # site_obs rows
        self.site_seen = np.zeros((W, game.n_agents, S), dtype=bool)  # its masks
        self._mean = np.zeros(W)  # mean smooth-min site corner distance, latest step

    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        cfg, g = self.cfg, self.game
        for w in worlds:
            layout = g.layouts[w]
            present = np.asarray(layout.site_present, dtype=bool)
            rows = site_rows(layout.site_xy, cfg.site_size, cfg.site_height)
            rows[~present] = 0.0
            self.site_present[w] = present
            self.site_centre[w] = rows[:, C.SiteColumns.POS]
            self.site_corner[w] = rows[:, C.SiteColumns.CORNERS].reshape(-1, 4, 3)
            seen = g.agent_present[w][:, None] & present[None, :]  # (A, S)
            self.site_obs[w] = np.where(seen[..., None], rows[None], 0.0)
            self.site_seen[w] = seen
        self.completed[worlds] = False
        self.done[worlds] = False

    def observations(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        key, seen = C.SITE_KEYS, self.site_seen[worlds]
        return {key.key: self.site_obs[worlds], key.visible_mask: seen, key.exists_mask: seen}

    def reward(self, reward: np.ndarray) -> None:
        cfg, g, nb = self.cfg, self.game, self.cfg.max_boxes
        site_progress(
            self.site_corner,
            self.site_centre,
            self.site_present,
            g.object_pos[:, :nb],
            g.object_yaw_cos[:, :nb],
            g.object_yaw_sin[:, :nb],
            g.half[:, :nb],
            g.object_present[:, :nb],
            cfg.blueprint.smoothmin_alpha,
            cfg.blueprint.activation_radius,
            self._mean,
            self.done,
        )
        n_sites = self.site_present.sum(axis=1)
        complete = (self.done == self.site_present).all(axis=1) & (n_sites > 0)
        first = complete & ~self.completed
        self.completed |= complete
        r = np.where(first, cfg.blueprint.completed_reward * n_sites, 0.0)
        r -= cfg.blueprint.dense_scale * self._mean
        reward[...] = r[:, None]

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return self.completed[worlds].astype(np.float64)

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        n = self.site_present[worlds].sum(axis=1)
        return {"sites_activated": self.done[worlds].sum(axis=1) / np.maximum(n, 1)}


def shelter_ray_starts(cfg) -> np.ndarray:
    """(4 * rays_per_side, 3) ray start points along the floor's edges at z 0, in the
    original's order: for each step along a side, one point on each side, going round."""
    lo = cfg.shelter.ray_margin_cells * cfg.cell
    hi = cfg.floor_size - lo
    n = cfg.shelter.rays_per_side
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


class Shelter(Task, name="shelter", stat_names=("rays_hitting",)):
    def __init__(self, cfg, game) -> None:
        super().__init__(cfg, game)
        W = game.n_worlds
        self.starts = shelter_ray_starts(cfg)
        R = len(self.starts)
        self.pnt = np.ascontiguousarray(np.broadcast_to(self.starts, (W, R, 3)))
        self.vec = np.zeros((W, R, 3))
        self.hitting = np.zeros(W, dtype=np.int64)  # rays reaching the cylinder, latest step
        self.cylinder_geom = -1

    def reset(self, worlds: np.ndarray) -> None:
        super().reset(worlds)
        g, h = self.game, self.cfg.cylinder_height
        self.cylinder_geom = g.geom_id("cylinder")
        for w in worlds:
            target = np.array([*g.layouts[w].cylinder_xy, h / 2])
            v = target - self.starts
            self.vec[w] = v / np.linalg.norm(v, axis=1, keepdims=True)
        self.hitting[worlds] = self.count_hits()[worlds]

    def count_hits(self) -> np.ndarray:
        """(W,) rays of every world whose first hit is the cylinder (current state)."""
        return (self.game.first_hits(self.pnt, self.vec) == self.cylinder_geom).sum(axis=1)

    def reward(self, reward: np.ndarray) -> None:
        self.hitting = self.count_hits()
        r = -self.cfg.shelter.reward_scale * self.hitting
        reward[...] = r[:, None].astype(reward.dtype)

    def score(self, worlds: np.ndarray) -> np.ndarray:
        return 1.0 - self.hitting[worlds] / len(self.starts)

    def extra_stats(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        return {"rays_hitting": self.hitting[worlds].astype(np.float64)}
