"""The tensor rules and statistics of the Warp game equal the numpy ones they restate
(envs/warp/rules.py, envs/warp/stats.py).

Random batches with absent agents and objects, locks held by both teams, locked objects among the
eligible ones, tied distances and distances around the grab range, so every branch of the rules
is hit.
No Warp needed: these are torch functions.
"""

import math

import numpy as np
import pytest
import torch

from hns_train.envs import observations as O
from hns_train.envs import rules as R
from hns_train.envs.game import weld_data
from hns_train.envs.stats import STAT_KEYS, EpisodeStats, box_surfing
from hns_train.envs.warp import rules as TR
from hns_train.envs.warp.stats import TensorStats
from hns_train.envs.warp.stats import box_surfing as t_box_surfing

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

        # grabs are decided afresh from eligibility alone (locked objects included); distances
        # on a 5 cm grid give ties, which go to the lower object index in both
        grab_action = rng.integers(0, 2, (W, A))
        tied = np.round(dist * 20) / 20
        got = TR.choose_grabs(*map(_t, (grab_action, eligible, tied)))
        want = R.choose_grabs(grab_action, eligible, tied)
        assert (want >= 0).any() and ((grab_action == 1) & (want < 0)).any()
        w_, a_ = np.nonzero(want >= 0)
        assert locked[w_, want[w_, a_]].any()
        cand = np.where(eligible, tied, np.inf)
        assert ((cand == cand.min(axis=2, keepdims=True)) & eligible).sum(axis=2).max() > 1
        np.testing.assert_array_equal(got.numpy(), want)
    empty = np.zeros((W, A, 0))
    got = TR.choose_grabs(_t(np.ones((W, A), dtype=np.int64)), _t(empty > 0), _t(empty))
    np.testing.assert_array_equal(got.numpy(), R.choose_grabs(np.ones((W, A)), empty > 0, empty))


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


def test_statistics_match_episode_stats(rng):
    nb, prep, horizon = 3, 4, 10
    is_hider = np.array([True, True, False, False])
    host, dev = EpisodeStats(W, nb, OB), TensorStats(W, nb, OB, "cpu")
    xy = rng.uniform(0, 6, (W, OB, 2))
    host.reset(np.arange(W), xy)
    dev.reset(torch.ones(W, dtype=torch.bool), _t(xy))
    present = rng.random((W, A)) < 0.8
    present[:, [0, 2]] = True
    masks = [(m, np.maximum(m.sum(1), 1)) for m in (present & is_hider, present & ~is_hider)]
    t_masks = [(_t(m.astype(np.float32)), _t(c.astype(np.float32))) for m, c in masks]
    object_present = rng.random((W, OB)) < 0.8
    surfed = 0
    for t in range(1, horizon + 1):
        in_prep = np.full(W, t - 1 < prep)
        reward = rng.choice([-1.0, 1.0, -10.0], (W, A)).astype(np.float32) * present
        seen = rng.random(W) < 0.5
        xy = xy + rng.normal(0, 0.1, xy.shape)
        locked = rng.random((W, OB)) < 0.3
        # seekers put on top of box 0 in some worlds, the box moving or held
        box_pos = np.concatenate([xy[:, :nb], np.full((W, nb, 1), 0.25)], -1)
        half = np.full((W, nb, 3), 0.25)
        agent_pos = rng.uniform(0, 6, (W, A, 3))
        agent_pos[..., 2] = 0.15
        top = rng.random(W) < 0.5
        agent_pos[top, 2, :2] = box_pos[top, 0, :2] + rng.uniform(-0.2, 0.2, (top.sum(), 2))
        agent_pos[top, 2, 2] = 0.5 + 0.15 + rng.uniform(-0.05, 0.05, top.sum())
        yaw, vel = rng.uniform(-3, 3, (W, nb)), rng.normal(0, 0.3, (W, nb, 4))
        grabbed = np.where(rng.random((W, A)) < 0.3, 0, -1)
        args = (agent_pos, present & ~is_hider, box_pos, yaw, vel, half, object_present[:, :nb])
        want = box_surfing(*args, grabbed, 0.15)
        got = t_box_surfing(*map(_t, args), _t(grabbed), 0.15).numpy()
        np.testing.assert_array_equal(got, want)
        surfed += int(want.sum())
        host.step(
            np.full(W, t),
            prep,
            in_prep,
            reward,
            is_hider,
            present,
            seen,
            xy,
            object_present,
            locked,
            agent_pos=agent_pos,
            object_pos=np.concatenate([box_pos, np.zeros((W, OB - nb, 3))], 1),
            object_yaw=np.pad(yaw, ((0, 0), (0, OB - nb))),
            object_vel=np.pad(vel, ((0, 0), (0, OB - nb), (0, 0))),
            half=np.pad(half, ((0, 0), (0, OB - nb), (0, 0))),
            grabbed=grabbed,
            team_masks=masks,
        )
        dev.step(
            _t(np.full(W, t)),
            prep,
            _t(in_prep),
            _t(reward),
            t_masks,
            _t(seen),
            _t(xy),
            _t(object_present),
            _t(locked),
            _t(want),
        )
    assert surfed
    done = np.arange(0, W, 2)
    want = host.finish(done, xy, object_present, locked)
    mask = torch.zeros(W, dtype=torch.bool)
    mask[done] = True
    got = dev.finish(mask, _t(xy), _t(object_present), _t(locked)).numpy()
    assert got.shape == (W, len(STAT_KEYS))
    assert np.isnan(got[1::2]).all()  # worlds that did not finish
    for g, w in zip(got[done], want, strict=True):
        for i, key in enumerate(STAT_KEYS):
            assert g[i] == pytest.approx(w[key], abs=1e-9), key
