"""The chunk format: recording, validation, stacking and the flat-array form."""

import numpy as np
import pytest

from hns_train.agents import (
    ActorCritic,
    Chunk,
    ChunkRecorder,
    obs_shapes,
    stack_chunks,
    synthetic_chunk,
)

SHAPES = obs_shapes(n_other_agents=1, n_boxes=0, n_ramps=0)


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
