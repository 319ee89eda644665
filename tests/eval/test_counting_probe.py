"""Object counting's probe (eval/counting_probe.py): frozen networks watch the test, a linear head
on the LSTM state says how many boxes went left; and bench/transfer.py's object counting row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hns_train.agents import PPO, ActorCritic, PPOConfig
from hns_train.agents.checkpoint import Counters, save_checkpoint, training_state
from hns_train.agents.config import NetworkConfig
from hns_train.config import CONFIG_DIR, load_config
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from hns_train.eval.counting_probe import (
    counting_probe,
    frozen_network,
    prior_scores,
    probe_scores,
    train_probe,
    watch,
)
from tests.scripts import load_script

SMALL = NetworkConfig(embed_dim=32, attention_heads=2, dense_dim=32, lstm_dim=32)


def small_checkpoint(tmp_path, preset: str = "quadrant"):
    """A training checkpoint of a small network, as a smoke run of `preset` writes it."""
    cfg = load_config(CONFIG_DIR / "smoke.yaml", [f"game.preset={preset}"])
    torch.manual_seed(3)
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, device="cpu")
    state, meta = training_state(PPO(model, PPOConfig()), Counters(version=2), cfg.to_dict())
    path = tmp_path / "src" / "checkpoints" / "ckpt_0000000002.pt"
    return save_checkpoint(path, state, meta), model


def test_every_network_watches_the_same_episodes_and_keeps_the_hidden_steps():
    cfg = make_config("object_counting")
    torch.manual_seed(0)
    nets = {n: ActorCritic(observation_shapes(cfg), SMALL, device="cpu") for n in ("a", "b")}
    seen = watch(cfg, nets, episodes=10, seed=4, worlds=4)  # three batches of worlds
    assert seen.features["a"].shape == (10, cfg.counting.hidden_steps, SMALL.lstm_dim)
    assert not np.array_equal(seen.features["a"], seen.features["b"])
    assert seen.labels.min() >= 0 and seen.labels.max() <= cfg.max_boxes == 6
    again = watch(cfg, {"a": nets["a"]}, episodes=10, seed=4, worlds=10)
    np.testing.assert_array_equal(again.labels, seen.labels)  # world seeds, not batches
    np.testing.assert_allclose(again.features["a"], seen.features["a"], atol=1e-6)
    with pytest.raises(ValueError, match="watches the object_counting test, not 'blueprint'"):
        watch(make_config("blueprint"), nets, episodes=2, seed=0)


def test_the_head_reads_a_count_the_features_hold_and_not_one_they_lack():
    rng = np.random.default_rng(0)
    labels = rng.binomial(6, 0.5, size=300)
    noise = rng.normal(size=(300, 4, 16)).astype(np.float32)
    held = noise.copy()
    held[..., :7] += 3.0 * np.eye(7, dtype=np.float32)[labels][:, None]  # the count, one-hot
    train, test = slice(0, 200), slice(200, 300)
    for features, lowest, highest in ((held, 0.85, 1.0), (noise, 0.0, 0.5)):
        probe = train_probe(features[train], labels[train], classes=7, seed=0)
        result = probe_scores(probe, features[test], labels[test])
        assert lowest <= result.accuracy.mean() <= highest
        assert result.by_step.shape == (4,) and result.last_right.shape == (100,)
    prior = prior_scores(labels[train], labels[test], steps=4)
    assert prior.accuracy.mean() == np.mean(labels[test] == np.bincount(labels[train]).argmax())


def test_a_frozen_random_network_still_holds_the_count_as_the_boxes_vanish():
    """Measured (paper-sized network, 256 training episodes, 2026-11-25): 0.98 at the first
    hidden step, falling to the prior (0.31) by the tenth, as the LSTM state converges."""
    cfg = make_config("object_counting")
    results, prior = counting_probe(cfg, NetworkConfig(), {"random": ""}, 128, 64, seed=0)
    first = results["random"].by_step[0]
    assert first > prior.by_step[0] + 0.3, (first, prior.by_step[0])


def test_a_checkpoint_is_probed_in_its_own_network_size(tmp_path):
    path, source = small_checkpoint(tmp_path)
    net, own = frozen_network(make_config("object_counting"), NetworkConfig(), str(path), 0)
    assert net.config.lstm_dim == SMALL.lstm_dim
    assert torch.equal(net.policy_net.lstm.weight_hh, source.policy_net.lstm.weight_hh)
    assert own.box_size_obs is False  # the quadrant network's box rows carry no sizes


def test_the_bench_scores_object_counting_by_the_probe(tmp_path):
    path, _ = small_checkpoint(tmp_path)
    result = load_script("bench/transfer.py", "transfer_bench").main(
        ["--tasks=object_counting", f"--init={path}", "--probe-episodes=32", "--episodes=16",
         f"--out={tmp_path / 'out'}", "--quiet", "agent.network.embed_dim=32",
         "agent.network.attention_heads=2", "agent.network.dense_dim=32",
         "agent.network.lstm_dim=32"]
    )  # fmt: skip
    entry = result["object_counting"]
    assert set(entry) == {"untrained", "scratch", "hide_and_seek"}
    for arm in ("scratch", "hide_and_seek"):
        assert len(entry[arm]["by_step"][0]) == make_config("object_counting").counting.hidden_steps
        assert 0.0 <= entry[arm]["score"] <= 1.0
    assert "vs_scratch" in entry["hide_and_seek"]
    assert (tmp_path / "out" / "transfer.png").stat().st_size > 10_000  # the accuracy by step
