"""The tensor rules of the Warp game equal the numpy rules they restate (envs/warp/rules.py).

Random batches with absent agents and objects, locks held by both teams, agents holding objects
(some of them locked) and distances around the grab range, so every branch of the rules is hit.
No Warp needed: these are torch functions.
"""

import math

import numpy as np
import pytest
import torch

from hns_train.envs import observations as O
from hns_train.envs import rules as R
from hns_train.envs.game import weld_data
from hns_train.envs.warp import rules as TR

W, A, OB = 64, 4, 5


def _t(x):
    return torch.as_tensor(x)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_cone_and_box_distance_match(rng):
    d = rng.normal(size=(W, A, A + OB, 3))
    yaw = rng.uniform(-4, 4, size=(W, A))
    front = np.stack([np.sin(yaw), -np.cos(yaw)], -1)[:, :, None, :]
    cos_half = math.cos(math.radians(67.5))
    want = R.cone_from_front(d, front, cos_half)
    got = TR.cone_from_front(_t(d), _t(front), cos_half).numpy()
    assert want.any() and not want.all()
    np.testing.assert_array_equal(got, want)

    point, centre = rng.uniform(0, 2, (W, A, 3)), rng.uniform(0, 2, (W, OB, 3))
    oyaw, half = rng.uniform(-4, 4, (W, OB)), rng.uniform(0.05, 0.8, (W, OB, 3))
    want = R.obb_distance(point, centre, oyaw, half)
    got = TR.obb_distance(_t(point), _t(centre), _t(oyaw), _t(half)).numpy()
    assert (want == 0).any() and (want > 0).any()
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_locks_and_grabs_match(rng):
    team = np.array([R.HIDERS, R.HIDERS, R.SEEKERS, R.SEEKERS])
    lockable = np.array([True, True, True, False, True])
    for _ in range(20):
        locked = rng.random((W, OB)) < 0.4
        lock_team = np.where(locked, rng.integers(0, 2, (W, OB)), R.NO_TEAM)
        lock_agent = np.where(locked, rng.integers(0, A, (W, OB)), -1)
        dist = rng.uniform(0, 0.5, (W, A, OB))
        eligible = (rng.random((W, A, OB)) < 0.6) & (dist <= 0.25)
        lock_action = rng.integers(0, 2, (W, A))
        want = R.update_locks(locked, lock_team, lock_agent, eligible, lock_action, team, lockable)
        got = TR.update_locks(
            *map(_t, (locked, lock_team, lock_agent, eligible, lock_action, team, lockable))
        )
        assert (want[0] != locked).any()
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.numpy(), w)

        grabbed = np.where(rng.random((W, A)) < 0.5, rng.integers(0, OB, (W, A)), -1)
        grab_action = rng.integers(0, 2, (W, A))
        got = TR.choose_grabs(*map(_t, (grabbed, grab_action, eligible, dist, locked)))
        want = R.choose_grabs(grabbed, grab_action, eligible, dist, locked)
        assert (want != grabbed).any() and (want >= 0).any()
        np.testing.assert_array_equal(got.numpy(), want)


def test_lock_flags_and_yaw_wrap_match(rng):
    team = np.array([R.HIDERS, R.HIDERS, R.SEEKERS, R.SEEKERS])
    locked = rng.random((W, OB)) < 0.5
    lock_team = np.where(locked, rng.integers(0, 2, (W, OB)), R.NO_TEAM)
    lock_agent = np.where(locked, rng.integers(0, A, (W, OB)), -1)
    want = O.lock_flags(lock_agent, lock_team, locked, team)
    got = TR.lock_flags(*map(_t, (lock_agent, lock_team, locked, team))).numpy()
    np.testing.assert_array_equal(got, want.astype(np.float32))
    yaw = rng.uniform(-20, 20, 1000)
    np.testing.assert_allclose(TR.wrap_yaw(_t(yaw)).numpy(), O.wrap_yaw(yaw), atol=1e-12)


def test_weld_data_matches_mujocos_quaternion_arithmetic(rng):
    class Poses:  # the two fields game.weld_data reads
        pass

    apos, opos = rng.uniform(0, 5, (2, A, 3)), rng.uniform(0, 5, (2, OB, 3))
    ayaw, oyaw = rng.uniform(-7, 7, (2, A)), rng.uniform(-7, 7, (2, OB))
    got = TR.weld_data(_t(apos), _t(ayaw), _t(opos), _t(oyaw)).numpy()
    for w in range(2):
        for a in range(A):
            for o in range(OB):
                d = Poses()
                yaws = (ayaw[w, a], oyaw[w, o])
                d.xpos = np.stack([apos[w, a], opos[w, o]])
                d.xquat = np.array([[math.cos(y / 2), 0, 0, math.sin(y / 2)] for y in yaws])
                np.testing.assert_allclose(got[w, a, o], weld_data(d, 0, 1), atol=1e-12)
