"""The game's step equals the reference rule functions it was fused from.

The step runs as compiled loops (envs/kernels.py) around the physics; with one thread its rays
are cast by the compiled loop of envs/rays.py, with more by one batched ray call.

`HideAndSeekGame` writes observations into preallocated buffers, keeps per-episode tables and
skips work that cannot change anything (no object within reach: no lock or grab decision, every
grab ends; no lifted seeker). These tests rebuild the lock and grab decisions with
`eligibility` (below) / `update_locks` / `choose_grabs`, observations with `observe`, rewards
with `rewards` (the tensor rules of envs/warp/rules.py, on CPU tensors viewing the game's
arrays) from the state before each step, and the other agents' order with a plain loop, from
the game's own state after every step of episodes that grab and lock often, with team sizes
that leave slots empty. Rays are re-cast through `mujoco.batch.Batch.ray` from directions built
with numpy and the cone test of `cone_from_front`, and the episode statistics are re-counted by
`stats.EpisodeStats.add_step` on CPU tensors.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hns_train.envs import observations as O
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame
from hns_train.envs.stats import STAT_KEYS, EpisodeStats
from hns_train.envs.warp import rules as TR

# what warp/rules.observe reads of a game, under the C game's names
OBSERVED = [
    "t",
    "is_hider",
    "team",
    "agent_present",
    "object_present",
    "agent_pos",
    "agent_yaw",
    "agent_vel",
    "object_pos",
    "object_yaw_cos",
    "object_yaw_sin",
    "object_vel",
    "half",
    "lidar",
    "lock_agent",
    "lock_team",
    "locked",
]

# what EpisodeStats.add_surfing reads of a game
SURFING = ["agent_pos", "object_pos", "object_yaw", "object_vel", "half", "object_present"]
SURFING += ["grabbed"]


def _t(x):
    return torch.as_tensor(np.asarray(x))


def _reference_obs(game):
    state = SimpleNamespace(**{k: _t(getattr(game, k)) for k in OBSERVED}, sees=_t(game._sees))
    rows, sees = O.other_gathers(_t(game.others), game._sees.shape[2])
    return {k: v.numpy() for k, v in TR.observe(game.cfg, state, rows, sees).items()}


def _reference_rewards(game, in_prep):
    """(rewards (W, A), hiders_seen (W,)) of the game's current state."""
    seeker = game.agent_present & ~game.is_hider
    hider = game.agent_present & game.is_hider
    reward, seen = TR.rewards(
        game.cfg,
        _t(game.sees_agent),
        _t(seeker[:, :, None] & hider[:, None, :]),
        _t(game.is_hider),
        _t(game.agent_present),
        _t(game._ent_pos[..., :2]),
        _t(game.object_present),
        _t(in_prep),
    )
    return reward.numpy(), seen.numpy()


def _cone(game):
    """(W, A, E) entity centres inside each agent's cone, its front (sin yaw, -cos yaw) built
    from the yaw here rather than from the game's cos / sin."""
    yaw = _t(game.agent_yaw)
    d = _t(game.entity_centre)[:, None, :, :2] - _t(game.agent_pos)[:, :, None, :2]
    front = torch.stack([torch.sin(yaw), -torch.cos(yaw)], -1)[:, :, None, :]
    return TR.cone_from_front(d, front, math.cos(game.cfg.vision_half_angle)).numpy()


NAMES = ("locked", "lock_team", "lock_agent", "grabbed")


def eligibility(seen_prev, dist, grab_range, agent_present, object_present):
    """(W, A, O) bool: objects an agent may grab or lock this step (spec §3: seen on the previous
    step and within `grab_range` of the agent's centre, both present)."""
    return seen_prev & (dist <= grab_range) & agent_present[:, :, None] & object_present[:, None, :]


def _reference_decisions(game, actions):
    """(locked, lock_team, lock_agent, grabbed) after `actions`, from the full rules on the state
    before the step (the game's actions after the prep-phase and absent-agent no-ops)."""
    cfg = game.cfg
    dist = TR.obb_distance(
        _t(game.agent_pos), _t(game.object_pos), _t(game.object_yaw), _t(game.half)
    ).numpy()
    eligible = eligibility(
        game.sees_object, dist, cfg.grab_range, game.agent_present, game.object_present
    )
    idle = ((game.t < cfg.prep_steps)[:, None] & ~game.is_hider) | ~game.agent_present
    actions = np.where(idle[..., None], game.noop, actions)
    locks = TR.update_locks(
        *map(_t, (game.locked, game.lock_team, game.lock_agent, eligible, actions[..., 4])),
        _t(game.team),
        _t(game.lockable),
    )
    grabs = TR.choose_grabs(_t(actions[..., 3]), _t(eligible), _t(dist))
    return tuple(x.numpy() for x in (*locks, grabs))


def _loop_others(present):
    table = np.full((len(present), len(present) - 1), -1)
    slots = np.flatnonzero(present)
    for pos, i in enumerate(slots):
        for k in range(1, len(slots)):
            table[i, k - 1] = slots[(pos - k) % len(slots)]
    return table


# seeds whose random play locks, grabs and drops a held object while grab=1 (asserted below)
@pytest.mark.parametrize("preset, seed", [("quadrant", 6), ("randomwalls", 4)])
def test_step_matches_the_reference_rules_and_observations(preset, seed):
    horizon = {"quadrant": 30, "randomwalls": 24}[preset]
    cfg = make_config(preset, horizon=horizon, n_hiders=(1, 3), n_seekers=(1, 2))
    W = 3
    game = HideAndSeekGame(cfg, W, seed=seed)
    game.reset()
    rng = np.random.default_rng(5)
    locks = grabs = dropped = 0
    presence = set()
    for _ in range(2 * horizon + 5):
        actions = rng.integers(0, game.action_nvec, size=(W, game.n_agents, 5))
        actions[..., 3] = rng.random((W, game.n_agents)) < 0.8
        actions[..., 4] = rng.random((W, game.n_agents)) < 0.6
        in_prep = game.t < cfg.prep_steps
        decided = _reference_decisions(game, actions)
        held = game.grabbed.copy()
        obs, reward, truncated, _ = game.step(actions)
        dropped += int(((held >= 0) & (game.grabbed != held) & (actions[..., 3] == 1)).sum())
        for name, value in zip(NAMES, decided, strict=True):
            np.testing.assert_array_equal(getattr(game, name), value, err_msg=name)
        welds = game.batch.bind("eq_active")[:, game.index.weld]
        np.testing.assert_array_equal(welds, game.grabbed[..., None] == np.arange(game.n_objects))
        want, _ = _reference_rewards(game, in_prep)
        np.testing.assert_array_equal(reward, want)
        cone = _cone(game)
        assert not (game.sees_agent & ~cone[:, :, : game.n_agents]).any()
        for key, value in _reference_obs(game).items():
            np.testing.assert_array_equal(obs[key], value, err_msg=key)
        for w in range(W):
            np.testing.assert_array_equal(game.others[w], _loop_others(game.agent_present[w]))
            presence.add(game.agent_present[w].tobytes())
        locks += int(game.locked.sum())
        grabs += int((game.grabbed >= 0).sum())
        if truncated.any():
            game.reset(np.flatnonzero(truncated))
            for key, value in _reference_obs(game).items():
                np.testing.assert_array_equal(game.obs[key], value, err_msg=key)
    assert locks > 0 and grabs > 0 and dropped > 0 and len(presence) > 1


def _reference_rays(game):
    """(lidar, sees) from the game's poses: numpy ray directions, Batch.ray, rules' cone."""
    cfg, A = game.cfg, game.n_agents
    L, E = cfg.n_lidar, game.entity_centre.shape[1]
    origin = game.agent_pos
    to = game.entity_centre[:, None, :, :] - origin[:, :, None, :]
    to = to / np.maximum(np.sqrt((to * to).sum(-1, keepdims=True)), 1e-9)
    to[:, np.arange(A), np.arange(A)] = (0.0, 0.0, 1.0)
    fan = np.broadcast_to(game.lidar_dirs, (game.n_worlds, A, L, 3))
    vec = np.concatenate([fan, to], axis=2).reshape(game.n_worlds, -1, 3)
    pnt = np.repeat(origin, L + E, axis=1)
    exclude = np.repeat(game.index.agent_body, L + E)[None].repeat(game.n_worlds, 0)
    dist, geomid = game.batch.ray(pnt, vec, game._ray_groups, True, exclude.astype(np.int32))
    dist, geomid = dist.reshape(game.n_worlds, A, -1), geomid.reshape(game.n_worlds, A, -1)
    lidar = np.where(geomid[..., :L] >= 0, dist[..., :L], cfg.lidar_range)
    lidar = np.minimum(lidar, cfg.lidar_range) * game.agent_present[..., None]
    body = np.append(game.index.geom_body, -1)[geomid[..., L:]]
    ent_body = np.concatenate([game.index.agent_body, game.index.object_body])
    cone = _cone(game)
    present = np.concatenate([game.agent_present, game.object_present], axis=1)
    pair = game.agent_present[:, :, None] & present[:, None, :]
    pair[:, np.arange(A), np.arange(A)] = False
    return lidar, (body == ent_body) & cone & pair


@pytest.mark.parametrize("preset, seed", [("quadrant", 2), ("randomwalls", 1)])
def test_compiled_rays_and_statistics_match_the_reference(preset, seed):
    cfg = make_config(preset, horizon=20, n_hiders=(1, 3), n_seekers=(1, 2))
    W, nb = 3, cfg.max_boxes
    game = HideAndSeekGame(cfg, W, seed=seed)
    game.reset()
    ref = EpisodeStats(W, nb, game.n_objects, like=torch.zeros(0))
    ref.reset(torch.ones(W, dtype=torch.bool), _t(game.object_pos[..., :2]))
    rng = np.random.default_rng(seed)
    seen_steps = finished = 0
    for _ in range(2 * cfg.horizon + 3):
        actions = rng.integers(0, game.action_nvec, size=(W, game.n_agents, 5))
        in_prep = game.t < cfg.prep_steps
        _, reward, truncated, infos = game.step(actions)
        lidar, sees = _reference_rays(game)
        np.testing.assert_array_equal(game.lidar, lidar)
        np.testing.assert_array_equal(game._sees, sees)
        seen_steps += int(sees.any())
        _, hiders_seen = _reference_rewards(game, in_prep)
        seeker = game.agent_present & ~game.is_hider
        masks = [(m, np.maximum(m.sum(1), 1)) for m in (game.agent_present & game.is_hider, seeker)]
        state = SimpleNamespace(**{k: _t(getattr(game, k)) for k in SURFING})
        ref.add_surfing(_t(in_prep), _t(seeker), state, cfg.agent_radius)
        ref.add_step(
            _t(in_prep),
            _t(reward),
            [(_t(m.astype(np.float32)), _t(c.astype(np.float32))) for m, c in masks],
            _t(hiders_seen),
        )
        ref.mark_prep_end(
            _t(game.t),
            cfg.prep_steps,
            *map(_t, (game.object_pos[..., :2], game.object_present, game.locked)),
        )
        for name in ("returns", "play_steps", "hidden_steps"):
            np.testing.assert_array_equal(getattr(game.stats, name), getattr(ref, name), name)
        if truncated.any():
            done = np.flatnonzero(truncated)
            args = map(_t, (truncated, game.object_pos[..., :2], game.object_present, game.locked))
            want = ref.finish(*args).numpy()
            for w in done:
                got = [infos[w][k] for k in STAT_KEYS]
                np.testing.assert_allclose(got, want[w], rtol=1e-12)
            finished += len(done)
            game.reset(done)
            ref.reset(_t(truncated), _t(game.object_pos[..., :2]))
        np.testing.assert_allclose(game.stats.values, ref.values.numpy(), rtol=1e-12)
    assert seen_steps > 0 and finished >= W


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls", "chase"])
def test_compiled_rays_are_mj_rays_ray_by_ray(preset):
    """Every ray rays.cast casts has Batch.ray's distance and geom, bit for bit (nearest hit,
    lowest geom id among equals, misses -1), over episodes with absent agents, grabs and locks;
    the rays it skips (absent agents, sight lines nobody reads) read as misses."""
    params = {} if preset == "chase" else {"n_hiders": (1, 3), "n_seekers": (1, 2)}
    cfg = make_config(preset, horizon=40, **params)
    W, A, L = 3, cfg.max_agents, cfg.n_lidar
    game = HideAndSeekGame(cfg, W, seed=4)
    game.reset()
    assert game._ray_fns is not None  # one thread: the compiled rays
    R = game._nray
    rng = np.random.default_rng(4)
    cast = hits = skipped = 0
    for _ in range(3 * cfg.horizon):
        _, _, truncated, _ = game.step(rng.integers(0, game.action_nvec, size=(W, A, 5)))
        dist, geomid = game._ray_dist.copy(), game._ray_geom.copy()
        want_dist, want_geom = game.batch.ray(
            game._ray_pnt_rows, game._ray_vec_rows, game._ray_groups, True, game._ray_exclude
        )
        used = np.zeros((W, A, R), dtype=bool)
        used[:, :, :L] = game.agent_present[:, :, None]
        used[:, :, L:] = game._cone & game._pair_ok
        used = used.reshape(W, A * R)
        np.testing.assert_array_equal(dist[used], want_dist[used])
        np.testing.assert_array_equal(geomid[used], want_geom[used])
        assert (geomid[~used] == -1).all() and (dist[~used] == -1).all()
        cast += int(used.sum())
        hits += int((geomid[used] >= 0).sum())
        skipped += int((~used).sum())
        if truncated.any():
            game.reset(np.flatnonzero(truncated))
    assert hits > 0.5 * cast and skipped > 0
