"""LSTM state handling: resets at episode starts, step-by-step == sequence, chunk replay."""

import numpy as np
import pytest
import torch

from hns_train.agents import PPO, ActorCritic, PPOConfig
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import random_observations as random_obs
from tests.synthetic import synthetic_chunk
from tests.tolerances import FORWARD, assert_close

pytestmark = pytest.mark.numerics

SHAPES = observation_shapes(make_config("quadrant"))


def sequence(model, obs_seq, starts, state=None):
    """Run (T, B) observations as one sequence: logits (T, B, 37), values (T, B), final state."""
    tensors = model.obs_to_tensors(obs_seq, 2)
    steps, batch = starts.shape
    state = torch.zeros(batch, 4, model.config.lstm_dim) if state is None else state
    with torch.no_grad():
        return model.forward_sequence(tensors, state, torch.as_tensor(starts))


def test_step_by_step_equals_sequence():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = ActorCritic(SHAPES, device="cpu")
    steps, batch = 12, 5
    obs_seq = random_obs(SHAPES, (steps, batch), rng)
    starts = rng.random((steps, batch)) < 0.2
    starts[0] = True

    state = model.initial_state(batch)
    per_step = []
    for t in range(steps):
        out = model.act({k: v[t] for k, v in obs_seq.items()}, state, episode_start=starts[t])
        per_step.append(out)
        state = out.state

    logits, values, final_state = sequence(model, obs_seq, starts)
    actions = torch.as_tensor(np.stack([o.actions for o in per_step]))
    logp, _ = model.log_prob_entropy(logits, actions)
    # One sequence call and T single-step calls sum in different orders (FORWARD).
    assert_close(logp, np.stack([o.logp for o in per_step]), FORWARD, "logp")
    values = model.denormalize_value(values)
    assert_close(values, np.stack([o.values for o in per_step]), FORWARD, "values")
    assert_close(final_state, state, FORWARD, "state")


def test_state_resets_at_episode_start_inside_a_sequence():
    rng = np.random.default_rng(1)
    model = ActorCritic(SHAPES, device="cpu")
    torch.nn.init.normal_(model.value_net.head.weight)  # make the value sensitive to the state
    steps, batch, boundary = 10, 4, 6
    obs_seq = random_obs(SHAPES, (steps, batch), rng)
    starts = np.zeros((steps, batch), dtype=bool)
    starts[0] = starts[boundary] = True
    _, values, _ = sequence(model, obs_seq, starts)

    # The second episode alone, from a zero state, gives the same outputs...
    tail = {k: v[boundary:] for k, v in obs_seq.items()}
    _, tail_values, _ = sequence(model, tail, starts[boundary:])
    assert_close(values[boundary:], tail_values, FORWARD, "values after the reset")

    # ...and a non-zero incoming state is discarded at the boundary, but not elsewhere.
    noisy = torch.randn(batch, 4, model.config.lstm_dim)
    _, tail_noisy, _ = sequence(model, tail, starts[boundary:], state=noisy)
    assert_close(tail_noisy, tail_values, FORWARD, "values from a discarded state")
    no_reset = starts[boundary:].copy()
    no_reset[0] = False
    _, carried, _ = sequence(model, tail, no_reset, state=noisy)
    assert (carried[0] - tail_values[0]).abs().min() > 1e-6


def test_chunk_replay_from_stored_states_reproduces_rollout():
    """Truncated BPTT restarts every 10-step segment from the state stored at rollout time;
    with unchanged parameters this must reproduce the rollout's log-probs exactly."""
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    model = ActorCritic(SHAPES, device="cpu")
    # Episodes of 7 steps, chunk starting 4 steps in: starts at chunk steps 3, 10, 17, 24, i.e.
    # inside segments and on the first step of the second segment.
    chunk = synthetic_chunk(model, 30, 4, 10, rng, episode_len=7, first_step=4)
    assert chunk.lstm_state.shape == (3, 4, 4, 256) and chunk.episode_start.sum() == 4 * 4
    assert np.abs(chunk.lstm_state[1:]).sum() > 0
    stats = PPO(model, PPOConfig()).update(chunk)  # one step: its loss is taken before it
    assert abs(stats["approx_kl"]) < 1e-6 and stats["clip_fraction"] == 0.0
