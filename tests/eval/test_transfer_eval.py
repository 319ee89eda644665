"""Scoring a transfer task (hns_train/eval/transfer.py): the same episodes for every network
scored on one seed, the world seeds and the sampled actions both, so that paired differences
compare networks and not luck."""

import numpy as np
import pytest
import torch

from hns_train.agents.config import NetworkConfig
from hns_train.agents.policy import ActorCritic
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from hns_train.eval.crossplay import paired_difference
from hns_train.eval.matches import PolicyController
from hns_train.eval.transfer import evaluate_task

SMALL = NetworkConfig(embed_dim=16, attention_heads=2, dense_dim=16, lstm_dim=16)


def sampling_policy(game_cfg, seed: int) -> PolicyController:
    torch.manual_seed(seed)
    model = ActorCritic(observation_shapes(game_cfg), SMALL)
    return PolicyController(model, "latest", deterministic=False)


def test_one_seed_scores_the_same_episodes_with_the_same_sampled_actions():
    game = make_config("lock_and_return", horizon=30)
    policy = sampling_policy(game, 0)
    torch.manual_seed(123)  # whatever ran before must not matter
    a = evaluate_task(game, policy, episodes=6, seed=7, worlds=3)
    torch.manual_seed(456)
    b = evaluate_task(game, policy, episodes=6, seed=7, worlds=3)
    np.testing.assert_array_equal(a.returns, b.returns)
    np.testing.assert_array_equal(a.scores, b.scores)
    other = evaluate_task(game, policy, episodes=6, seed=8, worlds=3)
    assert not np.array_equal(a.returns, other.returns)  # the seed does choose the episodes


def test_paired_difference_and_the_hide_and_seek_refusal():
    mean, se = paired_difference([1.0, 2.0, 4.0], [0.0, 1.0, 1.0])
    assert mean == pytest.approx(5 / 3)
    assert se == pytest.approx(np.std([1.0, 1.0, 3.0], ddof=1) / np.sqrt(3))
    assert np.isnan(paired_difference([1.0], [0.0])[1])
    with pytest.raises(ValueError, match="transfer task"):
        evaluate_task(make_config("quadrant"), None, episodes=2, seed=0)
