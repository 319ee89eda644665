"""The tensor forms of the rules that the C game also runs as numpy (envs/warp/rules.py) equal
their numpy originals, and box surfing (envs/stats.py, one code over the array API) gives the
same on tensors as on arrays, on random batches with absent agents and objects and locks held by
both teams. (The other rules exist once, in envs/warp/rules.py; tests/envs/test_fast_path.py
checks the C game's compiled loops against them.) No Warp needed: these are torch functions.
"""

import math

import numpy as np
import pytest
import torch

from hns_train.envs import observations as O
from hns_train.envs import rules as R
from hns_train.envs.game import weld_data
from hns_train.envs.stats import box_surfing
from hns_train.envs.warp import rules as TR

W, A, OB = 64, 4, 5


def _t(x):
    return torch.as_tensor(x)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_lock_flags_on_tensors_match_arrays(rng):
    team = np.array([R.HIDERS, R.HIDERS, R.SEEKERS, R.SEEKERS])
    locked = rng.random((W, OB)) < 0.5
    lock_team = np.where(locked, rng.integers(0, 2, (W, OB)), R.NO_TEAM)
    lock_agent = np.where(locked, rng.integers(0, A, (W, OB)), -1)
    want = O.lock_flags(lock_agent, lock_team, locked, team)
    got = O.lock_flags(*map(_t, (lock_agent, lock_team, locked, team))).numpy()
    np.testing.assert_array_equal(got, want)


def test_weld_data_matches_mujocos_quaternion_arithmetic(rng):
    apos, opos = rng.uniform(0, 5, (2, A, 3)), rng.uniform(0, 5, (2, OB, 3))
    ayaw, oyaw = rng.uniform(-7, 7, (2, A)), rng.uniform(-7, 7, (2, OB))
    got = TR.weld_data(_t(apos), _t(ayaw), _t(opos), _t(oyaw)).numpy()
    for w in range(2):
        for a in range(A):
            for o in range(OB):
                yaws = (ayaw[w, a], oyaw[w, o])
                xpos = np.stack([apos[w, a], opos[w, o]])
                xquat = np.array([[math.cos(y / 2), 0, 0, math.sin(y / 2)] for y in yaws])
                np.testing.assert_allclose(got[w, a, o], weld_data(xpos, xquat, 0, 1), atol=1e-12)


def test_box_surfing_on_tensors_matches_arrays(rng):
    nb = 3
    is_hider = np.array([True, True, False, False])
    present = rng.random((W, A)) < 0.8
    present[:, [0, 2]] = True
    box_present = rng.random((W, nb)) < 0.8
    surfed = 0
    for _ in range(10):
        # seekers put on top of box 0 in some worlds, the box moving or held
        box_pos = np.concatenate([rng.uniform(0, 6, (W, nb, 2)), np.full((W, nb, 1), 0.25)], -1)
        half = np.full((W, nb, 3), 0.25)
        agent_pos = rng.uniform(0, 6, (W, A, 3))
        agent_pos[..., 2] = 0.15
        top = rng.random(W) < 0.5
        agent_pos[top, 2, :2] = box_pos[top, 0, :2] + rng.uniform(-0.2, 0.2, (top.sum(), 2))
        agent_pos[top, 2, 2] = 0.5 + 0.15 + rng.uniform(-0.05, 0.05, top.sum())
        yaw, vel = rng.uniform(-3, 3, (W, nb)), rng.normal(0, 0.3, (W, nb, 4))
        grabbed = np.where(rng.random((W, A)) < 0.3, 0, -1)
        args = (agent_pos, present & ~is_hider, box_pos, yaw, vel, half, box_present)
        want = box_surfing(*args, grabbed, 0.15)
        got = box_surfing(*map(_t, args), _t(grabbed), 0.15).numpy()
        np.testing.assert_array_equal(got, want)
        surfed += int(want.sum())
    assert 0 < surfed < 10 * W
