"""The game's step equals the reference rule functions it was fused from.

`HideAndSeekGame` writes observations into preallocated buffers, keeps per-episode tables and
skips work that cannot change anything (no eligible object, no lifted seeker). These tests
rebuild observations with `observations.assemble`, rewards with `rules.rewards` and the other
agents' order with a plain loop, from the game's own state after every step of episodes that
grab and lock often, with team sizes that leave slots empty.
"""

import numpy as np
import pytest

from hns_train.envs import observations as O
from hns_train.envs import rules
from hns_train.envs.config import make_config
from hns_train.envs.game import HideAndSeekGame


def _reference_obs(game):
    cfg, nb = game.cfg, game.cfg.max_boxes
    prep = np.minimum(1.0, game.t / cfg.prep_steps) if cfg.prep_steps else np.ones(game.n_worlds)
    agent_vec = O.agent_vectors(
        game.agent_pos, game.agent_yaw, game.agent_vel, game.is_hider.astype(float), prep
    )
    rows = O.object_rows(game.object_pos, game.object_yaw, game.object_vel)
    box_rows = rows[:, :nb]
    if cfg.box_size_obs:
        box_rows = np.concatenate([box_rows, game.box_size], axis=-1)
    flags = O.lock_flags(game.lock_agent, game.lock_team, game.locked, game.team)
    return O.assemble(
        cfg,
        agent_vec,
        game.agent_present,
        game.others,
        game.sees_agent,
        box_rows,
        rows[:, nb:],
        flags,
        game.sees_object,
        game.object_present,
        game.lidar,
    )


def _loop_others(present):
    table = np.full((len(present), len(present) - 1), -1)
    slots = np.flatnonzero(present)
    for pos, i in enumerate(slots):
        for k in range(1, len(slots)):
            table[i, k - 1] = slots[(pos - k) % len(slots)]
    return table


@pytest.mark.parametrize("preset", ["quadrant", "randomwalls"])
def test_step_matches_the_reference_rules_and_observations(preset):
    horizon = {"quadrant": 30, "randomwalls": 24}[preset]
    cfg = make_config(preset, horizon=horizon, n_hiders=(1, 3), n_seekers=(1, 2))
    W = 3
    game = HideAndSeekGame(cfg, W, seed=1)
    game.reset()
    rng = np.random.default_rng(5)
    locks = grabs = 0
    presence = set()
    for _ in range(2 * horizon + 5):
        actions = rng.integers(0, game.action_nvec, size=(W, game.n_agents, 5))
        actions[..., 3] = rng.random((W, game.n_agents)) < 0.8
        actions[..., 4] = rng.random((W, game.n_agents)) < 0.6
        in_prep = game.t < cfg.prep_steps
        obs, reward, truncated, _ = game.step(actions)
        want, seen = rules.rewards(
            game.sees_agent,
            game.is_hider,
            game.agent_present,
            game.agent_pos[..., :2],
            game.object_pos[..., :2],
            game.object_present,
            in_prep,
            cfg.oob_low,
            cfg.oob_high,
            cfg.oob_penalty,
            cfg.penalise_objects_oob,
        )
        np.testing.assert_array_equal(reward, want)
        cone = rules.in_vision_cone(
            game.agent_pos, game.agent_yaw, game.entity_centre, cfg.vision_half_angle
        )
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
    assert locks > 0 and grabs > 0 and len(presence) > 1
