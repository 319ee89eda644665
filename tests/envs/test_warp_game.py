"""The game on MuJoCo Warp (envs/warp) against the C backend, on Warp's CPU device.

- Scripted experiments, one per world of one 8-world batch, run on both backends from the same
  placed states: full-force free run, spin, push, grab and pull, lock held under a full push,
  unlock, ramp climb, lidar. What each measures agrees within 1% (or 1 mm where it is ~0).
  And test_rules.py's grab scenes: a held box stretched past the grab range is dropped for the
  next eligible one on the same step in both; a locked box can be grabbed and pins the agent,
  and locking a held box keeps the grab.
- Same seeds and actions as `VectorGame`: equal layouts, rewards, locks and grabs, and
  observations within tolerance, for the first `EQUAL_STEPS` steps of random play that grabs and
  locks: positions, yaws and lidar within `POS_ATOL`, velocities within `VEL_ATOL` for the first
  `VEL_STEPS` steps (contact impulses in float32 and float64 part sooner: 0.2-0.8 m/s apart in
  single steps after that, while positions still agree to mm; with solid arms, which also touch
  walls, boxes and ramps, the seeded play here parts in step 4, after an arm met the ramp).
  Masks and lidar may differ in a few entries: on the 0.2 m placement grid, a sight line can
  pass exactly through a wall corner, and a lidar ray can graze the corner of a box pushed
  against a wall, so that float32 and float64 poses a fraction of a mm apart disagree on the
  hit (`MASK_MISMATCH`; Warp's rays cast in the C model from Warp's poses give Warp's readings).
- Auto-reset: the first episode is VectorGame's; a world reset from the layout bank starts
  exactly as the world whose first layout filled that bank slot.

Every test here needs Warp's kernels: the first test of a run on a fresh machine compiles them
(about a minute on 2 cores; cached in Warp's kernel cache after that), so they are `slow` and
share one Warp game per module.
"""

import logging
import math

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp")

from hns_train.envs.config import make_config  # noqa: E402
from hns_train.envs.contract import MASK_KEYS  # noqa: E402
from hns_train.envs.game import HideAndSeekGame  # noqa: E402
from hns_train.envs.layout import sample_layout  # noqa: E402
from hns_train.envs.vector import VectorGame  # noqa: E402
from hns_train.envs.warp import rules as TR  # noqa: E402
from hns_train.envs.warp.bank import BankConfig  # noqa: E402
from hns_train.envs.warp.game import WarpGame  # noqa: E402
from hns_train.envs.warp.physics import PARK_Z_WARP, PER_WORLD_FIELDS, warp_qpos  # noqa: E402
from hns_train.envs.world import PARK_Z, ModelCache  # noqa: E402

pytestmark = pytest.mark.slow

W = 8
SEED = 5
EQUAL_SEED = 7  # a seed whose random play grabs and locks within EQUAL_STEPS
EQUAL_STEPS = 10  # steps of random play over which observations agree (module docstring)
POS_ATOL = 0.02  # metres / radians: positions, yaws, cos / sin, lidar
VEL_ATOL, VEL_STEPS = 0.05, 4  # m/s, rad/s
MASK_MISMATCH = 0.01  # share of mask entries / lidar rays that may differ (through corners)
FACE_PX = math.pi / 2  # yaw that faces +x (an agent's front is (sin yaw, -cos yaw))
PUSH_PX, PULL_MX, STILL = [10, 5, 5, 0, 0], [0, 5, 5, 0, 0], [5, 5, 5, 0, 0]
RAMP = 2  # quadrant object slots: boxes 0, 1, then the ramp


@pytest.fixture(scope="module")
def warp_game():
    return WarpGame(make_config("quadrant"), W, seed=SEED)


# ---------------------------------------------------------------------- scripted experiments
# Each scene: agents / objects placed {slot: (x, y, yaw)} (the rest wait at the arena's top
# edge), a list of per-step actions {slot: action}, and what is measured. Scenes play in the
# open band y in [3.5, 5.1] of the quadrant arena, away from the room whatever its doors.
SPARE_AGENTS = [(3.6, 5.0, 0.0), (4.2, 5.0, 0.0), (4.8, 5.0, 0.0), (5.4, 5.0, 0.0)]
SPARE_OBJECTS = [(0.5, 5.6, 0.0), (1.2, 5.6, 0.0), (1.9, 5.6, 0.0)]
BOX_NEXT_TO_AGENT = {"agents": {0: (2.0, 4.3, FACE_PX)}, "objects": {0: (2.45, 4.3, 0.0)}}
SCENES = {
    "free run": ({"agents": {0: (0.7, 4.3, 0.0)}}, [{0: PUSH_PX}] * 6, ("agent_x", 0)),
    "spin": ({"agents": {0: (1.5, 4.3, 0.0)}}, [{0: [5, 5, 10, 0, 0]}] * 6, ("agent_yaw", 0)),
    "push": (
        {"agents": {0: (0.8, 4.3, FACE_PX)}, "objects": {0: (1.25, 4.3, 0.0)}},
        [{0: PUSH_PX}] * 8,
        ("object_x", 0),
    ),
    "grab and pull": (BOX_NEXT_TO_AGENT, [{0: [0, 5, 5, 1, 0]}] * 8, ("object_x", 0)),
    "lock held under a full push": (
        BOX_NEXT_TO_AGENT,
        [{0: [5, 5, 5, 0, 1]}] + [{0: [10, 5, 5, 0, 1]}] * 6,
        ("object_x", 0),
    ),
    "unlock": (
        BOX_NEXT_TO_AGENT,
        [{0: [5, 5, 5, 0, 1]}, {0: STILL}] + [{0: PUSH_PX}] * 6,
        ("object_x", 0),
    ),
    "ramp climb": (
        {"agents": {0: (3.0, 4.65, 0.0)}, "objects": {RAMP: (3.0, 4.0, 0.0)}},
        [{0: [5, 0, 5, 0, 0]}] * 6,  # up the slope to the top edge (then it drops off)
        ("agent_z", 0),
    ),
    "lidar": (
        {
            "agents": {0: (1.0, 4.0, 0.3), 1: (1.0, 4.8, 2.0)},
            "objects": {0: (2.0, 4.0, 0.4), RAMP: (0.6, 3.6, 0.0)},
        },
        [{0: STILL}],
        ("lidar", None),
    ),
}


def _scene_qpos(scene, n_agents, n_objects) -> np.ndarray:
    """Entity qpos rows (entity e: 4e..4e+3) of a scene: x, y, z 0, yaw."""
    agents = {a: SPARE_AGENTS[a] for a in range(n_agents)} | scene.get("agents", {})
    spare = iter(SPARE_OBJECTS)
    objects = scene.get("objects", {})
    rows = []
    for e in range(n_agents + n_objects):
        if e < n_agents:
            x, y, yaw = agents[e]
        else:
            x, y, yaw = objects[e - n_agents] if e - n_agents in objects else next(spare)
        rows.append([x, y, 0.0, yaw])
    return np.array(rows).reshape(-1)


def _measure(kind, slot, pos, yaw, lidar, n_agents):
    if kind == "agent_x":
        return pos[:, slot, 0]
    if kind == "agent_yaw":
        return yaw[:, slot]
    if kind == "agent_z":
        return pos[:, slot, 2]
    if kind == "object_x":
        return pos[:, n_agents + slot, 0]
    return lidar


def _host(x) -> np.ndarray:
    """A float64 host copy of a numpy array or a (CPU) torch tensor."""
    return (x.cpu().numpy() if isinstance(x, torch.Tensor) else x).astype(float)


def _place(c_game, warp_game, scenes):
    """Put world k of both backends in scenes[k] at rest; both re-read state and sight."""
    A, Ob = c_game.n_agents, c_game.n_objects
    wg = warp_game
    for w, scene in enumerate(scenes):
        q = _scene_qpos(scene, A, Ob)
        c_game._qpos[w, : len(q)], c_game._qvel[w, : len(q)] = q, 0.0
        wg.worlds.qpos[w, : len(q)] = torch.as_tensor(q)
        wg.worlds.qvel[w, : len(q)] = 0.0
    c_game._read_state()
    c_game._cast_rays(c_game._all_worlds)
    c_game._observe()
    wg._read_state()
    wg._cast_rays()
    wg._observe()


def _run_scenes(c_game, warp_game):
    """Both backends through SCENES (world k plays scene k); returns per scene the measured
    series, (steps + 1, ...) from the placed state on, for C and Warp."""
    names = list(SCENES)
    A = c_game.n_agents
    wg = warp_game
    _place(c_game, wg, [SCENES[name][0] for name in names])
    n_steps = max(len(SCENES[n][1]) for n in names)

    def snapshot(pos, yaw, lidar):  # copies: the C game rewrites its arrays in place
        pos, yaw, lidar = (_host(x) for x in (pos, yaw, lidar))
        return [
            _measure(*SCENES[n][2], pos[w : w + 1], yaw[w : w + 1], lidar[w : w + 1], A)
            for w, n in enumerate(names)
        ]

    series = {"c": [], "warp": []}
    series["c"].append(snapshot(c_game._ent_pos, c_game._ent_yaw, c_game.lidar))
    series["warp"].append(snapshot(wg.ent_pos, wg.ent_yaw, wg.lidar))
    for t in range(n_steps):
        act = np.broadcast_to(c_game.noop, (W, A, 5)).copy()
        for w, name in enumerate(names):
            steps = SCENES[name][1]
            for slot, a in steps[min(t, len(steps) - 1)].items():
                act[w, slot] = a
        c_game.step(act)
        wg.step(act)
        series["c"].append(snapshot(c_game._ent_pos, c_game._ent_yaw, c_game.lidar))
        series["warp"].append(snapshot(wg.ent_pos, wg.ent_yaw, wg.lidar))
    out = {}
    for w, name in enumerate(names):
        n = len(SCENES[name][1]) + 1
        out[name] = tuple(np.concatenate([s[w] for s in series[k][:n]]) for k in ("c", "warp"))
    return out


@pytest.fixture(scope="module")
def scene_results(warp_game):
    c_game = HideAndSeekGame(make_config("quadrant"), W, seed=SEED)
    c_game.reset()
    warp_game.reset(seed=SEED)
    return _run_scenes(c_game, warp_game)


@pytest.mark.parametrize("name", list(SCENES))
def test_scripted_experiment_matches_the_c_backend_within_1_percent(scene_results, name):
    c, warp = scene_results[name]
    change_c, change_w = c - c[:1], warp - warp[:1]
    if name == "lidar":
        assert (c < 6.0).any(), "the lidar scene hits nothing"
        np.testing.assert_allclose(warp, c, rtol=0.01)
        return
    if name == "lock held under a full push":
        assert np.abs(change_c).max() < 0.01  # the C box gives a few mm (soft limits), no more
        np.testing.assert_allclose(change_w, change_c, atol=1e-3)
        return
    span = np.abs(change_c).max()
    assert span > 0.05, f"{name}: the C scene barely moves ({span})"
    np.testing.assert_allclose(change_w, change_c, atol=0.01 * span)


def test_a_held_box_stretched_out_of_range_is_dropped_for_the_next_eligible_one(warp_game):
    """test_rules.py's tug of war on both backends, in every world: box A, grabbed at 0.248 m by
    agent 0 and pulled the other way by agent 1, stretches past the 0.25 m range; the next step
    agent 0 drops it and takes box B (0.249 m, seen), while agent 1 keeps A. (Quadrant's slots 0
    and 1 are both hiders; grabs do not depend on the team.)"""
    x, y = 2.0, 4.2
    box_a = (x + 0.248 + 0.25, y, 0.0)  # east of agent 0, its west face 0.248 m away
    box_b = (x - 0.05, y + 0.249 + 0.25, 0.0)  # north, its south face 0.249 m away
    scene = {  # agent 0 faces north-east (both boxes in its cone), agent 1 faces A from the east
        "agents": {0: (x, y, 3 * math.pi / 4), 1: (box_a[0] + 0.45, y, -FACE_PX)},
        "objects": {0: box_a, 1: box_b},
    }
    c_game = HideAndSeekGame(make_config("quadrant"), W, seed=SEED)
    c_game.reset()
    wg = warp_game
    wg.reset(seed=SEED)
    _place(c_game, wg, [scene] * W)

    def dist():  # (backend, world, object): agent 0's distance to boxes A and B
        state = (c_game.agent_pos, c_game.object_pos, c_game.object_yaw, c_game.half)
        c = TR.obb_distance(*map(torch.as_tensor, state)).numpy()
        w = TR.obb_distance(wg.agent_pos, wg.object_pos, wg.object_yaw, wg.half)
        return np.stack([c[:, 0, :2], _host(w[:, 0, :2])])

    assert _host(wg.sees[:, 0, c_game.n_agents :][:, :2]).all()
    np.testing.assert_allclose(dist(), np.broadcast_to([0.248, 0.249], (2, W, 2)), atol=1e-6)
    act = np.broadcast_to(c_game.noop, (W, c_game.n_agents, 5)).copy()
    act[:, 0], act[:, 1] = [0, 5, 5, 1, 0], [10, 5, 5, 1, 0]  # pull A apart: west, east
    c_game.step(act)
    wg.step(act)
    for grabbed in (c_game.grabbed, _host(wg.grabbed)):
        assert (grabbed[:, :2] == [0, 0]).all()
    d = dist()
    assert (d[..., 0] > 0.25).all() and (d[..., 0] < 0.253).all()  # the welds stretch ~3 mm
    assert (d[..., 1] <= c_game.cfg.grab_range).all()
    np.testing.assert_allclose(d[1], d[0], atol=2e-4)
    c_game.step(act)
    wg.step(act)
    for grabbed in (c_game.grabbed, _host(wg.grabbed)):
        assert (grabbed[:, :2] == [1, 0]).all()  # A dropped, B taken; agent 1 keeps A
    welds = wg.index.weld[0]  # agent 0's weld to each object
    eq = wg.worlds.eq_active[:, welds].cpu().numpy()
    assert not eq[:, 0].any() and eq[:, 1].all()


def test_a_locked_box_can_be_grabbed_and_pins_the_agent_and_a_lock_keeps_a_grab(warp_game):
    """test_rules.py's locked-grab scenes on both backends: in worlds 0-3 agent 0 locks the box
    and agent 1 grabs it and pulls east at full force, pinned by the weld to the frozen box; in
    worlds 4-7 agent 0 holds the box, then locks it, and keeps holding it. (Quadrant's slots 0
    and 1 are both hiders, next to the box: an eligible hider sending lock=0 would unlock it, so
    both send lock=1 once it is to be locked.)"""
    scene = {
        "agents": {0: (1.58, 4.2, FACE_PX), 1: (2.42, 4.2, -FACE_PX)},
        "objects": {0: (2.0, 4.2, 0.0)},
    }
    c_game = HideAndSeekGame(make_config("quadrant"), W, seed=SEED)
    c_game.reset()
    wg = warp_game
    wg.reset(seed=SEED)
    _place(c_game, wg, [scene] * W)
    pins, keeps = slice(0, W // 2), slice(W // 2, W)
    lock, grab, pull = [5, 5, 5, 0, 1], [5, 5, 5, 1, 1], [10, 5, 5, 1, 1]
    seeker_start = None
    for t in range(8):
        act = np.broadcast_to(c_game.noop, (W, c_game.n_agents, 5)).copy()
        act[pins, 0] = lock
        if t >= 1:
            act[pins, 1] = grab if t == 1 else pull
        act[keeps, 0] = grab if t >= 1 else [5, 5, 5, 1, 0]
        if t >= 1:
            act[keeps, 1] = lock
        c_game.step(act)
        wg.step(act)
        if t == 1:
            seeker_start = np.stack([c_game.agent_pos[:, 1, :2], _host(wg.agent_pos[:, 1, :2])])
        for locked, grabbed in ((c_game.locked, c_game.grabbed), (wg.locked, wg.grabbed)):
            locked, grabbed = _host(locked), _host(grabbed)
            assert locked[pins, 0].all() and (locked[keeps, 0] == (t >= 1)).all()
            assert (grabbed[pins, 1] == (0 if t >= 1 else -1)).all()
            assert (grabbed[keeps, 0] == 0).all()
    moved = np.stack([c_game.agent_pos[:, 1, :2], _host(wg.agent_pos[:, 1, :2])]) - seeker_start
    moved = np.linalg.norm(moved[:, pins], axis=-1)
    assert (moved < 0.01).all()  # pinned, on both backends
    np.testing.assert_allclose(moved[1], moved[0], atol=1e-3)


# ---------------------------------------------------------------------- against VectorGame
# velocity columns: observation_self / agent_qpos_qvel 4..7, box_obs / ramp_obs 5..8
VEL_COLS = {"observation_self": slice(4, 8), "agent_qpos_qvel": slice(4, 8)}
VEL_COLS |= {"box_obs": slice(5, 9), "ramp_obs": slice(5, 9)}


def _compare(obs_c, obs_w, label, velocities=True):
    mismatched = entries = 0
    for key, value in obs_c.items():
        got = obs_w[key].cpu().numpy()
        assert got.shape == value.shape and got.dtype == np.float32, key
        if key in MASK_KEYS:
            assert set(np.unique(got)) <= {0.0, 1.0}, key
            mismatched += int((got != value).sum())
            entries += value.size
            continue
        if key == "lidar":
            off = np.abs(got - value) > POS_ATOL
            assert off.sum() <= MASK_MISMATCH * value.size, f"{label}: {off.sum()} rays differ"
            got = np.where(off, value, got)
        vel = np.zeros(value.shape[-1], dtype=bool)
        vel[VEL_COLS.get(key, slice(0, 0))] = True
        err = f"{label}: {key}"
        np.testing.assert_allclose(got[..., ~vel], value[..., ~vel], atol=POS_ATOL, err_msg=err)
        if velocities:
            np.testing.assert_allclose(got[..., vel], value[..., vel], atol=VEL_ATOL, err_msg=err)
    assert mismatched <= MASK_MISMATCH * entries, f"{label}: {mismatched} mask entries differ"


def test_same_seeds_and_actions_give_vectorgames_observations_masks_and_rewards(warp_game):
    cfg = warp_game.cfg
    vg = VectorGame(cfg, W, seed=EQUAL_SEED)
    _compare(vg.reset(), warp_game.reset(seed=EQUAL_SEED), "reset")
    rng = np.random.default_rng(0)
    grabs = locks = 0
    for t in range(EQUAL_STEPS):
        act = rng.integers(0, vg.action_nvec, size=(W, vg.n_agents, 5))
        act[..., 3:] = rng.random((W, vg.n_agents, 2)) < 0.8  # grab and lock often
        c, w = vg.step(act), warp_game.step(act)
        _compare(c.obs, w.obs, f"step {t}", velocities=t < VEL_STEPS)
        np.testing.assert_array_equal(w.rewards.cpu().numpy(), c.rewards)
        np.testing.assert_array_equal(warp_game.locked.cpu().numpy(), vg.game.locked)
        np.testing.assert_array_equal(warp_game.grabbed.cpu().numpy(), vg.game.grabbed)
        grabs += int((vg.game.grabbed >= 0).sum())
        locks += int(vg.game.locked.sum())
    assert grabs and locks, "the random play never grabbed or locked"
    assert warp_game.physics_warnings_total == 0  # no contact or constraint was dropped


def test_each_world_gets_its_layouts_c_model_fields_and_poses(warp_game):
    warp_game.reset(seed=SEED + 3)
    ww, cfg = warp_game.worlds, warp_game.cfg
    cache = ModelCache(cfg, capacity=0)
    static = ww.template.body_weldid[ww.template.geom_bodyid] == 0
    walls = set()
    for w in range(W):
        layout = warp_game.bank.layouts[int(warp_game.slot[w])]
        walls.add(layout.wall_pos.tobytes())
        m = cache.model_for(layout)
        for name in PER_WORLD_FIELDS:
            want = np.asarray(getattr(m, name), dtype=np.float32)
            if name == "geom_pos":
                want[want[:, 2] == PARK_Z, 2] = PARK_Z_WARP
            got = ww.field[name][w].cpu().numpy().reshape(want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
        qpos = warp_qpos(cfg, layout, ww.index, ww.nq)
        np.testing.assert_allclose(ww.qpos[w].cpu().numpy(), qpos, rtol=1e-6, atol=1e-6)
        got = ww.geom_xpos[w].cpu().numpy()[static]  # static geoms: poses follow the layout
        np.testing.assert_allclose(got, ww.field["geom_pos"][w].cpu().numpy()[static])
    assert len(walls) > 1, "every world drew the same walls"


def test_bad_actions_get_a_clear_error(warp_game):
    warp_game.reset(seed=SEED)
    shape = (W, warp_game.n_agents, 5)
    with pytest.raises(ValueError, match="shape"):
        warp_game.step(np.zeros((W, 5), dtype=int))
    bad = np.broadcast_to(STILL, shape).copy()
    bad[2, 1, 3] = 2
    with pytest.raises(ValueError, match="world 2, agent slot 1, dimension 3"):
        warp_game.step(bad)
    with pytest.raises(ValueError, match="integers"):
        warp_game.step(np.full(shape, 0.5))


def test_a_world_whose_physics_goes_nan_gets_its_state_back_and_is_counted(warp_game, caplog):
    """A NaN inertia in one world makes its accelerations, then its qpos / qvel, NaN in the
    physics; that world gets its state from before the step back, its episode goes on, the
    warning is counted once and logged at the read, and the other worlds step as they would
    have without it."""
    act = np.broadcast_to(PUSH_PX, (W, warp_game.n_agents, 5))
    ww, bad = warp_game.worlds, 3
    warp_game.reset(seed=SEED)
    want = warp_game.step(act)
    want_qpos = ww.qpos.clone()
    warp_game.reset(seed=SEED)
    before = warp_game.read_warnings()
    qpos, qvel = ww.qpos.clone(), ww.qvel.clone()
    inertia = ww.field["body_inertia"]
    saved = inertia[bad].clone()
    inertia[bad, warp_game.index.agent_body[0]] = math.nan
    try:
        got = warp_game.step(act)
    finally:
        inertia[bad] = saved
    for key, value in got.obs.items():
        assert torch.isfinite(value).all(), key
    assert torch.isfinite(got.rewards).all()
    assert not got.truncated.any()
    torch.testing.assert_close(ww.qpos[bad], qpos[bad], rtol=0, atol=0)
    torch.testing.assert_close(ww.qvel[bad], qvel[bad], rtol=0, atol=0)
    assert int(warp_game.t[bad]) == 1
    with caplog.at_level(logging.WARNING, logger="hns_train.envs.warp.game"):
        assert warp_game.read_warnings() - before == 1
    assert f"in worlds [{bad}]" in caplog.text
    assert int(warp_game.physics_warnings[bad]) == 1
    others = np.arange(W) != bad
    torch.testing.assert_close(ww.qpos[others], want_qpos[others], rtol=0, atol=0)
    torch.testing.assert_close(got.rewards[others], want.rewards[others], rtol=0, atol=0)
    warp_game.step(act)  # its inertia back, the world steps on from the state put back
    assert not torch.equal(ww.qpos[bad], qpos[bad])
    assert warp_game.read_warnings() - before == 1


def test_auto_reset_takes_bank_layouts_and_the_first_episode_matches_vectorgame():
    """The first episode of every world is `VectorGame`'s (same layouts from the same seed, so
    the same final observations and statistics); the auto-reset then gives each world a bank
    layout, and a world reset from bank slot s gets exactly the model fields, poses and first
    observation that world s got from the full reset (bank slots 0..W-1 hold the worlds' first
    layouts, and with `per_world=1` the bank is just those)."""
    cfg = make_config("quadrant", horizon=3)
    wg = WarpGame(cfg, W, seed=SEED + 2, bank=BankConfig(per_world=1))
    vg = VectorGame(cfg, W, seed=SEED + 2)
    first_obs, _ = wg.reset(), vg.reset()
    first = {k: v.clone() for k, v in first_obs.items()}
    fields = {n: wg.worlds.field[n].clone() for n in PER_WORLD_FIELDS}
    qpos = wg.worlds.qpos.clone()
    rngs = [np.random.default_rng(s) for s in wg.world_seeds]
    for w in range(W):
        want = sample_layout(cfg, rngs[w])
        np.testing.assert_array_equal(wg.bank.layouts[int(wg.slot[w])].wall_pos, want.wall_pos)
    act = np.broadcast_to([5, 5, 5, 0, 0], (W, cfg.max_agents, 5))
    for _ in range(cfg.horizon):
        c, w = vg.step(act), wg.step(act)
    assert w.truncated.cpu().numpy().all() and c.truncated.all()
    _compare(c.final_obs, w.final_obs, "final observation")
    for key, value in c.episode_stats.items():
        np.testing.assert_allclose(w.episode_stats[key].numpy(), value, atol=1e-3, err_msg=key)
    slots = wg.slot.numpy()
    assert len(set(slots.tolist())) > 1, "every world drew the same slot"
    for name in PER_WORLD_FIELDS:
        np.testing.assert_array_equal(wg.worlds.field[name].numpy(), fields[name][slots], name)
    np.testing.assert_array_equal(wg.worlds.qpos.numpy(), qpos[slots])
    for key, value in w.obs.items():
        np.testing.assert_array_equal(value.numpy(), first[key][slots], err_msg=key)
    np.testing.assert_array_equal(wg.t.numpy(), 0)
