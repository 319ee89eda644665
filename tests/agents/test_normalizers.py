"""Running observation statistics and PopArt value normalisation."""

import dataclasses

import numpy as np
import pytest
import torch

from hns_train.agents import ActorCritic, AgentConfig, NetworkConfig
from hns_train.agents.normalizers import EmaMeanStd, popart_update
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from hns_train.typed_config import from_dict, range_problems
from tests.synthetic import random_observations as random_obs
from tests.tolerances import MOMENTS, POPART, assert_close

pytestmark = pytest.mark.numerics

SHAPES = observation_shapes(make_config("quadrant"))


def test_debiased_ema_equals_mean_of_batch_statistics_early():
    stat = EmaMeanStd((3,), beta=0.99999, min_var=1e-8)
    mean, std = stat.mean_std()
    assert mean.tolist() == [0, 0, 0] and std.tolist() == [1, 1, 1]
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(50, 3, generator=g) * 2 + 1 for _ in range(5)]
    for x in batches:
        stat.fold(stat.sums(x))
    everything = torch.cat(batches)  # equal batch sizes: mean of batch means = overall mean
    mean, std = stat.mean_std()
    assert_close(mean, everything.mean(0), MOMENTS, "mean")
    assert_close(std, everything.std(0, unbiased=False), MOMENTS, "std")


def test_obs_normalizer_clips_skips_masks_and_absent_rows():
    model = ActorCritic(SHAPES, device="cpu")
    obs = random_obs(SHAPES, (4, 64), np.random.default_rng(0))
    obs["box_obs"] = obs["box_obs"] * 0.1 + 3.0
    obs["mask_ab_obs_spoof"][..., 1] = 0.0
    obs["box_obs"][..., 1, :] = 1000.0  # padding of an absent box: must not count
    tensors = model.obs_to_tensors(obs, 2)
    model.obs_norm.update(tensors)

    box_mean, _ = model.obs_norm.stats["box_obs"].mean_std()
    torch.testing.assert_close(box_mean, torch.full((12,), 3.0), atol=0.02, rtol=0)
    normalized = model.obs_norm(tensors)
    assert normalized["box_obs"][..., 1, :].max() == 5.0  # the absent row is far out: clipped
    assert normalized["box_obs"][..., 0, :].abs().max() < 5.0
    for key in tensors:
        if key.startswith("mask_"):
            assert normalized[key] is tensors[key]


def test_popart_update_preserves_denormalized_values():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 1)
    stats = EmaMeanStd((), beta=0.99999, min_var=1e-4)
    features = torch.randn(32, 16)

    def denormalized():
        mean, std = stats.mean_std()
        return head(features).squeeze(-1) * std + mean

    for targets in (torch.randn(100) * 30 + 50, torch.randn(100) * 0.5 - 4, torch.randn(7)):
        before = denormalized().detach()
        popart_update(stats, head, targets)
        assert_close(denormalized(), before, POPART, "de-normalised values")
    mean, std = stats.mean_std()
    assert mean != 0 and std != 1  # the statistics did move


def test_value_normalizer_update_keeps_model_values():
    rng = np.random.default_rng(1)
    model = ActorCritic(SHAPES, device="cpu")
    obs = random_obs(SHAPES, (16,), rng)
    before = model.act(obs, deterministic=True).values
    popart_update(
        model.value_norm, model.value_net.head, torch.as_tensor(rng.normal(20.0, 5.0, 256))
    )
    after = model.act(obs, deterministic=True).values
    assert_close(after, before, POPART, "values")
    assert float(model.value_norm.mean_std()[0]) == pytest.approx(20.0, abs=1.0)


def test_config_from_dict():
    cfg = from_dict(AgentConfig, {"network": {"lstm_dim": 64}, "ppo": {"epochs": 3}})
    assert cfg.network.lstm_dim == 64 and cfg.ppo.epochs == 3 and cfg.ppo.gamma == 0.998
    assert from_dict(AgentConfig, dataclasses.asdict(cfg)) == cfg
    with pytest.raises(ValueError, match="unknown NetworkConfig fields.*lstm_size"):
        from_dict(AgentConfig, {"network": {"lstm_size": 64}})
    with pytest.raises(ValueError, match="divisible"):
        NetworkConfig(embed_dim=100, attention_heads=3)
    assert range_problems(AgentConfig(NetworkConfig(lidar_kernel=4)), "agent.") == [
        "agent.network.lidar_kernel=4 is not allowed; it must be odd and >= 1"
    ]
