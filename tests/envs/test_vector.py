"""VectorGame: same numbers as the single env, the auto-reset contract, threads, model reuse."""

import os

import mujoco
import numpy as np
import pytest

from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.layout import sample_layout
from hns_train.envs.vector import VectorGame
from hns_train.envs.world import ModelCache, build_spec

W = 3


HORIZONS = {"quadrant": 12, "randomwalls": 10, "lock_and_return": 12, "sequential_lock": 12}
HORIZONS |= {"blueprint": 12, "shelter": 8}


def _cfg(preset, **kw):
    # short episodes keep the tests fast; prep still covers the first 40 %
    return make_config(preset, horizon=HORIZONS[preset], **kw)


def _actions(rng, nvec, n_worlds, n_agents):
    """Random actions that grab and lock often, so welds and joint locks are exercised."""
    a = rng.integers(0, nvec, size=(n_worlds, n_agents, 5))
    a[..., 3] = rng.random((n_worlds, n_agents)) < 0.8
    a[..., 4] = rng.random((n_worlds, n_agents)) < 0.6
    return a


def _assert_obs_equal(a, b, world=None):
    """a == b, or world `world` of batched obs a == single-world obs b."""
    assert a.keys() == b.keys()
    for k in a:
        got = a[k] if world is None else a[k][world : world + 1]
        np.testing.assert_array_equal(got, b[k], err_msg=k)


@pytest.mark.parametrize("preset", list(HORIZONS))
def test_batched_worlds_replay_the_single_env_across_auto_resets(preset):
    """Each world of a batch is the single game of its seed, episode statistics and a task's
    state (its rewards, score and, in sequential lock, the order rule) included, while the
    other worlds reset around it."""
    cfg = _cfg(preset)
    vec = VectorGame(cfg, W, seed=11)
    obs = vec.reset()
    singles = [HideAndSeekGame(cfg, 1) for _ in range(W)]
    single_obs = [g.reset(seeds=[vec.world_seeds[w]]) for w, g in enumerate(singles)]
    for w in range(W):
        _assert_obs_equal(obs, single_obs[w], world=w)
    rng = np.random.default_rng(0)
    resets = grabs = locks = 0
    for _ in range(int(2.5 * cfg.horizon)):
        actions = _actions(rng, vec.action_nvec, W, vec.n_agents)
        out = vec.step(actions)
        grabs += int((vec.game.grabbed >= 0).sum())
        locks += int(vec.game.locked.sum())
        for w, g in enumerate(singles):
            o, r, tr, info = g.step(actions[w : w + 1])
            assert tr[0] == out.truncated[w]
            np.testing.assert_array_equal(r[0], out.rewards[w])
            np.testing.assert_array_equal(g.lockable[0], vec.game.lockable[w])
            if tr[0]:
                resets += 1
                _assert_obs_equal(out.final_obs, o, world=w)
                assert tuple(out.episode_stats) == vec.stat_keys
                for k in vec.stat_keys:
                    assert out.episode_stats[k][w] == info[0][k], k
                o = g.reset()
            _assert_obs_equal(out.obs, o, world=w)
            np.testing.assert_array_equal(out.agent_present[w], g.agent_present[0])
    assert resets == 2 * W
    assert grabs > 0 and locks > 0  # the comparison covered welds and joint locks


def test_auto_reset_hands_over_final_obs_new_first_obs_and_stats_once():
    cfg = make_config("randomwalls", horizon=4, n_hiders=(1, 2), n_seekers=(1, 2))
    vec = VectorGame(cfg, 8, seed=3)
    vec.reset()
    noop = np.broadcast_to(vec.game.noop, (8, vec.n_agents, 5))
    before_presence = vec.agent_present
    for t in range(1, 5):
        out = vec.step(noop)
        finished = t == 4
        assert out.truncated.tolist() == [finished] * 8
        assert np.isnan(out.episode_stats["hider_return"]).all() != finished
        np.testing.assert_array_equal(out.final_agent_present, before_presence)
        if not finished:
            assert all((v == 0).all() for v in out.final_obs.values())
            last = out.obs
    # the final observation is the step's own; the returned one is a new episode's first
    assert not np.array_equal(out.final_obs["observation_self"], out.obs["observation_self"])
    np.testing.assert_array_equal(out.obs["observation_self"][..., -1], 0.0)  # prep progress 0
    assert (out.final_obs["observation_self"][out.final_agent_present][:, -1] > 0).all()
    assert not np.array_equal(out.final_obs["observation_self"], last["observation_self"])
    # new episodes draw new agent counts: presence follows the episode each array belongs to
    assert not np.array_equal(out.agent_present, out.final_agent_present)
    np.testing.assert_array_equal(vec.game.t, 0)
    out = vec.step(noop)
    assert np.isnan(out.episode_stats["hider_return"]).all()  # reported once


def test_results_do_not_depend_on_threads():
    cfg = _cfg("quadrant")
    runs = []
    for threads in (1, 2):
        vec = VectorGame(cfg, 4, seed=5, threads=threads)
        rng = np.random.default_rng(1)
        frames = [vec.reset()["lidar"]]
        for _ in range(cfg.horizon + 3):
            out = vec.step(_actions(rng, vec.action_nvec, 4, vec.n_agents))
            frames += [out.obs["lidar"], out.obs["box_obs"], out.rewards]
        obs = vec.game.reset([3, 1])  # some worlds only: the rays of those, or of every world
        frames += [obs["lidar"], obs["mask_aa_obs"], obs["mask_ab_obs"]]
        runs.append(frames)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_written_into_given_buffers_the_results_are_unchanged():
    """`out` / `final_out` (the actor's shared-memory slots) receive exactly the arrays a plain
    step returns, across auto-resets, and are what the step hands back."""
    cfg = _cfg("quadrant")
    plain, into = VectorGame(cfg, W, seed=4), VectorGame(cfg, W, seed=4)
    buffers = [{k: np.full_like(v, np.nan) for k, v in plain.reset().items()} for _ in range(2)]
    _assert_obs_equal(into.reset(out=buffers[0]), plain.reset(seed=4))
    rng = np.random.default_rng(2)
    resets = 0
    for _ in range(2 * cfg.horizon):
        actions = _actions(rng, plain.action_nvec, W, plain.n_agents)
        a, b = plain.step(actions), into.step(actions, out=buffers[0], final_out=buffers[1])
        assert b.obs is buffers[0] and b.final_obs is buffers[1]
        _assert_obs_equal(b.obs, a.obs)
        if a.truncated.any():
            resets += 1
            _assert_obs_equal(b.final_obs, a.final_obs)
        np.testing.assert_array_equal(b.rewards, a.rewards)
    assert resets == 2
    with pytest.raises(ValueError, match="out holds keys"):
        into.step(actions, out={"lidar": buffers[0]["lidar"]})
    with pytest.raises(ValueError, match=r"out\['lidar'\] has shape"):
        into.step(actions, out={**buffers[0], "lidar": buffers[0]["lidar"][:1]})


def _model_arrays(m):
    names = [k for k in dir(m) if not k.startswith("_")]
    return {k: getattr(m, k) for k in names if isinstance(getattr(m, k, None), np.ndarray)}


def test_cached_model_equals_a_fresh_build_and_plays_the_same_episode():
    cfg = make_config("chase", horizon=6)  # no random walls: every layout key recurs
    games = [HideAndSeekGame(cfg, 1, seed=9), HideAndSeekGame(cfg, 1, seed=9)]
    games[1].cache = ModelCache(cfg, capacity=0)  # always compiles
    rng = np.random.default_rng(2)
    for g in games:
        g.reset()
    for _ in range(4 * cfg.horizon):
        actions = _actions(rng, games[0].action_nvec, 1, games[0].n_agents)
        (oa, ra, ta, _), (ob, rb, _, _) = (g.step(actions) for g in games)
        _assert_obs_equal(oa, ob)
        np.testing.assert_array_equal(ra, rb)
        if ta[0]:
            _assert_obs_equal(*(g.reset() for g in games))
    assert games[0].cache.hits >= 2 and games[1].cache.hits == 0
    layout = games[0].layouts[0]
    cached, fresh = games[0].cache.model_for(layout), build_spec(cfg, layout).compile()
    assert games[0].cache.hits >= 3
    for k, v in _model_arrays(fresh).items():
        np.testing.assert_array_equal(_model_arrays(cached)[k], v, err_msg=k)


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_one_reused_spec_compiles_every_layout_like_a_fresh_build(preset):
    # varying team sizes: agents and boxes switch between parked and present across layouts
    cfg = make_config(preset, n_hiders=(1, 3), n_seekers=(1, 3))
    cache = ModelCache(cfg, capacity=0)
    rng = np.random.default_rng(8)
    layouts = [sample_layout(cfg, rng) for _ in range(8)]
    presence = {lay.agent_present.tobytes() for lay in layouts}
    walls = {lay.wall_present.tobytes() for lay in layouts}
    assert len(presence) > 1 and (preset == "quadrant" or len(walls) > 1)
    for layout in layouts:
        reused, fresh = cache.model_for(layout), build_spec(cfg, layout).compile()
        got = _model_arrays(reused)
        for k, v in _model_arrays(fresh).items():
            np.testing.assert_array_equal(got[k], v, err_msg=k)
    assert cache.hits == 0 and cache.misses == len(layouts)


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_every_layout_of_a_preset_gives_one_mjdata_layout(preset):
    cfg = make_config(preset, n_hiders=(1, 3), n_seekers=(1, 3))
    rng = np.random.default_rng(4)
    sizes = {build_spec(cfg, sample_layout(cfg, rng)).compile().nbuffer for _ in range(12)}
    assert len(sizes) == 1


def test_poses_from_qpos_match_mujoco_kinematics():
    cfg = _cfg("randomwalls")
    game = HideAndSeekGame(cfg, 2, seed=1)
    game.reset()
    rng = np.random.default_rng(3)
    for _ in range(6):
        game.step(_actions(rng, game.action_nvec, 2, game.n_agents))
    idx = game.index
    bodies = np.concatenate([idx.agent_body, idx.object_body])
    geoms = np.concatenate([idx.agent_geom, idx.object_geom])
    for w in range(2):
        d = game.batch.get_data(w)  # world w's state as a fresh MjData, through mj_kinematics
        mujoco.mj_kinematics(game.models[w], d)
        np.testing.assert_array_equal(game._xpos[w, bodies], d.xpos[bodies])
        np.testing.assert_allclose(game._xquat[w, bodies], d.xquat[bodies], atol=1e-15)
        np.testing.assert_allclose(game.entity_centre[w], d.geom_xpos[geoms], atol=1e-12)


def test_bad_use_is_rejected():
    vec = VectorGame("quadrant", 2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(np.zeros((2, 4, 5), dtype=int))
    vec.reset()
    with pytest.raises(ValueError, match="shape"):
        vec.step(np.zeros((3, 4, 5), dtype=int))
    with pytest.raises(ValueError, match="preset"):
        VectorGame("nope", 2)
    with pytest.raises(ValueError, match="a GameConfig or a preset name"):
        VectorGame({"horizon": 10}, 2)
    with pytest.raises(ValueError, match="threads"):
        VectorGame("quadrant", 2, threads=0)


def _thread_ticks() -> dict[str, int]:
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread CPU times: Linux")
def test_two_threads_share_the_physics_and_the_rays():
    game = HideAndSeekGame(make_config("quadrant"), 32, seed=0, threads=2)
    game.reset()
    noop = np.broadcast_to(game.noop, (32, game.n_agents, 5))
    before = _thread_ticks()
    for _ in range(12):
        game.step(noop)
        for _ in range(4):  # rays alone, so their share shows too
            game._cast_rays(game._all_worlds)
    used = sorted(t - before.get(k, 0) for k, t in _thread_ticks().items())
    # the caller's thread and one MuJoCo worker each ran a real part of the work
    assert len(used) >= 2 and used[-2] >= 0.2 * sum(used), used
