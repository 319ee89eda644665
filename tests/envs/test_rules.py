"""Game rules and bodies on scripted scenes (spec §2-4), each pinned to a number."""

import math

import hns_scene as S
import mujoco
import numpy as np
import pytest
import torch

from hns_train.envs import rules
from hns_train.envs.config import make_config
from hns_train.envs.warp import rules as TR
from hns_train.envs.world import LOCKED_EMISSION

WALL_FACE_GAP = 0.05  # half the wall thickness


def _inner_wall(game):
    """(x, y_centre, half_length) of the longer segment of the quadrant room's x = 3.1 wall."""
    layout = game.layouts[0]
    slots = [k for k in (4, 5) if layout.wall_present[k]]
    k = max(slots, key=lambda k: layout.wall_half[k, 1])
    return layout.wall_pos[k, 0], layout.wall_pos[k, 1], layout.wall_half[k, 1]


# ---------------------------------------------------------------- bodies


def _arms(game, a=0):
    m, body = game.model, game.index.agent_body[a]
    return [g for g in range(m.ngeom) if m.geom_bodyid[g] == body and g != game.index.agent_geom[a]]


def test_arms_mark_the_front_that_the_vision_cone_uses():
    game = S.one_v_one()
    m, body = game.model, game.index.agent_body[0]
    arms = _arms(game)
    np.testing.assert_allclose(
        sorted(m.geom_pos[arms].tolist()), [[-0.13, -0.075, -0.05], [0.13, -0.075, -0.05]]
    )
    np.testing.assert_allclose(m.geom_size[arms, 0], 0.05)
    yaw = 0.7
    S.place(game, agents={0: (1.0, 4.2, yaw), 1: (2.0, 3.6, 0.0)})
    d = game.data
    mid = d.geom_xpos[arms].mean(axis=0)[:2] - d.xpos[body, :2]
    front = mid / np.linalg.norm(mid)
    np.testing.assert_allclose(front, [math.sin(yaw), -math.cos(yaw)], atol=1e-9)


def test_arms_are_massless_solid_geoms_with_the_agent_friction():
    game = S.one_v_one()
    m, arms, main = game.model, _arms(game), game.index.agent_geom[0]
    # as in the original: colliding (contype / conaffinity 1), friction 0.01, mass 0
    assert m.geom_contype[arms].tolist() == [1, 1] and m.geom_conaffinity[arms].tolist() == [1, 1]
    np.testing.assert_array_equal(m.geom_friction[arms], m.geom_friction[[main, main]])
    assert m.geom_friction[main, 0] == pytest.approx(0.01)
    assert m.body_mass[game.index.agent_body[0]] == pytest.approx(1.0)
    np.testing.assert_array_equal(m.geom_group[arms], m.geom_group[main])  # rays see them too


SPEC_PRESETS = {  # spec §1: horizon, prep steps, out-of-bounds rect, wall friction
    "quadrant": (80, 32, (0.1, 5.9), 0.01),
    "randomwalls": (240, 96, (-6.0, 12.0), 1.0),
}


@pytest.mark.parametrize("preset", sorted(SPEC_PRESETS))
def test_bodies_and_physics_carry_the_spec_numbers(preset):
    """Spec §1-3: episode and rule numbers, physics constants, masses, frictions, joint damping,
    actuators."""
    horizon, prep, oob, wall_friction = SPEC_PRESETS[preset]
    cfg = make_config(preset)
    assert (cfg.horizon, cfg.prep_steps, (cfg.oob_low, cfg.oob_high)) == (horizon, prep, oob)
    assert (cfg.n_lidar, cfg.lidar_range, cfg.grab_range) == (30, 6.0, 0.25)
    assert math.degrees(cfg.vision_half_angle) == pytest.approx(67.5)
    game = S.one_v_one(preset, seed=3)
    m, idx, cfg = game.model, game.index, game.cfg
    assert m.opt.timestep == 0.005 and cfg.substeps == 15
    np.testing.assert_array_equal(m.opt.gravity, [0, 0, -50])
    a = 0
    assert m.geom_size[idx.agent_geom[a], 0] == 0.15
    assert m.body_mass[idx.agent_body[a]] == pytest.approx(1.0)
    np.testing.assert_array_equal(m.dof_damping[idx.agent_qvel[a]], [10, 10, 1, 10])
    ctrl = idx.agent_ctrl[a]
    assert m.actuator_gear[ctrl, 0].tolist() == [100] * 3
    joints = [m.joint(f"agent{a}_{n}").id for n in ("x", "y", "yaw")]
    assert m.actuator_trnid[ctrl, 0].tolist() == joints
    np.testing.assert_allclose(m.body_mass[idx.object_body], 1.0)
    box, ramp = idx.object_geom[0], idx.object_geom[-1]
    assert m.geom_friction[box, 0] == 0.2 and m.geom_friction[ramp, 0] == 0.01
    floor = m.geom("floor").id
    assert m.geom_friction[floor, 0] == 0.2
    walls = [
        g for g in range(m.ngeom) if m.geom(g).name.startswith("wall") and m.geom_group[g] == 0
    ]
    assert walls and np.all(m.geom_friction[walls, 0] == wall_friction)
    # bin k of 11 drives ctrl linspace(-0.9, 0.9, 11)[k] along world x, y and yaw
    S.run(game, 1, a0=[0, 10, 3, 0, 0])
    np.testing.assert_allclose(game.data.ctrl[ctrl], [-0.9, 0.9, -0.36])


def test_every_joint_of_a_box_or_ramp_is_damped_as_in_the_original():
    game = S.one_v_one()
    m, idx = game.model, game.index
    dofs = m.jnt_dofadr[idx.object_jnt]  # (O, 4): slide x, y, z, hinge z
    np.testing.assert_array_equal(m.dof_damping[dofs[: idx.n_boxes]], 0.01)
    np.testing.assert_array_equal(m.dof_damping[dofs[idx.n_boxes :]], 0.1)


def _open_floor_game():
    """1 v 1 without walls, bounds widened: room for a 20-step full-force push (about 6 m)."""
    return S.one_v_one(walls="none", oob_low=-6.0, oob_high=12.0, penalise_objects_oob=False)


def test_a_sustained_full_push_turns_the_box_and_drifts_it_sideways():
    """An agent at yaw 0 (front -y) pushing +x leads with its +x arm, 0.075 m behind its centre
    line: the off-centre push turns the box and walks it sideways (the original: about 0.6 m
    over 20 steps). With arms that do not collide the box goes straight (0 m, 0 rad)."""
    game = _open_floor_game()
    reach = game.cfg.arm_offset[0] + game.cfg.arm_radius  # 0.18 m: the arm touches first
    box = (-4.0, 0.0, 0.0)
    agents = {0: (box[0] - 0.25 - reach, 0.0, 0.0), 1: (5.5, 9.0, 0.0)}
    S.place(game, agents=agents, objects={0: box})
    box_yaw = []
    for _ in range(20):
        S.run(game, 1, a0=S.PUSH_PX)
        box_yaw.append(game.object_yaw[0, 0])
    dx, dy = S.object_xy(game, 0) - box[:2]
    assert dx > 3.0  # it was pushed along
    assert dy == pytest.approx(0.58, abs=0.12)  # sideways drift, towards the arm's side
    assert max(box_yaw) > 0.3  # turned by the off-centre push
    assert game.agent_yaw[0, 0] < -0.05  # and the agent is turned the other way


def test_an_agent_running_into_a_wall_off_its_front_is_turned():
    """Its leading arm meets the wall first; the contact turns the agent until the sphere
    touches too: yaw -0.32 rad from 0 (the original: about -0.32)."""
    game = S.one_v_one()
    r, (ax, ay, _), ra = game.cfg.agent_radius, game.cfg.arm_offset, game.cfg.arm_radius
    # the yaw at which the arm reaches exactly as far towards the wall as the sphere
    phi = math.atan2(-ay, ax)
    settled = phi - math.acos((r - ra) / math.hypot(ax, ay))
    assert settled == pytest.approx(-0.318, abs=1e-3)
    S.place(game, agents={0: (5.2, 4.2, 0.0), 1: (1.0, 5.0, 0.0)})
    S.run(game, 8, a0=S.PUSH_PX)  # into the outer wall (face x = 5.85)
    assert game.agent_yaw[0, 0] == pytest.approx(settled, abs=0.01)
    assert S.agent_xy(game, 0)[0] == pytest.approx(5.85 - r, abs=0.005)
    # facing the wall squarely the sphere touches first: no turn
    S.place(game, agents={0: (5.2, 4.2, S.FACE_PX), 1: (1.0, 5.0, 0.0)})
    S.run(game, 8, a0=S.PUSH_PX)
    assert game.agent_yaw[0, 0] == pytest.approx(S.FACE_PX, abs=1e-3)


@pytest.mark.parametrize("yaw", [0.0, math.pi / 2])
def test_ramp_is_tall_at_local_minus_y_and_slopes_down_to_plus_y(yaw):
    game = S.one_v_one()
    ramp = game.n_objects - 1
    S.place(game, agents={0: (0.6, 3.6, 0), 1: (0.6, 4.4, 0)}, objects={ramp: (2.0, 4.2, yaw)})
    c, s = math.cos(yaw), math.sin(yaw)

    def height(local_y):  # drop a ray onto the ramp at local (0, local_y)
        p = np.array([2.0 - s * local_y, 4.2 + c * local_y, 3.0])
        gid = np.zeros(1, dtype=np.int32)
        dist = mujoco.mj_ray(game.model, game.data, p, np.array([0, 0, -1.0]), None, 1, -1, gid)
        assert gid[0] == game.index.object_geom[ramp]
        return 3.0 - dist

    # 45-degree slope: height = 0.25 - local_y over the 0.5 m footprint
    assert height(-0.2) == pytest.approx(0.45, abs=1e-6)
    assert height(0.0) == pytest.approx(0.25, abs=1e-6)
    assert height(0.2) == pytest.approx(0.05, abs=1e-6)


# ---------------------------------------------------------------- walls occlude


def test_walls_block_lidar_and_vision():
    """The flg_static trap: rays must stop at static walls."""
    game = S.one_v_one(prep_fraction=0.0)
    x, yc, _ = _inner_wall(game)
    # hider west of the wall facing east: its +x lidar ray (k = 0) ends on the wall's face
    S.place(game, agents={0: (x - 0.5, yc, S.FACE_PX), 1: (x + 0.5, yc, S.FACE_MX)})
    assert game.lidar[0, 0, 0] == pytest.approx(0.5 - WALL_FACE_GAP, abs=1e-6)
    # the seeker faces the hider through the wall: no sight either way, hiders rewarded
    assert not game.sees_agent[0, 1, 0] and not game.sees_agent[0, 0, 1]
    assert game.obs["mask_aa_obs"][0, 1, 0] == 0.0
    assert S.run(game, 1).tolist() == [1.0, -1.0]
    # same distance without the wall in between: seen, and the reward flips
    S.place(game, agents={0: (x - 0.5, yc, S.FACE_PX), 1: (x - 1.5, yc, S.FACE_PX)})
    assert game.sees_agent[0, 1, 0] and game.obs["mask_aa_obs"][0, 1, 0] == 1.0
    assert S.run(game, 1).tolist() == [-1.0, 1.0]


def test_outer_wall_hides_an_agent_outside_it_and_ends_lidar():
    game = S.one_v_one(prep_fraction=0.0)
    S.place(game, agents={0: (-0.5, 4.2, 0.0), 1: (1.0, 4.2, S.FACE_MX)})
    assert not game.sees_agent[0, 1, 0]
    # seeker's -x ray (k = 15) stops at the wall face x = 0.15
    assert game.lidar[0, 1, 15] == pytest.approx(1.0 - 0.15, abs=1e-6)


def test_vision_cone_is_135_degrees():
    game = S.one_v_one(prep_fraction=0.0)
    seeker = (2.0, 4.2, S.FACE_MX)
    for angle, seen in ((60, True), (66, True), (69, False), (80, False)):
        a = math.radians(angle)
        hider = (2.0 - math.cos(a), 4.2 + math.sin(a), 0.0)
        S.place(game, agents={0: hider, 1: seeker})
        assert game.sees_agent[0, 1, 0] == seen, angle


# ---------------------------------------------------------------- movement


@pytest.mark.parametrize("yaw", [0.0, 1.0, 2.5, -2.0])
def test_full_force_moves_along_world_x_whatever_the_heading(yaw):
    game = S.one_v_one()
    S.place(game, agents={0: (0.8, 4.2, yaw), 1: (2.5, 3.6, 0.0)})
    start = S.agent_xy(game, 0)
    S.run(game, 2, a0=S.PUSH_PX)
    dx, dy = S.agent_xy(game, 0) - start
    assert dx > 0.4
    assert abs(dy) < 0.01 * dx
    assert game.agent_yaw[0, 0] == pytest.approx(yaw, abs=0.02)


def test_grab_drags_the_box_and_release_leaves_it():
    game = S.one_v_one()
    box = (4.8, 4.2, 0.0)  # room to drag it 2 m west and walk on 1.5 m
    S.place(game, agents={0: (4.38, 4.2, S.FACE_PX), 1: (5.5, 5.0, 0.0)}, objects={0: box})
    assert game.sees_object[0, 0, 0]
    gap = S.object_xy(game, 0) - S.agent_xy(game, 0)

    S.run(game, 4, a0=[0, 5, 5, 1, 0])  # pull west while holding
    assert game.grabbed[0, 0] == 0
    S.run(game, 6, a0=[5, 5, 5, 1, 0])  # hold still until both rest
    moved = S.object_xy(game, 0)[0] - box[0]
    assert moved < -0.5
    np.testing.assert_allclose(S.object_xy(game, 0) - S.agent_xy(game, 0), gap, atol=0.02)

    released_at, agent_at = S.object_xy(game, 0), S.agent_xy(game, 0)
    S.run(game, 4, a0=[0, 5, 5, 0, 0])  # walk on west without grabbing
    assert game.grabbed[0, 0] == -1
    assert S.agent_xy(game, 0)[0] - agent_at[0] < -0.5
    assert np.linalg.norm(S.object_xy(game, 0) - released_at) < 0.02


def test_grab_needs_the_object_in_range():
    game = S.one_v_one()
    S.place(game, agents={0: (1.4, 4.2, S.FACE_PX), 1: (3.5, 5.0, 0.0)}, objects={0: (2.0, 4.2, 0)})
    # 0.35 m from the box face: seen but out of the 0.25 m range
    assert game.sees_object[0, 0, 0]
    S.run(game, 1, a0=[5, 5, 5, 1, 0])
    assert game.grabbed[0, 0] == -1


def test_grab_and_lock_need_the_object_seen_on_the_previous_step():
    game = S.one_v_one(prep_fraction=0.0)
    box = {0: (2.0, 4.2, 0.0)}
    # 0.17 m from the box face, facing away: in range, outside the vision cone
    S.place(game, agents={0: (1.58, 4.2, S.FACE_MX), 1: (3.5, 5.0, 0.0)}, objects=box)
    assert not game.sees_object[0, 0, 0]
    S.run(game, 1, a0=[5, 5, 5, 1, 1])
    assert game.grabbed[0, 0] == -1 and not game.locked[0, 0]
    S.place(game, agents={0: (1.58, 4.2, S.FACE_PX), 1: (3.5, 5.0, 0.0)}, objects=box)
    assert game.sees_object[0, 0, 0]
    S.run(game, 1, a0=[5, 5, 5, 1, 1])
    assert game.grabbed[0, 0] == 0 and game.locked[0, 0]


def test_a_held_box_stretched_out_of_range_is_dropped_for_the_next_eligible_one():
    """Grabs are decided afresh every step (the original's rule): box A, grabbed at 0.248 m,
    is pulled 3 mm past the 0.25 m range by a tug of war, so it is released and box B (0.249 m,
    seen on the previous step) is taken instead."""
    game = S.one_v_one(prep_fraction=0.0)
    x, y = 2.0, 4.2
    box_a = (x + 0.248 + 0.25, y, 0.0)  # east of the hider, its west face 0.248 m away
    box_b = (x - 0.05, y + 0.249 + 0.25, 0.0)  # north, its south face 0.249 m away
    seeker = (box_a[0] + 0.25 + 0.2, y, S.FACE_MX)  # east of A, facing it
    # the hider faces north-east, so both boxes are in its cone; its arms stay clear of both
    S.place(game, agents={0: (x, y, 3 * math.pi / 4), 1: seeker}, objects={0: box_a, 1: box_b})
    assert game.sees_object[0, 0, :2].all()

    def dist(o):
        state = (game.agent_pos, game.object_pos, game.object_yaw, game.half)
        return float(TR.obb_distance(*map(torch.as_tensor, state))[0, 0, o])

    assert dist(0) == pytest.approx(0.248) and dist(1) == pytest.approx(0.249)
    pull_west, pull_east = [0, 5, 5, 1, 0], [10, 5, 5, 1, 0]
    S.run(game, 1, a0=pull_west, a1=pull_east)  # both grab A and pull it apart
    assert game.grabbed[0].tolist() == [0, 0]
    assert 0.25 < dist(0) < 0.253  # the welds stretch about 3 mm
    assert dist(1) <= game.cfg.grab_range
    S.run(game, 1, a0=pull_west, a1=pull_east)
    assert game.grabbed[0].tolist() == [1, 0]  # A released, B taken; the seeker keeps A
    eq = game.batch.bind("eq_active")[0]
    assert eq[game.index.weld[0, 0]] == 0 and eq[game.index.weld[0, 1]] == 1


def test_grab_is_the_closest_eligible_object_every_step():
    grab = torch.tensor([[1, 1, 0]])
    eligible = torch.tensor([[[True, True], [False, False], [True, True]]])
    dist = torch.tensor([[[0.2, 0.1], [0.1, 0.1], [0.1, 0.2]]])
    assert TR.choose_grabs(grab, eligible, dist).tolist() == [[1, -1, -1]]
    eligible[0, 0, 1] = False  # the held object stopped being eligible: the other one
    assert TR.choose_grabs(grab, eligible, dist).tolist() == [[0, -1, -1]]


# ---------------------------------------------------------------- locks


def _lock_scene():
    game = S.one_v_one(prep_fraction=0.0)
    S.place(
        game,
        agents={0: (1.58, 4.2, S.FACE_PX), 1: (2.42, 4.2, S.FACE_MX)},
        objects={0: (2.0, 4.2, 0.0)},
    )
    return game


def _emission(game, o):
    return game.model.mat_emission[game.model.geom_matid[game.index.object_geom[o]]]


def test_lock_freezes_the_box_against_a_full_force_push():
    game = _lock_scene()
    S.run(game, 1, a0=[5, 5, 5, 0, 1])
    assert game.locked[0, 0] and game.lock_team[0, 0] == rules.HIDERS
    assert _emission(game, 0) == LOCKED_EMISSION
    start = S.object_xy(game, 0)
    seeker_start = S.agent_xy(game, 1)
    # the seeker pushes west into the box at full force, asking to unlock (lock = 0)
    S.run(game, 8, a0=[5, 5, 5, 0, 1], a1=S.PUSH_MX)
    assert game.locked[0, 0], "a seeker cannot unlock a hider lock"
    assert np.linalg.norm(S.object_xy(game, 0) - start) < 0.005
    assert abs(S.agent_xy(game, 1)[0] - seeker_start[0]) < 0.05  # it stays pressed on the box


def test_only_the_locking_team_can_unlock():
    game = _lock_scene()
    S.run(game, 1, a0=[5, 5, 5, 0, 1])
    S.run(game, 2, a0=[5, 5, 5, 0, 1], a1=[5, 5, 5, 0, 0])
    assert game.locked[0, 0] and game.lock_team[0, 0] == rules.HIDERS
    S.run(game, 1, a0=[5, 5, 5, 0, 0])  # the hider, in range, sends lock = 0
    assert not game.locked[0, 0]
    assert game.lock_team[0, 0] == rules.NO_TEAM and game.lock_agent[0, 0] == -1
    assert _emission(game, 0) == 0.0

    S.run(game, 1, a1=[5, 5, 5, 0, 1])  # now the seeker locks it
    assert game.locked[0, 0] and game.lock_team[0, 0] == rules.SEEKERS
    S.run(game, 2, a0=[5, 5, 5, 0, 0], a1=[5, 5, 5, 0, 1])
    assert game.locked[0, 0] and game.lock_team[0, 0] == rules.SEEKERS
    S.run(game, 1)  # both send lock = 0: the seeker's request unlocks
    assert not game.locked[0, 0]


def test_unlocked_box_moves_under_the_same_push():
    game = _lock_scene()
    start = S.object_xy(game, 0)
    S.run(game, 8, a1=S.PUSH_MX)
    assert S.object_xy(game, 0)[0] - start[0] < -0.1


def test_quadrant_ramp_cannot_be_locked():
    game = S.one_v_one(prep_fraction=0.0)
    ramp = game.n_objects - 1
    S.place(game, agents={0: (1.58, 4.2, S.FACE_PX), 1: (3.5, 5.0, 0)}, objects={ramp: (2, 4.2, 0)})
    assert game.sees_object[0, 0, ramp]
    S.run(game, 1, a0=[5, 5, 5, 0, 1])
    assert not game.locked[0, ramp]


def test_an_agent_may_grab_a_locked_box_and_is_pinned_by_it():
    """As in the original: a locked object can be grabbed, and the weld to the frozen object
    holds the agent in place; locking a held box keeps the grab."""
    game = _lock_scene()
    keep_locked = [5, 5, 5, 0, 1]  # the hider stays in range: lock=0 from it would unlock
    S.run(game, 1, a0=keep_locked)
    assert game.locked[0, 0]
    S.run(game, 1, a0=keep_locked, a1=[5, 5, 5, 1, 0])  # the seeker grabs the locked box
    assert game.grabbed[0, 1] == 0
    box, seeker = S.object_xy(game, 0), S.agent_xy(game, 1)
    S.run(game, 6, a0=keep_locked, a1=[10, 5, 5, 1, 0])  # and pulls east at full force
    assert game.locked[0, 0] and game.grabbed[0, 1] == 0
    assert np.linalg.norm(S.agent_xy(game, 1) - seeker) < 0.01  # pinned
    assert np.linalg.norm(S.object_xy(game, 0) - box) < 0.005
    S.run(game, 2, a0=keep_locked, a1=[10, 5, 5, 0, 0])  # let go: the same pull moves it
    assert S.agent_xy(game, 1)[0] - seeker[0] > 0.5

    game = _lock_scene()
    S.run(game, 1, a0=[5, 5, 5, 1, 0])  # the hider holds the box
    S.run(game, 1, a0=[5, 5, 5, 1, 0], a1=[5, 5, 5, 0, 1])  # the seeker locks it
    assert game.locked[0, 0] and game.grabbed[0, 0] == 0


def test_lock_veto_is_the_team_rule_with_the_locker_reset():
    """An in-range member of the locking team sending lock=0 unlocks, whatever others ask on the
    same step; an unlocked object has no locking team, so nobody vetoes a lock of it (the
    original kept the last locker, and started with agent 0, a hider, as every object's)."""
    game = _lock_scene()
    hider_lock, seeker_lock = [5, 5, 5, 0, 1], [5, 5, 5, 0, 1]
    # never locked: the hider in range sends lock=0, the seeker's lock still takes
    S.run(game, 1, a1=seeker_lock)
    assert game.locked[0, 0] and game.lock_team[0, 0] == rules.SEEKERS
    # locked by the seekers: the seeker's lock=0 unlocks although the hider asks to lock
    S.run(game, 1, a0=hider_lock)
    assert not game.locked[0, 0] and game.lock_team[0, 0] == rules.NO_TEAM
    # the seekers no longer own it: the hider locks although the seeker sends lock=0
    S.run(game, 1, a0=hider_lock)
    assert game.locked[0, 0] and game.lock_team[0, 0] == rules.HIDERS
    # and the hiders' veto: lock=0 from the hider unlocks against the seeker's lock=1
    S.run(game, 1, a1=seeker_lock)
    assert not game.locked[0, 0] and game.lock_agent[0, 0] == -1


@pytest.mark.parametrize(
    "locked, team, actions, want",
    [
        # (locked before, locking team, lock actions of hider / seeker, (locked, team) after)
        (False, rules.NO_TEAM, [0, 1], (True, rules.SEEKERS)),  # no veto without an owner
        (False, rules.NO_TEAM, [1, 1], (True, rules.HIDERS)),  # lowest index locks
        (True, rules.SEEKERS, [1, 0], (False, rules.NO_TEAM)),  # the owner's lock=0 vetoes
        (True, rules.SEEKERS, [0, 1], (True, rules.SEEKERS)),  # only the owner can unlock
        (True, rules.HIDERS, [0, 1], (False, rules.NO_TEAM)),
    ],
)
def test_update_locks_team_rule(locked, team, actions, want):
    team_of = torch.tensor([rules.HIDERS, rules.SEEKERS])
    out = TR.update_locks(
        torch.tensor([[locked]]),
        torch.tensor([[team]]),
        torch.tensor([[-1 if team == rules.NO_TEAM else int(team)]]),
        torch.ones((1, 2, 1), dtype=torch.bool),
        torch.tensor([actions]),
        team_of,
        torch.tensor([True]),
    )
    assert (bool(out[0][0, 0]), int(out[1][0, 0])) == want


# ---------------------------------------------------------------- preparation phase


def test_prep_ignores_seeker_actions_and_pays_nothing():
    game = S.one_v_one()  # quadrant: 32 prep steps
    assert game.cfg.prep_steps == 32
    # the seeker faces the hider: outside prep this would pay the seekers
    S.place(game, agents={0: (1.0, 3.6, S.FACE_PX), 1: (1.0, 4.6, S.FACE_MY)})
    assert game.sees_agent[0, 1, 0]
    h0, s0 = S.agent_xy(game, 0), S.agent_xy(game, 1)
    rewards = [S.run(game, 1, a0=S.PUSH_PX, a1=S.PUSH_PX) for _ in range(3)]
    assert np.all(np.array(rewards) == 0.0)
    assert np.linalg.norm(S.agent_xy(game, 1) - s0) < 1e-6
    assert S.agent_xy(game, 0)[0] - h0[0] > 0.5

    # penalties are 0 during prep too: the hider outside the arena
    S.place(game, agents={0: (-1.0, 3.6, 0.0), 1: (1.0, 4.6, S.FACE_MY)})
    assert S.run(game, 1).tolist() == [0.0, 0.0]

    S.place(game, agents={0: (1.0, 3.6, S.FACE_PX), 1: (1.0, 4.6, S.FACE_MY)})
    S.run(game, game.cfg.prep_steps - int(game.t[0]))
    assert game.t[0] == 32
    s0 = S.agent_xy(game, 1)
    r = S.run(game, 1, a1=S.PUSH_PX)  # first step after prep: the seeker moves and scores
    assert S.agent_xy(game, 1)[0] - s0[0] > 0.1
    assert r.tolist() == [-1.0, 1.0]


# ---------------------------------------------------------------- rewards


def test_reward_flips_when_a_seeker_gets_line_of_sight():
    game = S.one_v_one(prep_fraction=0.0)
    S.place(game, agents={0: (1.0, 4.2, 0.0), 1: (2.0, 4.2, S.FACE_PX)})
    assert S.run(game, 1).tolist() == [1.0, -1.0]
    S.place(game, agents={0: (1.0, 4.2, 0.0), 1: (2.0, 4.2, S.FACE_MX)})
    assert S.run(game, 1).tolist() == [-1.0, 1.0]
    # a hider seeing the seeker changes nothing
    S.place(game, agents={0: (1.0, 4.2, S.FACE_PX), 1: (2.0, 4.2, S.FACE_PX)})
    assert S.run(game, 1).tolist() == [1.0, -1.0]


def test_out_of_bounds_agent_gets_minus_10_instead():
    game = S.one_v_one(prep_fraction=0.0)
    S.place(game, agents={0: (-1.0, 4.2, 0.0), 1: (2.0, 4.2, S.FACE_PX)})
    assert S.run(game, 1).tolist() == [-10.0, -1.0]
    S.place(game, agents={0: (1.0, 4.2, 0.0), 1: (6.5, 4.2, S.FACE_PX)})
    assert S.run(game, 1).tolist() == [1.0, -10.0]


@pytest.mark.parametrize("slot", [0, 2])  # a box, the ramp
def test_quadrant_object_out_of_bounds_costs_everyone_10(slot):
    game = S.one_v_one(prep_fraction=0.0)
    agents = {0: (1.0, 4.2, 0.0), 1: (2.0, 4.2, S.FACE_PX)}
    S.place(game, agents=agents, objects={slot: (2.0, -0.8, 0.0)})
    assert S.run(game, 1).tolist() == [-10.0, -10.0]
    S.place(game, agents=agents, objects={slot: (1.0, 0.6, 0.0)})
    assert S.run(game, 1).tolist() == [1.0, -1.0]


def test_randomwalls_bounds_are_the_18m_square_and_ignore_objects():
    game = S.one_v_one("randomwalls", seed=5, prep_fraction=0.0)
    # objects far outside the arena: no penalty in this preset
    far = {o: (-4.0 + 0.7 * o, -4.0, 0.0) for o in range(game.n_objects)}
    S.place(game, agents={0: (-5.5, -5.5, 0.0), 1: (11.5, 11.5, S.FACE_PX)}, objects=far)
    assert S.run(game, 1).tolist() == [1.0, -1.0]
    S.place(game, agents={0: (-6.5, 3.0, 0.0), 1: (12.5, 3.0, S.FACE_PX)}, objects=far)
    assert S.run(game, 1).tolist() == [-10.0, -10.0]
