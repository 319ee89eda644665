"""The network as computed (networks.py: few, large operations) against the same math written
out the plain way, on the same parameters: acting, a T-step sequence with episode starts in the
middle, and gradients; the parameter names and shapes checkpoints hold; and how many aten
operations one act and one PPO update dispatch."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Categorical

from hns_train.agents import PPO, ActorCritic, PPOConfig
from hns_train.agents.networks import EntityNetwork
from hns_train.agents.policy import PAD_LOGIT, _sample_actions
from hns_train.agents.ppo import Rollout, compute_gae
from hns_train.envs.config import make_config
from hns_train.envs.contract import LIDAR_KEY, SELF_KEY, observation_shapes
from tests.aten_ops import AtenOpCounter
from tests.synthetic import random_observations, synthetic_chunk
from tests.tolerances import REFERENCE
from tests.tolerances import assert_close as assert_within

PRESETS = ("quadrant", "randomwalls", "chase")

pytestmark = pytest.mark.numerics


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert_within(actual, expected, REFERENCE, what)


def reference_forward(net: EntityNetwork, obs, state, episode_start):
    """The network's description (networks.py's docstring) in plain operations, one step and
    one entity type at a time, on `net`'s own parameters."""
    steps, n = episode_start.shape
    flat = {k: v.flatten(0, 1) for k, v in obs.items()}
    self_vec = flat[SELF_KEY]
    if net.lidar is not None:
        conv = net.lidar.conv
        pad = conv.kernel_size[0] // 2
        ring = F.pad(flat[LIDAR_KEY].unsqueeze(1), (pad, pad), mode="circular")
        self_vec = torch.cat(
            [self_vec, F.relu(F.conv1d(ring, conv.weight, conv.bias)).flatten(1)], 1
        )
    tokens = [F.relu(net.self_embed(self_vec)).unsqueeze(1)]
    masks = [torch.ones(len(self_vec), 1, dtype=torch.bool)]
    for embed, slot, mask_key in zip(
        net.entity_embed, net.layout.entities, net.mask_keys, strict=True
    ):
        rows = flat[slot.kind.key]
        both = torch.cat([rows, self_vec.unsqueeze(1).expand(-1, rows.shape[1], -1)], -1)
        tokens.append(F.relu(embed.dense(both)))
        masks.append(flat[mask_key] > 0.5)
    x, valid = torch.cat(tokens, 1), torch.cat(masks, 1)
    att = net.attention
    rows, length, dim = x.shape
    q, k, v = att.qkv(att.norm(x)).view(rows, length, 3, att.heads, -1).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-1, -2)) * att.scale
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(rows, length, dim)
    out = x + att.out(attended)
    entity_valid = valid[:, 1:].unsqueeze(-1)
    pooled = torch.where(entity_valid, out[:, 1:], 0.0).sum(1) / entity_valid.sum(1).clamp(min=1)
    features = F.relu(net.dense(torch.cat([out[:, 0], pooled], -1))).view(steps, n, -1)
    h, c = state
    hidden = []
    for t in range(steps):
        keep = (~episode_start[t]).unsqueeze(-1).float()
        h, c = net.lstm(features[t], (h * keep, c * keep))
        hidden.append(h)
    return net.head(net.lstm_norm(torch.stack(hidden))), (h, c)


def model_and_inputs(preset: str, steps: int, batch: int, seed: int):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    shapes = observation_shapes(make_config(preset))
    model = ActorCritic(shapes, device="cpu")
    # heads away from their near-zero start, so the trunk's errors reach the outputs at scale
    for net in (model.policy_net, model.value_net):
        torch.nn.init.normal_(net.head.weight, std=0.3)
    raw = random_observations(shapes, (steps, batch), rng)
    obs = model.obs_norm(model.obs_to_tensors(raw, 2))
    starts = torch.as_tensor(rng.random((steps, batch)) < 0.2)
    starts[steps // 2, : batch // 2] = True  # episodes that start in the middle of the sequence
    state = torch.randn(batch, 4, model.config.lstm_dim)
    return model, shapes, raw, obs, starts, state


@pytest.mark.parametrize(
    ("preset", "steps"),
    # one step with a gradient runs the sequence's loop (acting's one product over [x ‖ h] is
    # `test_act_equals_the_plain_math_with_resets`)
    [(preset, 10) for preset in PRESETS] + [("quadrant", 1)],
)
def test_sequence_forward_and_gradients_equal_the_plain_math(preset, steps):
    batch = 12
    model, _, _, obs, starts, state = model_and_inputs(preset, steps, batch, seed=1)
    for net, first in ((model.policy_net, 0), (model.value_net, 2)):
        pair = (state[:, first].requires_grad_(), state[:, first + 1].requires_grad_())
        out, (h, c) = net(obs, pair, starts)
        ref, (ref_h, ref_c) = reference_forward(net, obs, pair, starts)
        assert_close(out, ref, "outputs")
        assert_close(h, ref_h, "final h")
        assert_close(c, ref_c, "final c")

        # the LSTM's own backward (networks.LSTMRecurrence) against autograd's through every
        # output, the final state included, into every parameter and the initial state
        cotangents = [torch.randn_like(x) for x in (out, h, c)]
        inputs = {**dict(net.named_parameters()), "initial h": pair[0], "initial c": pair[1]}

        def loss(outputs, weights=cotangents):
            return sum((x * w).sum() for x, w in zip(outputs, weights, strict=True))

        grads = torch.autograd.grad(loss((out, h, c)), list(inputs.values()))
        ref_grads = torch.autograd.grad(loss((ref, ref_h, ref_c)), list(inputs.values()))
        for name, grad, ref_grad in zip(inputs, grads, ref_grads, strict=True):
            assert_close(grad, ref_grad, f"gradient of {name}")


def test_act_equals_the_plain_math_with_resets():
    batch = 16
    model, _, raw, obs, starts, state = model_and_inputs("quadrant", 1, batch, seed=2)
    resets = (starts[0] | (torch.arange(batch) < 5)).unsqueeze(0)  # some rows start episodes
    out = model.act_tensors({k: v[0] for k, v in raw.items()}, state, resets[0], deterministic=True)
    logits, (ph, pc) = reference_forward(model.policy_net, obs, (state[:, 0], state[:, 1]), resets)
    value, (vh, vc) = reference_forward(model.value_net, obs, (state[:, 2], state[:, 3]), resets)
    logp, _ = model.log_prob_entropy(logits[0], out.actions)
    assert_close(out.logp, logp, "log-probs")
    assert_close(out.values, model.denormalize_value(value[0, :, 0]), "values")
    assert_close(out.state, torch.stack([ph, pc, vh, vc], 1), "state")
    heads = model.split_logits(logits[0])
    assert torch.equal(out.actions, torch.stack([h.argmax(-1) for h in heads], -1))


def test_an_act_returns_tensors_a_caller_may_write_to():
    """An act's networks run in inference mode; what it returns is made outside it: ordinary
    tensors, which a pod writes to in place (an inference tensor refuses that)."""
    model, _, raw, _, starts, state = model_and_inputs("quadrant", 1, 8, seed=3)
    for value in (True, False):
        out = model.act_tensors({k: v[0] for k, v in raw.items()}, state, starts[0], value=value)
        for name, tensor in zip(out._fields, out, strict=True):
            assert not tensor.is_inference(), name
            tensor.zero_()


def test_weights_kept_for_acting_follow_every_write():
    """Acting keeps what it derives from the weights between calls (networks.kept): after an
    update (fused Adam, whose kernel does not count its writes), a loaded state and a round
    trip through half precision (`.to` keeps the parameter objects and their counters), an
    act equals a fresh model's on the same state; a copy acts as its original."""
    model, shapes, raw, _, starts, state = model_and_inputs("quadrant", 1, 8, seed=5)
    step = {k: v[0] for k, v in raw.items()}

    def act(m):
        return m.act_tensors(step, state, starts[0], deterministic=True)

    def assert_same(a, b, what):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y), what

    def fresh():
        twin = ActorCritic(shapes, device="cpu")
        twin.load_state_dict(model.state_dict())
        return twin

    before = act(model)  # derives and keeps
    ppo = PPO(model, PPOConfig(epochs=1, minibatches=1))
    assert all(group["fused"] for group in ppo.optimizer.param_groups)
    rng = np.random.default_rng(5)
    ppo.update(Rollout.from_chunk(synthetic_chunk(model, 20, 4, 10, rng, episode_len=20), model))
    after = act(model)
    assert not torch.equal(before.values, after.values)
    assert_same(after, act(fresh()), "after an update")
    torch.manual_seed(6)
    other = ActorCritic(shapes, device="cpu")
    model.load_state_dict(other.state_dict())
    assert_same(act(model), act(other), "after a loaded state")
    model.half().float()  # every weight rounded to half precision
    assert not torch.equal(model.policy_net.lstm.weight_ih, other.policy_net.lstm.weight_ih)
    assert_same(act(model), act(fresh()), "after a conversion")
    assert_same(act(copy.deepcopy(model)), act(model), "a copy")


def test_checkpoint_names_and_shapes_are_the_layers_own():
    """Checkpoints written before this computation load after it: the state_dict holds the
    layers' parameters under their names and shapes and nothing the computation adds."""
    model = ActorCritic(observation_shapes(make_config("quadrant")), device="cpu")
    state = model.state_dict()
    net = {
        "lidar.conv.weight": (9, 1, 3),
        "lidar.conv.bias": (9,),
        "self_embed.weight": (128, 280),
        "self_embed.bias": (128,),
        "entity_embed.0.dense.weight": (128, 290),
        "entity_embed.0.dense.bias": (128,),
        "entity_embed.1.dense.weight": (128, 292),
        "entity_embed.1.dense.bias": (128,),
        "entity_embed.2.dense.weight": (128, 289),
        "entity_embed.2.dense.bias": (128,),
        "attention.norm.weight": (128,),
        "attention.norm.bias": (128,),
        "attention.qkv.weight": (384, 128),
        "attention.qkv.bias": (384,),
        "attention.out.weight": (128, 128),
        "attention.out.bias": (128,),
        "dense.weight": (256, 256),
        "dense.bias": (256,),
        "lstm.weight_ih": (1024, 256),
        "lstm.weight_hh": (1024, 256),
        "lstm.bias_ih": (1024,),
        "lstm.bias_hh": (1024,),
        "lstm_norm.weight": (256,),
        "lstm_norm.bias": (256,),
    }
    for prefix, outputs in (("policy_net.", 37), ("value_net.", 1)):
        expected = {**net, "head.weight": (outputs, 256), "head.bias": (outputs,)}
        got = {k[len(prefix) :]: tuple(v.shape) for k, v in state.items() if k.startswith(prefix)}
        assert got == expected

    fresh = ActorCritic(observation_shapes(make_config("quadrant")), device="cpu")
    fresh.load_state_dict(state)  # strict: no key missing or unexpected


def test_gae_keeps_its_float64_running_sum():
    """Advantages over 400 steps with γλ close to 1 against a float64 loop in numpy: the
    running sum stays in float64 (a float32 one drifts by ~1e-4 here)."""
    rng = np.random.default_rng(5)
    steps, batch, gamma, lam = 400, 3, 0.999, 0.999
    rewards = rng.normal(size=(steps, batch)).astype(np.float32)
    values = rng.normal(size=(steps, batch)).astype(np.float32)
    truncated = np.zeros((steps, batch), bool)
    truncated[250, 0] = True
    final = rng.normal(size=(steps, batch)).astype(np.float32)
    bootstrap = rng.normal(size=batch).astype(np.float32)
    adv, _ = compute_gae(rewards, values, truncated, final, bootstrap, gamma, lam)
    expected = np.zeros((steps, batch))
    running, following = np.zeros(batch), bootstrap.astype(np.float64)
    for t in reversed(range(steps)):
        nxt = np.where(truncated[t], final[t], following)
        delta = rewards[t] + gamma * nxt - values[t]
        running = delta + gamma * lam * np.where(truncated[t], 0.0, running)
        expected[t], following = running, values[t]
    np.testing.assert_allclose(adv.numpy(), expected.astype(np.float32), rtol=1e-6, atol=1e-6)


def test_heads_side_by_side_equal_each_head_alone():
    """Log-probs, entropies and their gradients from the padded (B, 5, 11) softmax against one
    `Categorical` per head; sampled actions stay inside their heads, at the heads' rates."""
    model = ActorCritic(observation_shapes(make_config("chase")), device="cpu")
    torch.manual_seed(3)
    logits = (torch.randn(6, 9, sum(model.action_sizes)) * 4).requires_grad_(True)
    actions = torch.stack(
        [torch.randint(0, n, (6, 9)) for n in model.action_sizes], -1
    )  # (6, 9, 5)
    logp, entropy = model.log_prob_entropy(logits, actions)
    heads = [Categorical(logits=h) for h in model.split_logits(logits)]
    ref_logp = sum(d.log_prob(actions[..., i]) for i, d in enumerate(heads))
    ref_entropy = sum(d.entropy() for d in heads)
    assert_close(logp, ref_logp, "log-probs")
    assert_close(entropy, ref_entropy, "entropies")
    cotangent = torch.randn(2, 6, 9)
    (grad,) = torch.autograd.grad((logp * cotangent[0] + entropy * cotangent[1]).sum(), logits)
    (ref_grad,) = torch.autograd.grad(
        (ref_logp * cotangent[0] + ref_entropy * cotangent[1]).sum(), logits
    )
    assert torch.isfinite(grad).all()
    assert_close(grad, ref_grad, "gradients")

    # acting with every row's logits the same (the head's bias: its weight zeroed), each
    # head's sampled frequencies within 5 standard errors of its probabilities
    rows = 8_000
    one = logits.detach()[0, 0]
    with torch.no_grad():
        model.policy_net.head.weight.zero_()
        model.policy_net.head.bias.copy_(one)
    shapes = observation_shapes(make_config("chase"))
    obs = random_observations(shapes, (rows,), np.random.default_rng(3))
    sampled = torch.as_tensor(model.act(obs).actions)
    for h, p in enumerate(model.split_logits(one)):
        p = p.softmax(-1).double()
        assert sampled[:, h].max() < len(p)  # never a padding column
        freq = torch.bincount(sampled[:, h], minlength=len(p)).double() / rows
        se = (p * (1 - p) / rows).sqrt()
        assert ((freq - p).abs() <= 5 * se + 1e-4).all(), (h, freq, p)


@pytest.mark.parametrize("draw", [0.0, 1.0 - 2.0**-24])  # torch.rand's least and greatest
def test_extreme_draws_pick_only_possible_actions(monkeypatch, draw):
    """A head's first action of probability 0 (its logit at PAD_LOGIT, exp exactly 0) is never
    drawn by a uniform of 0, and its padding never by the greatest uniform below 1."""
    model = ActorCritic(observation_shapes(make_config("chase")), device="cpu")
    logits = torch.randn(64, sum(model.action_sizes))
    starts = np.cumsum((0,) + model.action_sizes[:-1])
    logits[:, starts] = PAD_LOGIT  # every head's first action impossible
    log_probs = model.head_log_probs(logits)
    monkeypatch.setattr(torch, "rand_like", lambda x: torch.full_like(x, draw))
    actions = _sample_actions(log_probs)
    sizes = torch.tensor(model.action_sizes)
    if draw == 0.0:
        assert (actions == 1).all()  # the first possible action
    else:
        assert (actions == sizes - 1).all()  # the last real action, never the padding


def test_finite_flags_a_single_bad_element():
    """In a weight, a float64 normaliser statistic and an Adam moment: every kind of tensor the
    check covers."""
    model = ActorCritic(observation_shapes(make_config("chase")), device="cpu")
    ppo = PPO(model)
    rng = np.random.default_rng(0)
    ppo.update(Rollout.from_chunk(synthetic_chunk(model, 20, 4, 10, rng, episode_len=20), model))
    assert ppo.finite().item() == 1.0
    moments = ppo.optimizer.state[model.value_net.lstm.weight_hh]
    for tensor in (
        model.value_net.lstm.weight_hh,
        model.obs_norm.stats[LIDAR_KEY].biased_sq,
        moments["exp_avg_sq"],
    ):
        flat = tensor.view(-1)
        for bad in (float("nan"), float("inf"), float("-inf")):
            with torch.no_grad():
                kept = flat[7].item()
                flat[7] = bad
                assert ppo.finite().item() == 0.0, (tensor.shape, bad)
                flat[7] = kept
    assert ppo.finite().item() == 1.0


def test_act_and_update_dispatch_few_operations():
    """Operation counts are fixed by the code, not the machine. Before the network was
    computed in few operations an act dispatched 483 aten operations and this update (quadrant,
    1 epoch x 1 minibatch, 20 steps) 4,821; after, 421 and 3,102; with the finiteness check
    in one multi-tensor pass (it took two operations per tensor), 2,338 for this update; with
    the five action heads as one padded softmax, 359 and 2,241; with the attention block read
    out at two rows per agent (5/7 of the out product's FLOPs saved for a few small
    operations), 391 and 2,318; with the LSTM's step loop under a backward of its own (a
    step's gradient in one product and six elementwise operations, where autograd replayed
    about twenty), 395 and 1,994; with the attention scores and the heads' softmax laid out
    with the reduced axis outermost (a product and an add where `baddbmm` was, and the layouts'
    views), an act that keeps the weights it derives and draws one uniform per head, 345 and
    2,004; with acting's LSTM step as one product over [x ‖ h], 327 and 2,004; with tanh
    as 2σ(2x) - 1 (three more operations per LSTM step, together faster than torch's tanh)
    and an act's networks in inference mode, 274 and 2,070 (in inference mode a composite
    operation such as `linear` reaches the counter whole, not as its parts: most of the
    act's drop is in what is counted, not in what runs)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    shapes = observation_shapes(make_config("quadrant"))
    model = ActorCritic(shapes, device="cpu")
    obs = {k: torch.as_tensor(v) for k, v in random_observations(shapes, (8,), rng).items()}
    state, starts = torch.zeros(8, 4, 256), torch.zeros(8, dtype=torch.bool)
    model.act_tensors(obs, state, starts)
    with AtenOpCounter() as act_ops:
        model.act_tensors(obs, state, starts)
    rollout = Rollout.from_chunk(synthetic_chunk(model, 20, 4, 10, rng, episode_len=20), model)
    ppo = PPO(model, PPOConfig(epochs=1, minibatches=1))
    ppo.update(rollout)
    with AtenOpCounter() as update_ops:
        ppo.update(rollout)
    act, update = act_ops.total, update_ops.total
    print(f"aten operations: act {act}, update {update}")
    assert act <= 280
    assert update <= 2080
