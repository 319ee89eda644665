"""Policies of other trainers in our matches: the flat observations a controller builds from a
team's batch are the env's own `flatten=True` vectors, and `team_gain` pairs a policy with a
random team on the same seeds."""

from __future__ import annotations

import numpy as np
import pytest

import hns_train.envs as E
from hns_train.envs.game import HideAndSeekGame
from hns_train.eval.flat_policies import (
    FlatPolicyController,
    flatten_team_obs,
    parameter_change,
    team_gain,
)
from hns_train.eval.matches import team_observations


@pytest.mark.parametrize("preset", ["chase", "quadrant"])
def test_team_batches_flatten_like_the_env(preset):
    env = E.parallel_env(preset, seed=0, flatten=True)
    flat_env, _ = env.reset(seed=5)
    game = HideAndSeekGame(env.cfg, n_worlds=1)
    obs = game.reset(seeds=[5])  # the same world as the env's
    seekers = np.flatnonzero(~game.is_hider)
    space = env.dict_observation_space("seeker_0")
    batch = flatten_team_obs(team_observations(obs, seekers), space)
    want = np.stack([flat_env[f"seeker_{k}"] for k in range(len(seekers))])
    assert batch.dtype == np.float32 and batch.shape == want.shape
    np.testing.assert_array_equal(batch, want)


def test_bad_observations_and_actions_are_named():
    env = E.parallel_env("chase", flatten=True)
    space = env.dict_observation_space("seeker_0")
    obs = {k: np.zeros((3, *sub.shape), np.float32) for k, sub in space.items()}
    with pytest.raises(ValueError, match="lack keys \\['lidar'\\]"):
        flatten_team_obs({k: v for k, v in obs.items() if k != "lidar"}, space)
    obs["lidar"] = np.zeros((3, 7), np.float32)
    with pytest.raises(ValueError, match="'lidar' has shape \\(7,\\) per agent"):
        flatten_team_obs(obs, space)
    obs["lidar"] = np.zeros((3, 30), np.float32)
    ctrl = FlatPolicyController(lambda x: np.zeros((len(x), 4)), space)
    with pytest.raises(ValueError, match="actions of shape \\(3, 4\\); want \\(3, 5\\)"):
        ctrl.act(obs, None, None)
    with pytest.raises(ValueError, match="team must be one of"):
        team_gain(env.cfg, "seekers", lambda: ctrl, episodes=4, seed=0)


def test_team_gain_pairs_a_policy_with_a_random_team_on_the_same_seeds():
    cfg = E.make_config("chase", horizon=10)
    space = E.parallel_env("chase", flatten=True).dict_observation_space("seeker_0")
    rng = np.random.default_rng(0)

    def random_policy():
        nvec = np.array([11, 11, 11, 2, 2])
        return FlatPolicyController(lambda x: rng.integers(0, nvec, (len(x), 5)), space)

    out = team_gain(cfg, "seeker", random_policy, episodes=8, seed=3, worlds=4)
    assert out["metric"] == "in_sight" and out["episodes"] == 8
    assert 0.0 <= out["random"] <= 1.0 and out["gain_se"] > 0
    # a seeker that never moves (the middle bins): the random side is played again on the
    # same seeds with the same streams, so it is the same figure; the whole is reproducible
    still = FlatPolicyController(lambda x: np.tile([5, 5, 5, 0, 0], (len(x), 1)), space)
    a = team_gain(cfg, "seeker", lambda: still, episodes=8, seed=3, worlds=4)
    assert a["random"] == out["random"] and a["trained"] != out["trained"]
    assert team_gain(cfg, "seeker", lambda: still, episodes=8, seed=3, worlds=4) == a
    hiders = team_gain(cfg, "hider", lambda: still, episodes=8, seed=3, worlds=4)
    assert hiders["metric"] == "hidden"


def test_parameter_change():
    import torch

    net = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in net.parameters()]
    assert parameter_change(before, net.parameters()) == 0.0
    with torch.no_grad():
        net.bias += 3.0
    assert parameter_change(before, net.parameters()) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="not the same module"):
        parameter_change(before[:1], net.parameters())
