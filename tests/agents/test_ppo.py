"""GAE with truncation, one PPO update, statistics, checkpoint round trip."""

import copy
import dataclasses
import io

import numpy as np
import pytest
import torch

from hns_train.agents import PPO, ActorCritic, PPOConfig, compute_gae
from hns_train.agents.ppo import Rollout
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import synthetic_chunk
from tests.tolerances import RECURSION, REFERENCE, UPDATE_STATS, assert_close

SHAPES = observation_shapes(make_config("quadrant"))


def reference_gae(rewards, values, truncated, truncated_value, bootstrap, gamma, lam):
    """Plain loop, one stream at a time, written from the textbook definition."""
    steps, batch = rewards.shape
    advantages = np.zeros((steps, batch))
    for b in range(batch):
        for t in range(steps):
            total, discount = 0.0, 1.0
            for k in range(t, steps):
                if truncated[k, b]:
                    next_value = truncated_value[k, b]
                elif k + 1 < steps:
                    next_value = values[k + 1, b]
                else:
                    next_value = bootstrap[b]
                delta = rewards[k, b] + gamma * next_value - values[k, b]
                total += discount * delta
                if truncated[k, b]:
                    break
                discount *= gamma * lam
            advantages[t, b] = total
    return advantages


@pytest.mark.numerics
def test_gae_matches_reference_loop_with_truncation():
    rng = np.random.default_rng(0)
    steps, batch = 17, 6
    rewards = rng.normal(size=(steps, batch)).astype(np.float32)
    values = rng.normal(size=(steps, batch)).astype(np.float32)
    truncated = rng.random((steps, batch)) < 0.15
    truncated[-1, 0] = True  # an episode ending exactly at the chunk end
    truncated[:, 1] = False  # a stream with no boundary at all
    truncated_value = rng.normal(size=(steps, batch)).astype(np.float32)
    bootstrap = rng.normal(size=batch).astype(np.float32)

    adv, ret = compute_gae(rewards, values, truncated, truncated_value, bootstrap, 0.998, 0.95)
    expected = reference_gae(rewards, values, truncated, truncated_value, bootstrap, 0.998, 0.95)
    assert_close(adv, expected, RECURSION, "advantages")  # float32 against the reference
    assert_close(ret, expected + values, RECURSION, "returns")


def test_gae_truncation_uses_final_observation_value():
    # One step, episode cut after it: A = r + γ V(final obs) - V(o), bootstrap ignored.
    adv, _ = compute_gae(
        np.array([[1.0]]), np.array([[0.5]]), np.array([[True]]), np.array([[2.0]]),
        np.array([100.0]), gamma=0.9, lam=0.95,
    )  # fmt: skip
    assert adv[0, 0] == pytest.approx(1.0 + 0.9 * 2.0 - 0.5)


def make_chunks(model, rng, n=4):
    return [
        synthetic_chunk(model, 20, 8, 10, rng, episode_len=15, first_step=5 * i) for i in range(n)
    ]


def loss_terms(ppo, chunks):
    """The update's loss terms on `chunks` at `ppo`'s parameters, the value loss in reward units:
    the statistics of one full-batch update of a copy at lr 0, whose loss is taken before its
    step (its PopArt keeps de-normalised values, so value_loss · σ² is in reward units)."""
    config = dataclasses.replace(ppo.config, epochs=1, minibatches=1, lr=0.0)
    stats = PPO(copy.deepcopy(ppo.model), config).update(chunks)
    return stats, stats["value_loss"] * stats["value_norm_std"] ** 2


def test_one_update_lowers_the_loss_and_keeps_kl_small():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = ActorCritic(SHAPES, device="cpu")
    ppo = PPO(model, PPOConfig(epochs=4))  # 4 full-batch Adam steps at lr 3e-4
    chunks = make_chunks(model, rng)

    before, value_before = loss_terms(ppo, chunks)
    assert before["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # same parameters as the rollout
    ppo.update(chunks)
    after, value_after = loss_terms(ppo, chunks)

    def total(s, value_loss):
        return s["policy_loss"] + 0.5 * value_loss - 0.01 * s["entropy"]

    assert total(after, value_after) < total(before, value_before) - 0.05
    assert after["policy_loss"] < before["policy_loss"]
    assert value_after < value_before
    assert 0 < after["approx_kl"] < 0.05
    assert ppo.version == 1


def test_update_reports_every_statistic():
    torch.manual_seed(1)
    model = ActorCritic(SHAPES, device="cpu")
    ppo = PPO(model, PPOConfig(epochs=2, minibatches=2))
    stats = ppo.update(make_chunks(model, np.random.default_rng(1), n=2))
    assert stats["version"] == 1 and stats["approx_kl"] > 0  # later minibatches moved
    for key in (
        "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm",
        "explained_variance", "value_norm_mean", "value_norm_std", "version",
    ):  # fmt: skip
        assert np.isfinite(stats[key]), key
    # Near-uniform initial heads: entropy close to 3 log 11 + 2 log 2.
    assert stats["entropy"] == pytest.approx(3 * np.log(11) + 2 * np.log(2), rel=0.02)


def test_value_clipping_option_runs():
    model = ActorCritic(SHAPES, device="cpu")
    stats = PPO(model, PPOConfig(clip_value_loss=True)).update(
        make_chunks(model, np.random.default_rng(2), n=1)
    )
    assert np.isfinite(stats["value_loss"])


def test_update_rejects_inconsistent_batches():
    rng = np.random.default_rng(3)
    model = ActorCritic(SHAPES, device="cpu")
    ppo = PPO(model, PPOConfig(bptt_len=5))
    with pytest.raises(ValueError, match="every 10 steps; expected bptt_len = 5"):
        ppo.update(make_chunks(model, rng, n=1))
    chunk = make_chunks(model, rng, n=1)[0]
    chunk.truncated[3] = ~chunk.truncated[3]
    with pytest.raises(ValueError, match="episode_start"):
        PPO(model).update(chunk)


def test_state_dict_round_trip_through_weights_only_load():
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    model = ActorCritic(SHAPES, device="cpu")
    ppo = PPO(model)
    chunks = make_chunks(model, rng, n=2)
    ppo.update(chunks)  # non-trivial normalisers and optimiser moments

    buffer = io.BytesIO()
    torch.save(ppo.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)

    clone = PPO(ActorCritic(SHAPES, device="cpu"))
    clone.load_state_dict(loaded)
    assert clone.version == 1

    obs = chunks[0].obs
    step = {k: v[0] for k, v in obs.items()}
    a = model.act(step, deterministic=True)
    b = clone.model.act(step, deterministic=True)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)

    # Resuming continues identically: same optimiser moments, same normalisers.
    torch.manual_seed(5)
    next_a = ppo.update(chunks)
    torch.manual_seed(5)
    next_b = clone.update(chunks)
    assert next_a == next_b


def test_loaded_state_trains_with_the_loaders_own_optimiser_settings():
    """A resume with a new lr, or a population member that copied another's state and then
    perturbed its settings, must train with its own lr, not the one saved in the moments."""
    torch.manual_seed(6)
    model = ActorCritic(SHAPES, device="cpu")
    source = PPO(model, PPOConfig(lr=1e-3))
    source.update(make_chunks(model, np.random.default_rng(6), n=1))
    copy = PPO(ActorCritic(SHAPES, device="cpu"), PPOConfig(lr=0.0, weight_decay=0.0))
    copy.load_state_dict(source.state_dict())
    assert [g["lr"] for g in copy.optimizer.param_groups] == [0.0]
    assert [g["weight_decay"] for g in copy.optimizer.param_groups] == [0.0]
    saved = copy.optimizer.state_dict()["state"]
    for key, value in source.optimizer.state_dict()["state"].items():  # moments copied exactly
        torch.testing.assert_close(saved[key]["exp_avg"], value["exp_avg"], rtol=0, atol=0)
    # PopArt rescales the value head when its statistics move; every other weight is the
    # optimiser's alone, and at lr 0 it does not move
    learned = {n: p for n, p in copy.model.named_parameters() if not n.startswith("value_net.head")}
    before = {n: p.detach().clone() for n, p in learned.items()}
    copy.update(make_chunks(copy.model, np.random.default_rng(7), n=1))
    for name, p in learned.items():
        torch.testing.assert_close(p.detach(), before[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("learn_all", [True, False])
def test_a_minibatch_in_passes_takes_the_step_of_one_pass(learn_all):
    """`cpu_pass_samples` runs a minibatch's forward and backward in parts: the gradient and
    the statistics are the whole minibatch's, also when some steps are not learned (a pod's
    rows of other policies), which weights the parts unevenly."""
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    model = ActorCritic(SHAPES, device="cpu")
    rollout = Rollout.from_chunk(synthetic_chunk(model, 20, 16, 10, rng, episode_len=15), model)
    if not learn_all:
        rollout = dataclasses.replace(rollout, learn=torch.as_tensor(rng.random((20, 16)) < 0.6))
    runs = []
    for samples in (0, 70):  # 320 samples: one pass, or 5 of 60-70
        ppo = PPO(
            copy.deepcopy(model),
            PPOConfig(epochs=1, minibatches=1, lr=0.0, cpu_pass_samples=samples),
        )
        runs.append((ppo, ppo.update(rollout)))
    (whole, whole_stats), (parts, parts_stats) = runs
    segments = whole._segments(rollout, rollout.values, rollout.values)  # only its sizes count
    assert len(whole._passes(segments)) == 1 and len(parts._passes(segments)) == 5
    for (name, p), q in zip(whole.model.named_parameters(), parts.model.parameters(), strict=True):
        # lr 0: the weights stay, and each keeps the (clipped) gradient of the one minibatch
        assert_close(q.grad, p.grad, REFERENCE, f"gradient of {name}")
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
        assert_close(
            torch.tensor(parts_stats[key]), torch.tensor(whole_stats[key]), UPDATE_STATS, key
        )
