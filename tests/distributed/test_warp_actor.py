"""`pipeline.backend=warp`: actors that simulate on MuJoCo Warp and run the policy themselves.

A real serial run on the smoke config (chase, 4 worlds): the Warp actor takes the trainer's
parameters from the parameter stream, acts, and its chunks pass the trainer's checks and train
it to the stop version, with checkpoints and episode statistics, and no policy worker is
started. A second run with staggered worlds (episodes ending in different steps) and a 1 MB
message cap: each chunk goes out as several messages, all accepted. `split_columns` itself is
checked on a synthetic chunk against the wire encoder and the trainer's chunk contract. Needs
the optional extra `warp`; the chase kernels compile on the first run of a machine (about
20-40 s on 2 cores, cached after that), hence `slow`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("mujoco_warp")

from hns_train.agents import ActorCritic, NetworkConfig, obs_shapes  # noqa: E402
from hns_train.agents.checkpoint import CheckpointDir  # noqa: E402
from hns_train.agents.synthetic import synthetic_chunk  # noqa: E402
from hns_train.config import CONFIG_DIR, load_config  # noqa: E402
from hns_train.distributed.contract import check_chunk  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402
from hns_train.distributed.warp_actor import split_columns  # noqa: E402
from hns_train.distributed.wire import decode, encode  # noqa: E402

pytestmark = pytest.mark.slow


def test_serial_run_with_warp_actors_trains_to_the_stop_version(tmp_path):
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [f"runs_dir={tmp_path}", "name=warp", "pipeline.backend=warp", "stop.versions=2"],
    )
    controller = Controller(cfg)
    assert [s.kind for s in controller.specs()].count("policy") == 0
    summary = controller.run()
    assert summary.reason == "reached stop.versions=2"
    assert summary.version >= 2 and summary.frames > 0 and summary.episodes > 0
    run = tmp_path / "warp"
    assert CheckpointDir(run / "checkpoints").latest() is not None
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    train = [r for r in records if r["kind"] == "train"]
    assert train and "loss/approx_kl" in train[-1]
    assert any("episode/seeker_return" in r for r in train)
    assert train[-1].get("env/physics_warnings", 0) == 0


def _size(frames) -> int:
    return sum(memoryview(f).nbytes for f in frames)


def test_split_columns_keeps_every_message_under_the_cap_and_the_contract():
    net = NetworkConfig(embed_dim=32, attention_heads=2, dense_dim=32, lstm_dim=32)
    model = ActorCritic(obs_shapes(), net, device="cpu")
    rng = np.random.default_rng(0)
    chunk = synthetic_chunk(model, 20, 40, 10, rng, episode_len=7)
    columns = np.flatnonzero(rng.random(40) < 0.7)
    whole = _size(encode("chunk", chunk.select(columns).to_arrays()))
    cap = whole // 3
    parts = split_columns(chunk, columns, cap)
    assert len(parts) >= 3
    got = []
    for arrays in parts:
        frames = encode("chunk", arrays, {"actor": "actor0"})
        assert _size(frames) <= cap
        message = decode([bytes(f) for f in frames])
        part = check_chunk(
            message.arrays,
            model.layout,
            chunk_len=20,
            bptt_len=10,
            lstm_dim=32,
            action_sizes=[11, 11, 11, 2, 2],
        )
        got.append(part.actions)
    np.testing.assert_array_equal(np.concatenate(got, axis=1), chunk.actions[:, columns])
    assert len(split_columns(chunk, np.arange(40), 1 << 30)) == 1
    assert split_columns(chunk, columns[:0], cap) == []
    with pytest.raises(ValueError, match="max_message_mb"):
        split_columns(chunk, columns, 1000)


def test_staggered_warp_actor_splits_chunks_under_a_small_message_cap(tmp_path):
    """64 worlds x 2 agents x 60 steps of chase: about 4 MB of rows per chunk, so a 1 MB cap
    makes at least 4 messages of each; worlds start staggered, so episodes end in different
    steps (truncation, final values and LSTM resets per world)."""
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [
            f"runs_dir={tmp_path}",
            "name=split",
            "pipeline.backend=warp",
            "pipeline.warp_stagger=true",
            "pipeline.envs_per_actor=64",
            "game.horizon=60",
            "pipeline.chunk_len=60",
            "pipeline.max_message_mb=1",
            "stop.versions=1",
        ],
    )
    summary = Controller(cfg).run()
    assert summary.reason == "reached stop.versions=1"
    records = [json.loads(x) for x in (tmp_path / "split/metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train and "loss/approx_kl" in train[-1]
    assert all(r.get("control/rejected", 0) == 0 for r in records)
    # batch_chunks=4: with one message per chunk, version 1 would need 4 full chunks of
    # 60 x 64 frames; split, the first chunk's messages are enough
    assert summary.frames < 4 * 60 * 64
