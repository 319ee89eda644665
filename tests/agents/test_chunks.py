"""The chunk format: recording (host arrays and device tensors alike), validation, stacking
and the flat-array form."""

import numpy as np
import pytest
import torch

from hns_train.agents import (
    ActorCritic,
    Chunk,
    ChunkRecorder,
    PPOConfig,
    compute_gae,
    stack_chunks,
)
from hns_train.agents.pod import tensor_storage
from hns_train.agents.ppo import Rollout
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import random_observations, synthetic_chunk
from tests.tolerances import RECURSION, assert_close

SHAPES = observation_shapes(make_config("chase"))


def test_recorder_layout_and_stacking():
    rng = np.random.default_rng(0)
    model = ActorCritic(SHAPES, device="cpu")
    a = synthetic_chunk(model, 20, 3, 10, rng, episode_len=8, policy_version=4)
    b = synthetic_chunk(model, 20, 2, 10, rng, episode_len=8, policy_version=5)
    assert a.obs["lidar"].shape == (20, 3, 30) and a.actions.dtype == np.int64
    assert a.lstm_state.shape == (2, 3, 4, 256) and a.segment_len == 10
    assert a.truncated[7].all() and a.episode_start[8].all() and a.episode_start[0].all()
    assert (a.truncated_value[7] != 0).all()

    batch = stack_chunks([a, b])
    assert batch.batch_size == 5 and set(batch.obs) == set(model.layout.shapes)
    assert batch.lstm_state.shape == (2, 5, 4, 256)
    assert batch.policy_version.tolist() == [4, 4, 4, 5, 5]
    np.testing.assert_array_equal(batch.rewards[:, 3:], b.rewards)
    batch.validate()


def test_flat_arrays_round_trip():
    model = ActorCritic(SHAPES, device="cpu")
    chunk = synthetic_chunk(model, 10, 2, 10, np.random.default_rng(1))
    arrays = chunk.to_arrays()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    back = Chunk.from_arrays(arrays)
    for key, value in arrays.items():
        np.testing.assert_array_equal(back.to_arrays()[key], value)


def test_recorder_and_stacking_errors():
    with pytest.raises(ValueError, match="multiple of bptt_len"):
        ChunkRecorder(25, 10)
    model = ActorCritic(SHAPES, device="cpu")
    rng = np.random.default_rng(2)
    a = synthetic_chunk(model, 10, 2, 10, rng)
    b = synthetic_chunk(model, 20, 2, 10, rng)
    with pytest.raises(ValueError, match="different lengths"):
        stack_chunks([a, b])
    a.values = a.values[:, :1]
    with pytest.raises(ValueError, match=r"values must have shape \(10, 2\)"):
        a.validate()


def test_select_keeps_the_chosen_streams():
    model = ActorCritic(SHAPES, device="cpu")
    chunk = synthetic_chunk(model, 20, 4, 10, np.random.default_rng(3), episode_len=8)
    chunk.policy_version = np.array([3, 4, 5, 6])
    part = chunk.select(np.array([1, 3]))
    part.validate()
    assert part.batch_size == 2 and part.policy_version.tolist() == [4, 6]
    np.testing.assert_array_equal(part.obs["lidar"], chunk.obs["lidar"][:, [1, 3]])
    np.testing.assert_array_equal(part.lstm_state, chunk.lstm_state[:, [1, 3]])
    np.testing.assert_array_equal(part.bootstrap_value, chunk.bootstrap_value[[1, 3]])


def test_recorder_copies_each_step_once_and_never_reuses_a_finished_chunks_arrays():
    T, B, L, H = 4, 3, 2, 5
    rec = ChunkRecorder(T, L)
    rng = np.random.default_rng(3)

    def record():
        steps = []
        for t in range(T):
            step = dict(
                obs={"lidar": rng.standard_normal((B, 30)), "observation_self": np.ones((B, 10))},
                state=rng.standard_normal((B, 4, H)).astype(np.float32),
                episode_start=np.full(B, t == 0),
                actions=rng.integers(0, 11, (B, 5)),
                logp=rng.standard_normal(B).astype(np.float32),
                values=rng.standard_normal(B).astype(np.float32),
                rewards=np.full(B, float(t), np.float32),
            )
            rec.record_inputs(step["obs"], step["state"], step["episode_start"])
            rec.record_outputs(step["actions"], step["logp"], step["values"], step["rewards"])
            for v in (step["obs"]["lidar"], step["state"], step["actions"]):
                v += 1000  # the caller reuses its buffers: the recorder must have copied
            steps.append(step)
        return rec.finish(np.zeros(B), policy_version=7), steps

    first, steps = record()
    kept = first.to_arrays()
    kept = {k: v.copy() for k, v in kept.items()}
    second, _ = record()
    for k, v in first.to_arrays().items():
        np.testing.assert_array_equal(v, kept[k], err_msg=f"{k} changed by the next chunk")
    assert first.obs["lidar"].dtype == np.float32 and first.episode_start.dtype == bool
    for t, step in enumerate(steps):
        np.testing.assert_allclose(first.obs["lidar"][t], step["obs"]["lidar"] - 1000, rtol=1e-6)
        np.testing.assert_array_equal(first.actions[t], step["actions"] - 1000)
        np.testing.assert_array_equal(first.rewards[t], float(t))
    np.testing.assert_allclose(first.lstm_state[1], steps[L]["state"] - 1000, atol=1e-3)
    assert not np.shares_memory(first.obs["lidar"], second.obs["lidar"])
    rec.record_inputs({"lidar": steps[0]["obs"]["lidar"]}, steps[0]["state"], True)  # new chunk
    with pytest.raises(ValueError, match="observation keys"):
        rec.record_inputs(steps[1]["obs"], steps[1]["state"], False)


def reference_gae(rewards, values, cut, final, bootstrap, gamma, lam):
    """GAE written as its forward sums, stream by stream: A_t = sum_k (gamma lam)^k delta_t+k
    up to the step that ends the episode or the chunk."""
    T, B = rewards.shape
    adv = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            coef, k = 1.0, t
            while True:
                nv = final[k, b] if cut[k, b] else values[k + 1, b] if k + 1 < T else bootstrap[b]
                adv[t, b] += coef * (rewards[k, b] + gamma * nv - values[k, b])
                if cut[k, b] or k == T - 1:
                    break
                coef, k = coef * gamma * lam, k + 1
    return adv


@pytest.mark.numerics
def test_actor_and_pod_recordings_give_the_same_advantages():
    """One sequence of steps recorded as the actor does (host arrays, a `Chunk`) and as the pod
    does (tensors, episode ends by row index, a `Rollout`): identical fields, and the learner's
    GAE gives identical advantages and returns, equal to GAE's forward sums. Stream 0's episode
    ends mid-chunk and at the cut, stream 1's at the cut only, stream 2's mid-chunk only."""
    T, B, L, H = 6, 3, 2, 4
    rng = np.random.default_rng(4)
    ends = np.zeros((T, B), bool)
    ends[[2, 5, 5, 3], [0, 0, 1, 2]] = True
    rewards = rng.standard_normal((T, B)).astype(np.float32)
    values = rng.standard_normal((T, B)).astype(np.float32)
    final = rng.standard_normal((T, B)).astype(np.float32)
    bootstrap = np.array([1e6, 1e6, 0.5], np.float32)  # read for stream 2 only
    obs = random_observations(SHAPES, (T, B), rng)
    state = rng.standard_normal((T, B, 4, H)).astype(np.float32)
    starts = np.vstack([np.ones((1, B), bool), ends[:-1]])
    actions = rng.integers(0, 2, (T, B, 5))

    actor = ChunkRecorder(T, L)
    pod = ChunkRecorder(T, L, new_array=tensor_storage("cpu"))
    for t in range(T):
        actor.record_inputs({k: v[t] for k, v in obs.items()}, state[t], starts[t])
        actor.record_outputs(actions[t], np.zeros(B, np.float32), values[t], rewards[t])
        if ends[t].any():
            actor.end_episodes(final[t][ends[t]], np.flatnonzero(ends[t]))
        pod.record_inputs(
            {k: torch.as_tensor(v[t]) for k, v in obs.items()},
            torch.as_tensor(state[t]),
            torch.as_tensor(starts[t]),
        )
        pod.record_outputs(
            *map(torch.as_tensor, (actions[t], np.zeros(B, np.float32), values[t], rewards[t]))
        )
        rows = torch.as_tensor(np.flatnonzero(ends[t]))
        if len(rows):
            pod.end_episodes(torch.as_tensor(final[t]).index_select(0, rows), rows)
    chunk = actor.finish(bootstrap, policy_version=3)
    rollout = Rollout(**pod.take(torch.as_tensor(bootstrap)))

    model = ActorCritic(SHAPES, device="cpu")
    from_chunk = Rollout.from_chunk(chunk, model)
    for name in ("actions", "values", "rewards", "episode_start", "truncated", "lstm_state"):
        assert torch.equal(getattr(from_chunk, name), getattr(rollout, name)), name
    cfg = PPOConfig()
    a_chunk, r_chunk = compute_gae(*gae_inputs(from_chunk), cfg.gamma, cfg.gae_lambda)
    a_pod, r_pod = compute_gae(*gae_inputs(rollout), cfg.gamma, cfg.gae_lambda)
    assert torch.equal(a_chunk, a_pod) and torch.equal(r_chunk, r_pod)
    expected = reference_gae(rewards, values, ends, final, bootstrap, cfg.gamma, cfg.gae_lambda)
    assert_close(a_pod, expected, RECURSION, "advantages")  # float32 against the reference
    assert_close(r_pod, expected + values, RECURSION, "returns")


def gae_inputs(batch: Rollout):
    return (
        batch.rewards,
        batch.values,
        batch.truncated,
        batch.truncated_value,
        batch.bootstrap_value,
    )
