"""Observations (spec §5): shapes per preset, row contents, ordering, masks and lidar."""

import math

import hns_scene as S
import numpy as np
import pytest

import hns_train.envs as E
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.layout import ABSENT, CUBE, LONG_X, LONG_Y

# The spec's table (§5), for 2 v 2
SPEC_SHAPES = {
    "quadrant": {
        "observation_self": (10,),
        "agent_qpos_qvel": (3, 10),
        "box_obs": (2, 12),
        "ramp_obs": (1, 9),
        "lidar": (30,),
        "mask_aa_obs": (3,),
        "mask_ab_obs": (2,),
        "mask_ar_obs": (1,),
        "mask_aa_obs_spoof": (3,),
        "mask_ab_obs_spoof": (2,),
        "mask_ar_obs_spoof": (1,),
    },
    "randomwalls": {
        "observation_self": (10,),
        "agent_qpos_qvel": (3, 10),
        "box_obs": (9, 15),
        "ramp_obs": (2, 15),
        "lidar": (30,),
        "mask_aa_obs": (3,),
        "mask_ab_obs": (9,),
        "mask_ar_obs": (2,),
        "mask_aa_obs_spoof": (3,),
        "mask_ab_obs_spoof": (9,),
        "mask_ar_obs_spoof": (2,),
    },
}


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_shapes_equal_the_spec_table(preset):
    env = E.parallel_env(preset)
    obs, _ = env.reset(seed=0)
    for agent in env.possible_agents:
        space = env.observation_space(agent)
        assert {k: s.shape for k, s in space.spaces.items()} == SPEC_SHAPES[preset]
        assert {k: v.shape for k, v in obs[agent].items()} == SPEC_SHAPES[preset]
        assert all(v.dtype == np.float32 for v in obs[agent].values())


def test_shapes_follow_the_largest_team_sizes():
    env = E.parallel_env("randomwalls", n_hiders=(1, 3), n_seekers=(1, 3))
    obs, _ = env.reset(seed=0)
    shapes = {k: v.shape for k, v in next(iter(obs.values())).items()}
    assert shapes["agent_qpos_qvel"] == (5, 10)
    assert shapes["mask_aa_obs"] == shapes["mask_aa_obs_spoof"] == (5,)
    spoof = next(iter(obs.values()))["mask_aa_obs_spoof"]
    assert spoof.sum() == len(env.agents) - 1  # rows exist only for agents present


def test_self_vector_and_prep_progress():
    game = S.one_v_one()  # quadrant: 32 prep steps
    S.place(game, agents={0: (1.0, 4.2, 1.0), 1: (2.0, 3.6, 4.0)})
    own = game.obs["observation_self"][0]
    np.testing.assert_allclose(own[0], [1.0, 4.2, 0.15, 1.0, 0, 0, 0, 0, 1.0, 0.0], atol=1e-6)
    assert own[1, 3] == pytest.approx(4.0 - 2 * math.pi, abs=1e-6)  # yaw wrapped to [-pi, pi)
    assert own[1, 8] == 0.0  # is_hider
    S.run(game, 8, a0=[7, 5, 5, 0, 0])  # 0.36 of full force: stays clear of the walls
    own = game.obs["observation_self"][0]
    assert own[:, 9].tolist() == [0.25, 0.25]
    assert own[0, 4] > 1.0 and abs(own[0, 5]) < 0.05  # x velocity of the pushed hider
    S.run(game, 30)
    assert game.obs["observation_self"][0, :, 9].tolist() == [1.0, 1.0]


def test_lidar_reads_6_where_nothing_is_within_range():
    game = S.one_v_one("chase", p_outer_walls=0.0)
    S.place(game, agents={0: (3.0, 3.0, 0.0), 1: (5.0, 3.0, 0.0)})
    lidar = game.obs["lidar"][0]
    assert lidar[0, 0] == pytest.approx(2.0 - 0.15, abs=1e-5)  # ray 0 (+x) hits the seeker
    assert lidar[1, 15] == pytest.approx(2.0 - 0.15, abs=1e-5)  # and ray 15 (-x) the hider
    assert np.all(np.delete(lidar[0], 0) == 6.0)
    assert np.all(np.delete(lidar[1], 15) == 6.0)


def test_other_agents_come_in_order_i_minus_1_i_minus_2():
    game = HideAndSeekGame(E.make_config("quadrant"), seed=3)
    obs = game.reset()
    own = obs["observation_self"][0]
    others = obs["agent_qpos_qvel"][0]
    for i in range(4):
        for k in range(3):
            np.testing.assert_array_equal(others[i, k], own[(i - 1 - k) % 4])
    assert np.all(obs["mask_aa_obs_spoof"][0] == 1.0)


def test_masks_visible_and_existing_entities():
    game = HideAndSeekGame(E.make_config("randomwalls", prep_fraction=0.0), seed=1)
    obs = game.reset()
    for _ in range(3):
        obs, *_ = game.step(np.broadcast_to(game.noop, (1, 4, 5)))
    n = int((game.layouts[0].box_kind != ABSENT).sum())
    assert 3 <= n < 9
    spoof = obs["mask_ab_obs_spoof"][0]
    assert spoof.tolist() == [[1] * n + [0] * (9 - n)] * 4
    assert np.all(obs["box_obs"][0, :, n:] == 0.0)  # absent boxes are zero rows
    assert np.all(obs["mask_ar_obs_spoof"][0] == 1.0)
    assert np.all(obs["mask_ab_obs"][0] <= spoof)
    assert 0 < obs["mask_ab_obs"][0].sum() < spoof.sum()  # some boxes seen, not all
    np.testing.assert_array_equal(obs["mask_ab_obs"][0], game.sees_object[0, :, :9])
    np.testing.assert_array_equal(obs["mask_ar_obs"][0], game.sees_object[0, :, 9:])


def test_visibility_masks_follow_sight():
    game = S.one_v_one(prep_fraction=0.0)
    S.place(
        game, agents={0: (1.0, 4.2, S.FACE_MX), 1: (2.0, 4.2, S.FACE_MX)}, objects={0: (3, 4.2, 0)}
    )
    obs = game.obs
    # seeker faces the hider; hider faces away from the seeker; the box is behind the seeker
    assert obs["mask_aa_obs"][0, :, 0].tolist() == [0.0, 1.0]
    assert obs["mask_ab_obs"][0, :, 0].tolist() == [0.0, 0.0]
    S.place(
        game, agents={0: (1.0, 4.2, S.FACE_PX), 1: (2.0, 3.7, S.FACE_PX)}, objects={0: (3, 4.2, 0)}
    )
    assert game.obs["mask_aa_obs"][0, :, 0].tolist() == [1.0, 0.0]
    assert game.obs["mask_ab_obs"][0, :, 0].tolist() == [1.0, 1.0]


def test_object_rows_are_centres_and_lock_flags_are_per_observer():
    game = HideAndSeekGame(E.make_config("quadrant", prep_fraction=0.0), seed=0)
    game.reset()
    far = {1: (0.5, 3.6, 0), 2: (0.5, 5.0, 0), 3: (5.5, 5.0, 0)}
    S.place(game, agents={0: (1.58, 4.2, S.FACE_PX), **far}, objects={0: (2.0, 4.2, 0.3)})
    row = game.obs["box_obs"][0, 0, 0]
    np.testing.assert_allclose(row[:5], [2.0, 4.2, 0.25, math.cos(0.3), math.sin(0.3)], atol=1e-6)
    assert row[9:].tolist() == [0, 0, 0]
    S.run(game, 1, a0=[5, 5, 5, 0, 1])
    flags = game.obs["box_obs"][0, :, 0, 9:]
    assert flags.tolist() == [[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert np.all(game.obs["box_obs"][0, :, 1, 9:] == 0)


def test_randomwalls_rows_carry_sizes_pads_and_ramp_locks():
    game = S.one_v_one("randomwalls", seed=3, prep_fraction=0.0, walls="none")  # every kind
    sizes = {CUBE: [0.5, 0.5, 0.5], LONG_X: [1.65, 0.15, 0.5], LONG_Y: [0.15, 1.65, 0.5]}
    kinds = game.layouts[0].box_kind
    for k, kind in enumerate(kinds):
        want = sizes.get(int(kind), [0.0, 0.0, 0.0])
        np.testing.assert_allclose(game.obs["box_obs"][0, 0, k, 9:12], want, atol=1e-6)
    assert set(kinds.tolist()) == {CUBE, LONG_X, LONG_Y, ABSENT}
    ramp = game.cfg.max_boxes
    objects = {o: (-4.0 + 0.7 * o, -4.0, 0.0) for o in range(game.n_objects)}
    objects[ramp] = (2.0, 4.2, 0.0)
    S.place(game, agents={0: (1.58, 4.2, S.FACE_PX), 1: (0.5, 1.0, 0.0)}, objects=objects)
    S.run(game, 1, a0=[5, 5, 5, 0, 1])
    assert game.locked[0, ramp]
    rows = game.obs["ramp_obs"][0, :, 0]
    assert np.all(rows[:, 9:12] == 0.0)  # zero pads in place of a size
    assert rows[:, 12:].tolist() == [[1, 1, 1], [0, 0, 1]]
