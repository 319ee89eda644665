"""`agent.network.kind`: the networks an `ActorCritic` is made of, the interface a network of the
user's own code is checked against, checkpoints that name their network, and weights that do
not fit named by parameter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hns_train.agents import PPO, ActorCritic, NetworkConfig, PPOConfig
from hns_train.agents.checkpoint import Counters, load_checkpoint, save_checkpoint, training_state
from hns_train.agents.mlp import MLPNetwork
from hns_train.agents.network_kinds import load_weights, network_config
from hns_train.agents.networks import EntityNetwork
from hns_train.agents.transfer import load_pretrained
from hns_train.config import CONFIG_DIR, ConfigError, load_config, save_config
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from hns_train.eval.policies import load_policy_file, policy_controller
from tests.synthetic import random_observations, synthetic_chunk

SHAPES = observation_shapes(make_config("quadrant"))
SMALL = dict(embed_dim=16, attention_heads=2, dense_dim=32, lstm_dim=16, mlp_dim=32)

USER_NETWORKS = '''
import torch
from torch import nn


class Flat(nn.Module):
    """A feed-forward network over the self vector alone: the smallest that fits."""

    def __init__(self, layout, config, n_outputs, mask):
        super().__init__()
        self.head = nn.Linear(layout.self_dim, n_outputs)

    def forward(self, obs, state, episode_start):
        return self.head(obs["observation_self"]), state


class NoHead(nn.Module):
    def __init__(self, layout, config, n_outputs, mask):
        super().__init__()
        self.out = nn.Linear(layout.self_dim, n_outputs)

    def forward(self, obs, state, episode_start):
        return self.out(obs["observation_self"]), state


class DropsState(Flat):
    def forward(self, obs, state, episode_start):
        return self.head(obs["observation_self"]), state[0]


class WrongSignature(nn.Module):
    def __init__(self, layout):
        super().__init__()


class NotANetwork:
    pass
'''


@pytest.fixture
def user_networks(tmp_path, monkeypatch):
    (tmp_path / "user_networks.py").write_text(USER_NETWORKS)
    monkeypatch.syspath_prepend(str(tmp_path))


def model(kind: str, **settings) -> ActorCritic:
    return ActorCritic(SHAPES, NetworkConfig(kind=kind, **{**SMALL, **settings}), device="cpu")


def test_the_kind_decides_the_networks():
    assert isinstance(model("entity").policy_net, EntityNetwork)
    mlp = model("mlp", mlp_layers=3)
    assert isinstance(mlp.policy_net, MLPNetwork) and isinstance(mlp.value_net, MLPNetwork)
    assert sum(isinstance(m, torch.nn.Linear) for m in mlp.policy_net.body) == 3
    assert mlp.policy_net.head.out_features == 37 and mlp.value_net.head.out_features == 1


def test_the_mlp_sees_only_its_mask_and_keeps_the_state():
    net = model("mlp")
    rng = np.random.default_rng(0)
    obs = random_observations(SHAPES, (6,), rng)
    state = rng.normal(size=(6, 4, SMALL["lstm_dim"])).astype(np.float32)
    out = net.act(obs, state, np.zeros(6, bool), deterministic=True)
    np.testing.assert_array_equal(out.state, state)  # no memory: the state passes through
    # an entity the policy does not see reaches its outputs through no path
    hidden = obs["mask_ab_obs"] < 0.5
    changed = {**obs, "box_obs": np.where(hidden[..., None], 1e3, obs["box_obs"])}
    tensors = {k: torch.as_tensor(v)[None] for k, v in net.obs_to_tensors(obs, 1).items()}
    moved = {k: torch.as_tensor(v)[None] for k, v in net.obs_to_tensors(changed, 1).items()}
    starts = torch.zeros((1, 6), dtype=torch.bool)
    with torch.no_grad():
        logits, values, _ = net.forward_sequence(tensors, torch.as_tensor(state), starts)
        logits2, values2, _ = net.forward_sequence(moved, torch.as_tensor(state), starts)
    torch.testing.assert_close(logits, logits2)
    assert not torch.allclose(values, values2)  # the omniscient value sees every box


def test_an_mlp_trains_with_ppo_and_popart():
    net = model("mlp")
    ppo = PPO(net, PPOConfig(bptt_len=5))
    chunk = synthetic_chunk(net, 10, 8, 5, np.random.default_rng(1))
    before = net.value_net.head.weight.detach().clone()
    stats = ppo.update([chunk])
    assert np.isfinite(stats["loss"]) and ppo.version == 1
    assert not torch.equal(before, net.value_net.head.weight)


def test_a_network_of_the_users_own_module_is_built_and_checked(user_networks):
    net = model("user_networks:Flat")
    out = net.act(random_observations(SHAPES, (3,), np.random.default_rng(2)))
    assert out.actions.shape == (3, 5) and np.all(out.state == 0)
    cfg = load_config(CONFIG_DIR / "smoke.yaml", ["agent.network.kind=user_networks:Flat"])
    assert cfg.agent.network.kind == "user_networks:Flat"


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("user_networks:NoHead", "NoHead has no `head` nn.Linear (its last layer, whose weight"),
        ("user_networks:DropsState", "DropsState.forward must return (outputs (T, N, 37), (h, c)"),
        ("user_networks:WrongSignature", "WrongSignature(layout, config, n_outputs, mask) failed"),
    ],
)
def test_a_network_without_the_interface_is_refused_naming_what_is_missing(
    user_networks, kind, said
):
    with pytest.raises(ValueError) as err:
        model(kind)
    assert str(err.value).startswith(f"agent.network.kind={kind!r}: ") and said in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("user_networks:NotANetwork", "NotANetwork is not a subclass of torch.nn.modules.module"),
        ("user_networks:Missing", "module user_networks ("),
        ("no_such_networks:Net", "no module named 'no_such_networks'"),
        ("lstm", "is not one of ('entity', 'mlp') or an import path package.module:Class"),
    ],
)
def test_a_kind_that_does_not_resolve_is_refused_when_the_config_is_read(user_networks, kind, said):
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG_DIR / "smoke.yaml", [f"agent.network.kind={kind}"])
    assert f"agent.network.kind={kind!r}" in str(err.value) and said in str(err.value)


def saved_run(tmp_path, kind: str):
    """A run directory with a training checkpoint of a `kind` network."""
    overrides = [f"runs_dir={tmp_path}", f"name={kind}", f"agent.network.kind={kind}"]
    cfg = load_config(CONFIG_DIR / "smoke.yaml", overrides)
    cfg.run_dir.mkdir(parents=True)
    save_config(cfg, cfg.run_dir / "config.yaml")
    net = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, device="cpu")
    state, meta = training_state(PPO(net, cfg.agent.ppo), Counters(version=2), cfg.to_dict())
    path = save_checkpoint(cfg.run_dir / "checkpoints" / "ckpt_0000000002.pt", state, meta)
    return cfg, path


def test_a_checkpoint_names_its_network_and_loaders_build_it(tmp_path):
    cfg, path = saved_run(tmp_path, "mlp")
    meta = load_checkpoint(path).meta
    assert meta["network"]["kind"] == "mlp" and meta["network"]["lstm_dim"] == 32
    # the current run config says nothing of the network: the file decides
    source = load_policy_file(path)
    assert source.config.agent.network.kind == "mlp"
    controller = policy_controller(source, cfg.game_config(), "a")
    assert isinstance(controller.model.policy_net, MLPNetwork)


def test_a_checkpoint_from_before_the_record_loads_as_entity(tmp_path):
    _, path = saved_run(tmp_path, "entity")
    ckpt = load_checkpoint(path)
    old = {k: v for k, v in ckpt.meta.items() if k != "network"}
    del old["config"]["agent"]["network"]["kind"]
    assert network_config(old).kind == "entity" and network_config({}).kind == "entity"
    save_checkpoint(path, ckpt.state, old)
    assert load_policy_file(path).config.agent.network.kind == "entity"


@pytest.mark.parametrize(
    ("saved", "loaded", "named"),
    [
        ("mlp", "entity", "missing: policy_net.lidar.conv.weight, policy_net.lidar.conv.bias"),
        ("entity", "mlp", "missing: policy_net.body.0.weight, policy_net.body.0.bias"),
    ],
)
def test_weights_of_one_network_loaded_as_the_other_name_the_parameters(
    tmp_path, saved, loaded, named
):
    """On the code before, torch's message, whose first line is "Error(s) in loading
    state_dict for ActorCritic:"; now one line with the kinds and the first parameters."""
    _, path = saved_run(tmp_path, saved)
    ckpt = load_checkpoint(path)
    other = load_config(CONFIG_DIR / "smoke.yaml", [f"agent.network.kind={loaded}"])
    own = ActorCritic(observation_shapes(other.game_config()), other.agent.network, device="cpu")
    with pytest.raises(ValueError) as err:
        load_weights(own, ckpt.state["ppo"]["model"], str(path), network_config(ckpt.meta))
    said = str(err.value)
    assert f"the weights are of kind {saved!r}, this network of {loaded!r}" in said
    assert named in said and "not in this network: policy_net." in said and "\n" not in said
    with pytest.raises(ValueError, match=f"holds a {saved!r} network, this run's is {loaded!r}"):
        load_pretrained(own, ckpt)


def test_weights_of_another_size_name_the_first_parameters_whose_shapes_differ():
    small, large = model("mlp"), model("mlp", mlp_dim=48)
    with pytest.raises(ValueError) as err:
        load_weights(large, small.state_dict(), "snapshot 3")
    said = str(err.value)
    assert said.startswith("snapshot 3: the weights do not fit the network: shapes differ: ")
    assert "policy_net.body.0.weight saved (32, " in said and ", here (48, " in said
