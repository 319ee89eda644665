"""Network shape, parameter count, masking semantics and input validation."""

import numpy as np
import pytest
import torch

from hns_train.agents import ActorCritic, ObsLayout
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import random_observations

QUADRANT = observation_shapes(make_config("quadrant"))
RANDOMWALLS = observation_shapes(make_config("randomwalls"))
CHASE = observation_shapes(make_config("chase"))


def forward(model, obs):
    """One step from a zero state: policy logits (B, 37) and normalised values (B,)."""
    tensors = {k: v.unsqueeze(0) for k, v in model.obs_to_tensors(obs, 1).items()}
    batch = tensors["observation_self"].shape[1]
    state = torch.zeros(batch, 4, model.config.lstm_dim)
    starts = torch.ones(1, batch, dtype=torch.bool)
    with torch.no_grad():
        logits, value, _ = model.forward_sequence(tensors, state, starts)
    return logits[0], value[0]


@pytest.mark.parametrize("name,shapes", [("quadrant", QUADRANT), ("randomwalls", RANDOMWALLS)])
def test_parameter_count_is_about_1_6_million(name, shapes):
    model = ActorCritic(shapes, device="cpu")
    total = model.num_parameters()
    policy = sum(p.numel() for p in model.policy_net.parameters())
    value = sum(p.numel() for p in model.value_net.parameters())
    print(f"{name}: {total:,} parameters (policy {policy:,}, value {value:,})")
    assert 1_450_000 < total < 1_800_000
    # Separate weights of the same shape: only the heads differ (37 logits vs 1 value).
    assert policy - value == (37 - 1) * (model.config.lstm_dim + 1)


def test_zero_entity_counts_work():
    rng = np.random.default_rng(0)
    model = ActorCritic(CHASE, device="cpu")
    assert [s.kind.name for s in model.layout.entities] == ["agents"]
    out = model.act(random_observations(CHASE, (6,), rng))
    assert out.actions.shape == (6, 5) and np.isfinite(out.values).all()
    # Zero-row keys may also be left out of the description and of the observations.
    kept = ("observation_self", "lidar", "agent_qpos_qvel", "mask_aa_obs", "mask_aa_obs_spoof")
    no_objects = {k: CHASE[k] for k in kept}
    model = ActorCritic(no_objects, device="cpu")
    out = model.act(random_observations(no_objects, (6,), rng))
    assert np.isfinite(out.logp).all()


def test_no_entities_at_all():
    shapes = {k: CHASE[k] for k in ("observation_self", "lidar")}
    model = ActorCritic(shapes, device="cpu")
    out = model.act(random_observations(shapes, (3,), np.random.default_rng(0)))
    assert np.isfinite(out.values).all()


@pytest.mark.numerics
def test_policy_ignores_masked_entities_value_sees_existing_ones():
    rng = np.random.default_rng(1)
    model = ActorCritic(QUADRANT, device="cpu")
    obs = random_observations(QUADRANT, (8,), rng)
    # Box 0 exists but is hidden from every agent.
    obs["mask_ab_obs"][:, 0] = 0.0
    obs["mask_ab_obs_spoof"][:, 0] = 1.0
    logits, value = forward(model, obs)

    moved = {k: v.copy() for k, v in obs.items()}
    moved["box_obs"][:, 0] += 3.0
    logits_moved, value_moved = forward(model, moved)
    # Bit-equal on every CPU: a masked key's softmax weight is exactly 0, 0 * v adds exact
    # zeros, and the kernels' summation order depends on the shapes alone, which are unchanged.
    torch.testing.assert_close(logits_moved, logits, rtol=0, atol=0)
    assert (value_moved - value).abs().min() > 1e-6

    # Only the existence mask differs: the policy is blind to it, the value function is not.
    gone = {k: v.copy() for k, v in obs.items()}
    gone["mask_ab_obs_spoof"][:, 0] = 0.0
    logits_gone, value_gone = forward(model, gone)
    torch.testing.assert_close(logits_gone, logits, rtol=0, atol=0)
    assert (value_gone - value).abs().min() > 1e-6


def test_visible_entity_changes_policy():
    rng = np.random.default_rng(2)
    model = ActorCritic(QUADRANT, device="cpu")
    obs = random_observations(QUADRANT, (8,), rng)
    obs["mask_ab_obs"][:, 0] = obs["mask_ab_obs_spoof"][:, 0] = 1.0
    # Heads start near zero (std 0.01), so compare the trunk through a non-trivial head.
    torch.nn.init.normal_(model.policy_net.head.weight, std=1.0)
    logits, _ = forward(model, obs)
    obs["box_obs"][:, 0] += 3.0
    logits_moved, _ = forward(model, obs)
    assert (logits_moved - logits).abs().amax(-1).min() > 1e-4


def test_fully_masked_entities_give_finite_outputs():
    model = ActorCritic(RANDOMWALLS, device="cpu")
    obs = random_observations(RANDOMWALLS, (5,), np.random.default_rng(3))
    for key in obs:
        if key.startswith("mask_"):
            obs[key][:] = 0.0
    logits, value = forward(model, obs)
    assert torch.isfinite(logits).all() and torch.isfinite(value).all()


def test_bad_observations_raise_clear_errors():
    rng = np.random.default_rng(4)
    model = ActorCritic(QUADRANT, device="cpu")
    good = random_observations(QUADRANT, (4,), rng)

    missing = {k: v for k, v in good.items() if k != "lidar"}
    with pytest.raises(ValueError, match="missing keys.*lidar"):
        model.act(missing)

    wrong = dict(good, box_obs=np.zeros((4, 2, 11), np.float32))
    with pytest.raises(ValueError, match=r"'box_obs' has shape \(4, 2, 11\).*\(2, 12\)"):
        model.act(wrong)

    with pytest.raises(ValueError, match="unexpected observation keys.*'extra'"):
        model.act(dict(good, extra=np.zeros((4, 1), np.float32)))

    ragged = dict(good, lidar=np.zeros((5, 30), np.float32))
    with pytest.raises(ValueError, match="batch shape"):
        model.act(ragged)

    with pytest.raises(ValueError, match="state has shape"):
        model.act(good, state=np.zeros((4, 2, 256), np.float32))

    with pytest.raises(ValueError, match="unknown observation keys.*'box_pos'"):
        ObsLayout.from_shapes(dict(QUADRANT, box_pos=(2, 3)))

    with pytest.raises(ValueError, match="mask_ab_obs_spoof"):
        ObsLayout.from_shapes({k: v for k, v in QUADRANT.items() if k != "mask_ab_obs_spoof"})


def test_layout_from_gymnasium_like_space():
    class Box:
        def __init__(self, shape):
            self.shape = shape

    class Dict:
        spaces = {k: Box(v) for k, v in RANDOMWALLS.items()}

    layout = ObsLayout.from_shapes(Dict())
    assert [(s.count, s.dim) for s in layout.entities] == [(3, 10), (9, 15), (2, 15)]


def test_act_takes_tensors_where_they_are_and_arrays_alike():
    """A pod hands the policy its observations as tensors on the simulation's device;
    they give the same outputs as host arrays, and a wrongly shaped tensor is refused."""
    shapes = observation_shapes(make_config("quadrant"))
    model = ActorCritic(shapes)
    obs = random_observations(shapes, (6,), np.random.default_rng(0))
    tensors = {k: torch.from_numpy(v) for k, v in obs.items()}
    a = model.act(obs, deterministic=True)
    b = model.act(tensors, deterministic=True)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    tensors["lidar"] = tensors["lidar"][:, :5]
    with pytest.raises(ValueError, match="lidar"):
        model.act(tensors)
