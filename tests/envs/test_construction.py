"""The construction transfer tasks (construction.py): blueprint and shelter on real worlds.

Scripted scenes put boxes in place by writing qpos into the live MjData and stepping once with
the no-op, so rewards are those of a real step; every reward is checked against an independent
computation from the post-step state (loops over corners, a numpy ray / box slab test).
"""

import math

import mujoco
import numpy as np
import pytest

from hns_train.agents.observations import ObsLayout
from hns_train.agents.policy import ActorCritic
from hns_train.envs import contract as C
from hns_train.envs.config import PRESETS, make_config
from hns_train.envs.construction import shelter_ray_starts
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.layout import CUBE, LONG_X, LONG_Y, middle_range, sample_layout

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*probably should be gymnasium.spaces"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
]
TASKS = ["blueprint", "shelter"]
PARK_Y = 5.45  # a row of parked boxes along the top wall (sites and the cylinder end below 5.2)


# ----------------------------------------------------------------------------- helpers
def game_of(preset: str, seed: int = 0, **params) -> HideAndSeekGame:
    game = HideAndSeekGame(make_config(preset, **params), n_worlds=1, seed=seed)
    game.reset()
    return game


def put(game: HideAndSeekGame, agent=None, boxes=None) -> None:
    """Agent 0 at (x, y, z) and boxes {slot: (x, y, yaw)} at rest; other boxes parked in a row."""
    idx, d = game.index, game.data
    if agent is not None:
        d.qpos[idx.agent_qpos[0]] = (*agent, 0.0)
        d.qvel[idx.agent_qvel[0]] = 0.0
    boxes = boxes or {}
    parked = 0
    for o in range(game.cfg.max_boxes):
        if o in boxes:
            x, y, yaw = boxes[o]
        else:
            x, y, yaw = 0.5 + 0.65 * parked, PARK_Y, 0.0
            parked += 1
        d.qpos[idx.object_qpos[o]] = (x, y, 0.0, yaw)
        d.qvel[idx.object_qvel[o]] = 0.0


def step(game: HideAndSeekGame):
    _, reward, truncated, infos = game.step(game.noop[None, None].repeat(game.n_agents, 1))
    return float(reward[0, 0]), infos[0]


def hand_dense(game: HideAndSeekGame) -> tuple[float, list[bool]]:
    """The blueprint's dense reward and each site's "done", by loops over the corners."""
    cfg, layout = game.cfg, game.layouts[0]
    box_corners, box_centres = [], []
    for o in range(cfg.max_boxes):
        c = game.object_pos[0, o]
        yaw = float(game.object_yaw[0, o])
        hx, hy = game.half[0, o, :2]
        box_centres.append(c)
        for sx, sy in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
            dx, dy = sx * hx, sy * hy
            box_corners.append(
                (
                    c[0] + math.cos(yaw) * dx - math.sin(yaw) * dy,
                    c[1] + math.sin(yaw) * dx + math.cos(yaw) * dy,
                    c[2],
                )
            )
    means, done = [], []
    h = cfg.site_size / 2
    for (x, y), present in zip(layout.site_xy, layout.site_present, strict=True):
        if not present:
            continue
        aligned = True
        for sx, sy in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
            corner = np.array([x + sx * h, y + sy * h, cfg.site_height])
            d = [float(np.linalg.norm(corner - np.array(b))) for b in box_corners]
            w = [math.exp(cfg.blueprint.smoothmin_alpha * v) for v in d]
            means.append(sum(a * b for a, b in zip(d, w, strict=True)) / sum(w))
            aligned &= min(d) < cfg.blueprint.activation_radius
        centre = np.array([x, y, cfg.site_height])
        near = min(float(np.linalg.norm(centre - b)) for b in box_centres)
        done.append(near < cfg.blueprint.activation_radius and aligned)
    return -cfg.blueprint.dense_scale * sum(means) / len(means), done


def far_corner(game: HideAndSeekGame) -> tuple[float, float]:
    """The arena corner farthest from every site (room for the agent)."""
    sites = game.layouts[0].site_xy[game.layouts[0].site_present]
    corners = [(0.4, 0.4), (0.4, 4.9), (5.6, 0.4), (5.6, 4.9)]
    return max(corners, key=lambda c: np.min(np.linalg.norm(sites - c, axis=1)))


# ----------------------------------------------------------------------------- config, layout
def test_presets_carry_the_original_numbers():
    bp, sh = make_config("blueprint"), make_config("shelter")
    assert (bp.task, bp.horizon, bp.n_boxes, bp.n_elongated, bp.n_sites) == (
        "blueprint", 150, (8, 8), (0, 0), (1, 4)
    )  # fmt: skip
    assert (bp.site_size, bp.blueprint.activation_radius, bp.blueprint.smoothmin_alpha) == (
        0.5,
        0.1,
        -1.5,
    )
    assert (bp.blueprint.dense_scale, bp.blueprint.completed_reward, bp.site_area_fraction) == (
        0.05, 3.0, 0.85
    )  # fmt: skip
    assert (sh.task, sh.horizon, sh.n_boxes, sh.n_elongated, sh.cylinder) == (
        "shelter", 240, (8, 8), (3, 3), True
    )  # fmt: skip
    assert (sh.cylinder_diameter, sh.cylinder_height, sh.cylinder_area_fraction) == (
        (1.5, 2.0), 0.5, 0.7
    )  # fmt: skip
    assert (sh.shelter.rays_per_side, sh.shelter.reward_scale) == (25, 0.001)
    for cfg in (bp, sh):  # one agent in the seeker slot
        assert (cfg.n_hiders, cfg.n_seekers, cfg.prep_fraction) == ((0, 0), (1, 1), 0.0)


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(n_sites=(0, 2)), "blueprint task needs n_sites low >= 1"),
        (
            dict(blueprint={"smoothmin_alpha": 0.5}),
            r"blueprint\.smoothmin_alpha=0.5 is not allowed; it must be < 0$",
        ),
        (dict(site_activation_radius=0.0), r"blueprint\.activation_radius=0.0 is not allowed.*> 0"),
        (dict(site_area_fraction=1.5), r"site_area_fraction=1.5 is not allowed.*> 0 and <= 1"),
        (dict(site_cells=2), "site_cells=2 must be >= 1 and cover site_size=0.5"),
        (dict(blueprint={"dense_scale": float("nan")}), r"blueprint\.dense_scale=nan must be"),
    ],
)
def test_bad_blueprint_numbers_are_rejected(params, message):
    with pytest.raises(ValueError, match=message):
        make_config("blueprint", **params)


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(cylinder=False), "shelter task needs cylinder=True"),
        (dict(cylinder_diameter=(2.0, 1.0)), "cylinder_diameter=.* 0 < low <= high"),
        (dict(shelter={"rays_per_side": 0}), r"shelter\.rays_per_side=0 is not allowed.* >= 1"),
    ],
)
def test_bad_shelter_numbers_are_rejected(params, message):
    with pytest.raises(ValueError, match=message):
        make_config("shelter", **params)


def test_site_footprints_bind_only_configs_with_sites():
    make_config("quadrant", grid_cells=60)  # 0.1 m cells: 3 of them would not hold a site
    with pytest.raises(ValueError, match="site_cells=3 must be >= 1 and cover site_size=0.5"):
        make_config("blueprint", grid_cells=60)


def test_only_the_blueprint_has_site_keys():
    for preset in PRESETS:
        shapes = C.observation_shapes(make_config(preset))
        if preset == "blueprint":
            assert tuple(shapes)[-3:] == ("site_obs", "mask_as_obs", "mask_as_obs_spoof")
            assert shapes["site_obs"] == (4, C.SITE_DIM) and shapes["mask_as_obs"] == (4,)
            assert tuple(shapes)[:-3] == C.OBS_KEYS
        else:
            assert tuple(shapes) == C.OBS_KEYS
    assert C.is_mask_key("mask_as_obs") and C.is_mask_key("mask_as_obs_spoof")
    assert not C.is_mask_key("site_obs")


def test_sites_lie_in_the_middle_on_free_cells():
    cfg = make_config("blueprint")
    rng = np.random.default_rng(0)
    lo, hi = middle_range(cfg.grid_cells, cfg.site_cells, cfg.site_area_fraction)
    assert (lo, hi) == (2, 24)  # the original's int truncations at 30 cells, 3-cell sites
    counts = set()
    for _ in range(200):
        layout = sample_layout(cfg, rng)
        n = int(layout.site_present.sum())
        counts.add(n)
        assert layout.site_present[:n].all()  # present sites first
        xy = layout.site_xy[:n]
        c = cfg.cell
        assert (xy >= (lo + 1.5) * c - 1e-9).all() and (xy <= (hi - 1 + 1.5) * c + 1e-9).all()
        # footprints of 3 cells never overlap a box's, the agent's or another site's
        others = [(p, 3) for p in layout.box_xy] + [(layout.agent_xy[0], 2)]
        others += [(p, 3) for p in xy]
        for k, s in enumerate(xy):
            for j, (p, cells) in enumerate(others):
                if j == len(others) - n + k:
                    continue  # itself
                gap = (3 + cells) / 2 * c - 1e-9
                assert abs(s[0] - p[0]) >= gap or abs(s[1] - p[1]) >= gap
    assert counts == {1, 2, 3, 4}


def test_the_cylinder_lies_in_the_middle_and_boxes_avoid_it():
    cfg = make_config("shelter")
    rng = np.random.default_rng(1)
    radii = []
    for _ in range(100):
        layout = sample_layout(cfg, rng)
        r, (x, y) = layout.cylinder_radius, layout.cylinder_xy
        radii.append(r)
        n = math.ceil(2 * r / cfg.cell)
        lo, hi = middle_range(cfg.grid_cells, n, cfg.cylinder_area_fraction)
        for v in (x, y):
            assert (lo + n / 2) * cfg.cell - 1e-9 <= v <= (hi - 1 + n / 2) * cfg.cell + 1e-9
        assert (layout.box_kind != CUBE).sum() == 3
        for p, kind in zip(layout.box_xy, layout.box_kind, strict=True):
            half = {CUBE: (0.25, 0.25), LONG_X: (0.825, 0.075), LONG_Y: (0.075, 0.825)}[kind]
            # nearest point of the box's rectangle to the axis is outside the cylinder
            q = np.clip((x, y), p - half, p + half)
            assert np.hypot(*(q - (x, y))) >= r - 1e-9
    assert min(radii) >= 0.75 and max(radii) <= 1.0 and max(radii) - min(radii) > 0.15


def test_world_geoms_of_the_tasks():
    sh = game_of("shelter", seed=4)
    m, layout = sh.model, sh.layouts[0]
    g = m.geom("cylinder")
    assert g.type[0] == mujoco.mjtGeom.mjGEOM_CYLINDER and g.bodyid[0] == 0  # static
    assert np.allclose(g.size[:2], (layout.cylinder_radius, 0.25))
    assert np.allclose(g.pos, (*layout.cylinder_xy, 0.25))
    assert (g.contype[0], g.conaffinity[0], g.group[0]) == (1, 1, 0)  # collides, rays hit it
    bp = game_of("blueprint", seed=4)
    for k in range(4):
        s = bp.model.geom(f"site{k}")
        assert (s.contype[0], s.conaffinity[0]) == (0, 0)
        assert s.group[0] == (2 if bp.layouts[0].site_present[k] else 3)  # rays skip both


# ----------------------------------------------------------------------------- blueprint
def test_site_rows_are_centres_and_corners_for_every_agent():
    game = game_of("blueprint", seed=5)
    layout, obs = game.layouts[0], game.obs
    n = int(layout.site_present.sum())
    rows = obs["site_obs"][0, 0]
    for k in range(4):
        if k < n:
            x, y = layout.site_xy[k]
            want = [x, y, 0.25]
            for sx, sy in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
                want += [x + 0.25 * sx, y + 0.25 * sy, 0.25]
            assert np.allclose(rows[k], want, atol=1e-6)
        else:
            assert not rows[k].any()
    want_mask = (np.arange(4) < n).astype(np.float32)
    assert np.array_equal(obs["mask_as_obs"][0, 0], want_mask)
    assert np.array_equal(obs["mask_as_obs_spoof"][0, 0], want_mask)
    step(game)
    assert np.array_equal(game.obs["site_obs"][0, 0], rows)  # sites do not move


@pytest.mark.parametrize("offset, inside", [(0.099, True), (0.101, False)])
def test_a_site_is_activated_by_a_box_within_the_radius(offset, inside):
    game = game_of("blueprint", seed=2, n_sites=(2, 2))
    (x0, y0), (x1, y1) = game.layouts[0].site_xy
    put(game, agent=(*far_corner(game), 0.0), boxes={0: (x0 + offset, y0, 0.0), 1: (x1, y1, 0.0)})
    reward, _ = step(game)
    d = np.linalg.norm(game.object_pos[0, 0, :2] - (x0, y0))
    assert abs(d - offset) < 5e-4  # the step left the box where it was put
    dense, done = hand_dense(game)
    assert done == [inside, True]
    assert list(game.task.done[0]) == done
    assert reward == pytest.approx(dense + (6.0 if inside else 0.0), rel=1e-6, abs=1e-6)


def test_a_turned_box_on_the_site_centre_does_not_finish_it():
    game = game_of("blueprint", seed=2, n_sites=(1, 1))
    (x0, y0) = game.layouts[0].site_xy[0]
    put(game, agent=(*far_corner(game), 0.0), boxes={0: (x0, y0, 0.3)})
    reward, _ = step(game)
    dense, done = hand_dense(game)
    assert done == [False]  # centre on the site, corners 0.13 m off
    assert reward == pytest.approx(dense, rel=1e-6)


def test_completion_pays_three_per_site_once_and_scores_the_episode():
    game = game_of("blueprint", seed=3, n_sites=(3, 3), horizon=6)
    sites = game.layouts[0].site_xy
    on_sites = {k: (*sites[k], 0.0) for k in range(3)}
    agent = (*far_corner(game), 0.0)
    put(game, agent=agent, boxes={k: (sites[k][0] + 0.3, sites[k][1], 0.0) for k in range(3)})
    rewards = [step(game)[0]]
    put(game, agent=None, boxes=on_sites)
    rewards.append(step(game)[0])
    rewards.append(step(game)[0])
    put(game, agent=None, boxes={})  # every box away: undone
    rewards.append(step(game)[0])
    put(game, agent=None, boxes=on_sites)  # redone: no second bonus
    rewards.append(step(game)[0])
    last, info = step(game)
    rewards.append(last)
    bonus = [r - d for r, d in zip(rewards, _dense_trace(game, rewards), strict=True)]
    assert bonus[1] == pytest.approx(9.0, abs=1e-5)
    assert np.allclose([bonus[k] for k in (0, 2, 3, 4, 5)], 0.0, atol=1e-5)
    assert info["task_score"] == 1.0 and info["sites_activated"] == 1.0
    assert info["seeker_return"] == pytest.approx(sum(rewards), abs=1e-4)


def _dense_trace(game, rewards):
    """Dense rewards of the steps above, recomputed from the same scripted states."""
    again = game_of("blueprint", seed=3, n_sites=(3, 3), horizon=6)
    sites = again.layouts[0].site_xy
    on_sites = {k: (*sites[k], 0.0) for k in range(3)}
    agent = (*far_corner(again), 0.0)
    moves = [
        (agent, {k: (sites[k][0] + 0.3, sites[k][1], 0.0) for k in range(3)}),
        (None, on_sites),
        None,
        (None, {}),
        (None, on_sites),
        None,
    ]
    out = []
    for move in moves:
        if move is not None:
            put(again, *move)
        step(again)
        out.append(hand_dense(again)[0])
    assert len(out) == len(rewards)
    return out


def test_an_unfinished_episode_scores_zero_with_the_fraction_of_sites_done():
    game = game_of("blueprint", seed=3, n_sites=(2, 2), horizon=2)
    sites = game.layouts[0].site_xy
    put(game, agent=(*far_corner(game), 0.0), boxes={0: (*sites[0], 0.0)})
    step(game)
    _, info = step(game)
    assert info["task_score"] == 0.0 and info["sites_activated"] == 0.5


# ----------------------------------------------------------------------------- shelter
def _slab_entry(p, v, centre, yaw, half):
    """Distance along the ray p + t v to where it enters a box (None: it misses)."""
    c, s = math.cos(yaw), math.sin(yaw)
    rot = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])  # world -> box frame
    q, u = rot @ (p - centre), rot @ v
    t0, t1 = 0.0, np.inf
    for k in range(3):
        if abs(u[k]) < 1e-12:
            if abs(q[k]) > half[k]:
                return None
            continue
        a, b = (-half[k] - q[k]) / u[k], (half[k] - q[k]) / u[k]
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
    return t0 if t0 <= t1 else None


def _blocked_by_boxes(game) -> int:
    """Rays whose path to the cylinder crosses a box first (numpy, not MuJoCo)."""
    cfg, layout = game.cfg, game.layouts[0]
    r, (cx, cy), h = layout.cylinder_radius, layout.cylinder_xy, cfg.cylinder_height
    blocked = 0
    for p in shelter_ray_starts(cfg):
        v = np.array([cx, cy, h / 2]) - p
        v /= np.linalg.norm(v)
        # first crossing of the cylinder's side: |p_xy + t v_xy - c| = r
        w = p[:2] - (cx, cy)
        a, b, cc = v[:2] @ v[:2], 2 * w @ v[:2], w @ w - r * r
        t_cyl = (-b - math.sqrt(b * b - 4 * a * cc)) / (2 * a)
        for o in range(cfg.max_boxes):
            t = _slab_entry(
                p, v, game.object_pos[0, o], float(game.object_yaw[0, o]), game.half[0, o]
            )
            if t is not None and t < t_cyl:
                blocked += 1
                break
    return blocked


def test_shelter_reward_counts_the_rays_that_reach_the_cylinder():
    game = game_of("shelter", seed=6)
    cfg, layout = game.cfg, game.layouts[0]
    r, (cx, cy) = layout.cylinder_radius, layout.cylinder_xy
    kinds = layout.box_kind
    long = [o for o in range(cfg.max_boxes) if kinds[o] != CUBE]
    assert len(long) == 3

    def along(o, axis):  # yaw that lays elongated box o along x (axis 0) or y (1)
        return 0.0 if (kinds[o] == LONG_X) == (axis == 0) else math.pi / 2

    boxes = {
        long[0]: (cx, cy - r - 0.25, along(long[0], 0)),  # a wall south of the cylinder
        long[1]: (cx - r - 0.25, cy, along(long[1], 1)),  # and one west of it
        long[2]: (1.2, PARK_Y, along(long[2], 0)),
    }
    for k, o in enumerate(o for o in range(cfg.max_boxes) if kinds[o] == CUBE):
        boxes[o] = (2.6 + 0.6 * k, PARK_Y, 0.0)
    # the agent waits on top of the cylinder, above every ray (they end at z <= 0.25)
    put(game, agent=(cx, cy, cfg.cylinder_height), boxes=boxes)
    reward, _ = step(game)
    blocked = _blocked_by_boxes(game)
    assert 0 < blocked < 100
    assert game.task.hitting[0] == 100 - blocked
    assert reward == pytest.approx(-0.001 * (100 - blocked), rel=1e-6)
    # the two walls moved away from the cylinder (along the bottom and the right side): the
    # rays they shielded reach it now
    boxes[long[0]] = (3.0, 0.4, along(long[0], 0))
    boxes[long[1]] = (5.6, 2.5, along(long[1], 1))
    put(game, agent=None, boxes=boxes)
    reward, _ = step(game)
    opened = _blocked_by_boxes(game)
    assert opened < blocked
    assert game.task.hitting[0] == 100 - opened
    assert reward == pytest.approx(-0.001 * (100 - opened), rel=1e-6)


def test_shelter_score_is_the_blocked_fraction_at_the_last_step():
    game = game_of("shelter", seed=6, horizon=1)
    _, info = step(game)
    hits = game.task.hitting[0]
    assert info["rays_hitting"] == hits and info["task_score"] == pytest.approx(1 - hits / 100)


def test_ray_start_points_follow_the_floor_edges():
    cfg = make_config("shelter")
    pts = shelter_ray_starts(cfg)
    assert pts.shape == (100, 3) and not pts[:, 2].any()
    lo, hi = 1.01 * 0.2, 6.0 - 1.01 * 0.2
    assert np.allclose(pts[:4, :2], [(lo, lo), (hi, lo), (hi, hi), (lo, hi)])
    on_edge = np.isclose(pts[:, :2], lo) | np.isclose(pts[:, :2], hi)
    assert on_edge.any(axis=1).all()
    assert len(np.unique(pts.round(9), axis=0)) == 100


# ----------------------------------------------------------------------------- interfaces
def test_the_network_embeds_sites_as_a_fourth_entity_kind():
    game = game_of("blueprint", seed=1)
    shapes = C.observation_shapes(game.cfg)
    layout = ObsLayout.from_shapes(shapes)
    assert [s.kind.name for s in layout.entities] == ["boxes", "sites"]  # 1 agent, no ramps
    assert layout.entities[1].dim == C.SITE_DIM
    model = ActorCritic(shapes, device="cpu")
    obs = {k: v[0] for k, v in game.obs.items()}
    out = model.act(obs)
    assert out.actions.shape == (1, 5)
    quadrant = ObsLayout.from_shapes(C.observation_shapes(make_config("quadrant")))
    assert [s.kind.name for s in quadrant.entities] == ["agents", "boxes", "ramps"]


@pytest.mark.parametrize("preset", TASKS)
def test_replays_keep_the_sites_and_the_cylinder(preset, tmp_path):
    from hns_train.eval import recorder
    from hns_train.eval import replay as R

    cfg = make_config(preset)
    act = recorder.object_seeking_actions(cfg, seed=1)
    replay = R.load(
        R.save(recorder.record_episode(cfg, act, seed=3, n_steps=30), tmp_path / "e.npz")
    )
    game = game_of(preset, seed=None)
    game.reset(seeds=[3])  # the recorded episode's world
    names = R.layout_shapes(cfg)
    every = R.layout_shapes(make_config("quadrant"))  # no sites, no cylinder: what all hold
    assert set(names) - set(every) == (
        {"site_xy", "site_present"} if preset == "blueprint" else {"cylinder_xy", "cylinder_radius"}
    )
    for name in names:
        np.testing.assert_array_equal(getattr(replay.layout, name), getattr(game.layouts[0], name))
    model, data = replay.rebuild()
    for k in range(model.ngeom):
        np.testing.assert_array_equal(model.geom_pos[k], game.model.geom_pos[k])
        np.testing.assert_array_equal(model.geom_size[k], game.model.geom_size[k])
    idx = replay.index(model)
    for t in range(replay.n_steps):  # boxes pushed against the cylinder replay exactly too
        replay.prepare_step(model, data, t, idx)
        mujoco.mj_step(model, data, cfg.substeps)
        np.testing.assert_array_equal(data.qpos, replay["qpos"][t + 1], err_msg=f"step {t}")
