"""Message sizes computed from a config, checked against pipeline.max_message_mb at start, and
compared with the sizes of real encoded messages."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hns_train.agents.chunks import ChunkRecorder
from hns_train.agents.opponents import LATEST
from hns_train.agents.policy import ActorCritic
from hns_train.config import ConfigError, load_config
from hns_train.distributed.contract import state_dict_to_arrays
from hns_train.distributed.controller import Controller
from hns_train.distributed.message_sizes import (
    check_message_sizes,
    message_sizes,
)
from hns_train.distributed.wire import encode
from hns_train.envs.contract import observation_shapes
from hns_train.envs.vector import VectorGame


def nbytes(frames: list) -> int:
    return sum(len(f) if isinstance(f, bytes) else f.nbytes for f in frames)


def network(cfg) -> ActorCritic:
    """The run's network, as the controller builds it."""
    return ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network, device="cpu")


def checked(cfg):
    return check_message_sizes(cfg, network(cfg))


def sizes_by_kind(cfg) -> dict[str, int]:
    starts = {
        "parameters": "parameters",
        "one column of a sample chunk": "column",
        "a sample chunk": "chunk",
        "an inference request": "request",
        "an inference reply": "reply",
    }
    out = {}
    for m in message_sizes(cfg, network(cfg)):
        out[next(kind for start, kind in starts.items() if m.name.startswith(start))] = m.nbytes
    return out


def test_the_chase_config_with_a_1_mb_cap_fails_at_start_naming_the_parameters(tmp_path):
    cfg = load_config("chase", [f"runs_dir={tmp_path}", "name=capped", "pipeline.max_message_mb=1"])
    with pytest.raises(ConfigError) as err:
        Controller(cfg)
    text = str(err.value)
    assert "parameters" in text and "pipeline.max_message_mb" in text
    assert "pipeline.max_message_mb to at least 6" in text
    assert "5,9" in text  # its size in bytes (5.9 MB for the paper's network)
    assert not (tmp_path / "capped").exists()  # raised before the run started anything


def test_a_chunk_over_the_cap_names_the_settings_that_make_it_smaller():
    # a small network (its parameters fit in 1 MB), but 256 worlds x 2 agents x 20 steps a chunk
    cfg = load_config(
        "smoke",
        ["pipeline.max_message_mb=1", "pipeline.envs_per_actor=256", "pipeline.ring_size=1"],
    )
    with pytest.raises(ConfigError) as err:
        checked(cfg)
    text = str(err.value)
    assert "sample chunk" in text and "512 agent columns x 20 steps" in text
    for setting in ("pipeline.envs_per_actor", "pipeline.ring_size", "pipeline.chunk_len"):
        assert setting in text
    assert "parameters" not in text  # only what is too large is named
    # four groups of 64 worlds: each chunk is a quarter and fits
    checked(
        load_config(
            "smoke",
            ["pipeline.max_message_mb=1", "pipeline.envs_per_actor=256", "pipeline.ring_size=4"],
        )
    )


def test_the_default_and_shipped_configs_pass():
    for name in ("default", "chase", "quadrant", "randomwalls", "smoke"):
        cfg = load_config(name)
        sizes = checked(cfg)
        assert all(0 < m.nbytes <= cfg.pipeline.max_message_mb << 20 for m in sizes)


def test_inference_messages_count_only_when_they_travel_on_the_wire():
    assert set(sizes_by_kind(load_config("smoke"))) == {"parameters", "chunk"}
    wire = sizes_by_kind(load_config("smoke", ["pipeline.shared_memory=false"]))
    assert set(wire) == {"parameters", "chunk", "request", "reply"}


def within(computed: int, real: int, share: float = 0.03) -> bool:
    """computed is an upper bound of real, at most `share` above it."""
    return real <= computed <= real * (1 + share)


@pytest.mark.parametrize("name", ["chase", "smoke", "default"])
def test_parameter_size_agrees_with_a_real_parameter_message(name):
    cfg = load_config(name)
    arrays = state_dict_to_arrays(network(cfg).state_dict())
    meta = {"version": 12345, "publisher": os.urandom(8).hex()}
    real = nbytes(encode("params", arrays, meta))
    assert within(sizes_by_kind(cfg)["parameters"], real), (sizes_by_kind(cfg), real)


def real_chunk(cfg, worlds: int) -> dict[str, np.ndarray]:
    """A chunk of one actor group as the C actor ships it: the game's own observations, the
    learning rows of the pool's draw (every row here: both teams learn)."""
    p, net = cfg.pipeline, cfg.agent.network
    game = VectorGame(cfg.game_config(), worlds, seed=0)
    obs = game.reset()
    rows = worlds * game.n_agents
    rng = np.random.default_rng(0)
    recorder = ChunkRecorder(p.chunk_len, cfg.agent.ppo.bptt_len)
    for _ in range(p.chunk_len):
        actions = rng.integers(0, game.action_nvec, size=(worlds, game.n_agents, 5))
        recorder.record_inputs(
            {k: v.reshape(rows, *v.shape[2:]) for k, v in obs.items()},
            np.zeros((rows, 4, net.lstm_dim), np.float32),
            np.zeros(rows, bool),
        )
        zeros = np.zeros(rows, np.float32)
        recorder.record_outputs(actions.reshape(rows, 5), zeros, zeros, zeros)
        obs = game.step(actions).obs
    chunk = recorder.finish(np.zeros(rows, np.float32), 7)
    codes = np.full(rows, LATEST)
    keep = np.flatnonzero(codes == LATEST)
    return chunk.select(keep).to_arrays()


def test_chunk_size_agrees_with_a_real_chunk_message():
    cfg = load_config("smoke", ["pipeline.envs_per_actor=8", "pipeline.ring_size=2"])
    real = nbytes(encode("chunk", real_chunk(cfg, worlds=4), {"actor": "actor0"}))
    assert within(sizes_by_kind(cfg)["chunk"], real), (sizes_by_kind(cfg), real)


def test_chase_chunks_count_only_the_learning_seekers():
    # chase: the hider is always the random opponent, so a group ships its seekers' columns only
    cfg = load_config("chase")
    worlds = cfg.pipeline.envs_per_actor // cfg.pipeline.ring_size
    text = next(m.name for m in message_sizes(cfg, network(cfg)) if "chunk" in m.name)
    assert f"{worlds} agent columns" in text
    assert (
        cfg.pool.learning_agents(1, 1) == 1
        and load_config("default").pool.learning_agents(2, 2) == 4
    )


def test_inference_sizes_agree_with_real_request_and_reply_messages():
    cfg = load_config("default", ["pipeline.shared_memory=false"])  # 8 worlds x 4 agents
    sizes = sizes_by_kind(cfg)
    p, lstm = cfg.pipeline, cfg.agent.network.lstm_dim
    worlds = p.envs_per_actor // p.ring_size
    game = VectorGame(cfg.game_config(), worlds, seed=0)
    rows = worlds * game.n_agents
    obs = {f"obs/{k}": v.reshape(rows, *v.shape[2:]) for k, v in game.reset().items()}
    state = np.zeros((rows, 4, lstm), np.float32)
    request = dict(obs, state=state, episode_start=np.ones(rows, bool), code=np.zeros(rows))
    request["code"] = request["code"].astype(np.int64)
    meta = {"group": 1, "seq": 123456, "kind": "act"}
    real = nbytes(encode("act", request, meta))
    assert within(sizes["request"], real), (sizes, real)
    reply = {
        "actions": np.zeros((rows, 5), np.int64),
        "logp": np.zeros(rows, np.float32),
        "values": np.zeros(rows, np.float32),
        "state": state,
    }
    real = nbytes(encode("act_result", reply, {**meta, "version": 3}))
    assert within(sizes["reply"], real), (sizes, real)


def test_a_pod_publishes_parameters_and_sends_no_chunks():
    cfg = load_config("smoke", ["pipeline.backend=pod", "pipeline.max_message_mb=1"])
    assert set(sizes_by_kind(cfg)) == {"parameters"}
    checked(cfg)
    paper = load_config("chase", ["pipeline.backend=pod", "pipeline.max_message_mb=1"])
    with pytest.raises(ConfigError, match="parameters"):
        checked(paper)
