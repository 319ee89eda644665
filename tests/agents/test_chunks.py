"""The chunk format: recording, validation, stacking and the flat-array form."""

import numpy as np
import pytest

from hns_train.agents import (
    ActorCritic,
    Chunk,
    ChunkRecorder,
    stack_chunks,
    synthetic_chunk,
)
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes

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
    with pytest.raises(ValueError, match=r"values must have shape \(T, B\)"):
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
                truncated=np.zeros(B, bool),
            )
            rec.add(**step)
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
    rec.add(**{**steps[0], "obs": {"lidar": steps[0]["obs"]["lidar"]}})  # a new chunk starts
    with pytest.raises(ValueError, match="observation keys"):
        rec.add(**steps[1])
