"""Checkpoints: exact round trip of PPO training state, RNGs, corruption, pruning, no pickle."""

import hashlib
import io
import logging
import os
import random
import struct

import numpy as np
import pytest
import torch

from hns_train.agents import PPO, ActorCritic, NetworkConfig, PPOConfig
from hns_train.agents.checkpoint import (
    HEADER,
    MAGIC,
    CheckpointDir,
    CheckpointError,
    Counters,
    load_checkpoint,
    resolve_checkpoint,
    restore_training,
    save_checkpoint,
    training_state,
)
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from tests.synthetic import random_observations, synthetic_chunk

SHAPES = observation_shapes(
    make_config("quadrant", n_hiders=(1, 1), n_seekers=(1, 1), n_boxes=(1, 1), n_lidar=6)
)
SMALL = dict(embed_dim=16, attention_heads=2, dense_dim=32, lstm_dim=16)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # Tiny models: intra-op threads only contend with other work on a 2-core machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_ppo(seed: int) -> PPO:
    torch.manual_seed(seed)
    return PPO(ActorCritic(SHAPES, NetworkConfig(**SMALL), device="cpu"), PPOConfig(bptt_len=5))


def trained_ppo() -> PPO:
    ppo = make_ppo(0)
    rng = np.random.default_rng(0)
    for _ in range(2):
        ppo.update(synthetic_chunk(ppo.model, 10, 4, 5, rng, episode_len=7))
    return ppo


def test_training_round_trip_restores_outputs_optimizer_and_rngs(tmp_path):
    ppo = trained_ppo()
    np_rng = np.random.default_rng(5)
    np_rng.random(3)
    counters = Counters(version=0, frames=1234, episodes=56, wall_clock_s=7.5)
    state, meta = training_state(ppo, counters, {"game": {"preset": "chase"}}, np_rng)
    path = save_checkpoint(tmp_path / "a.pt", state, meta)

    # What the RNGs produce next, from the moment of saving.
    legacy = np.random.random  # noqa: NPY002 (the global RNG is part of the saved state)
    expected_draws = (random.random(), legacy(), torch.rand(1).item(), np_rng.random())

    fresh = make_ppo(1)  # different initial weights, empty optimiser state
    other_rng = np.random.default_rng(99)
    loaded = load_checkpoint(path)
    counters = restore_training(loaded, fresh, other_rng)
    assert (random.random(), legacy(), torch.rand(1).item(), other_rng.random()) == (expected_draws)
    assert counters == Counters(version=2, frames=1234, episodes=56, wall_clock_s=7.5)
    assert loaded.meta["config"] == {"game": {"preset": "chase"}}
    assert fresh.version == 2

    for (name, a), b in zip(
        ppo.model.state_dict().items(), fresh.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name  # weights and normaliser buffers
    old_opt, new_opt = ppo.optimizer.state_dict(), fresh.optimizer.state_dict()
    assert old_opt["param_groups"] == new_opt["param_groups"]
    assert len(old_opt["state"]) == len(new_opt["state"]) > 0
    for k, moments in old_opt["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(moments[name], new_opt["state"][k][name]), (k, name)

    obs = random_observations(SHAPES, (3,), np.random.default_rng(1))
    a = ppo.model.act(obs, deterministic=True)
    b = fresh.model.act(obs, deterministic=True)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.state, b.state)

    # The next optimisation step is identical too (same moments, same data, same RNG).
    chunk = synthetic_chunk(ppo.model, 10, 4, 5, np.random.default_rng(3), episode_len=7)
    torch.manual_seed(11)
    ppo.update(chunk)
    torch.manual_seed(11)
    fresh.update(chunk)
    for a_, b_ in zip(ppo.model.parameters(), fresh.model.parameters(), strict=True):
        assert torch.equal(a_, b_)


def test_numpy_arrays_and_meta_round_trip(tmp_path):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = save_checkpoint(tmp_path / "x.pt", {"a": arr, "n": [1, (2, 3)]}, {"k": [1, "x"]})
    ck = load_checkpoint(path)
    np.testing.assert_array_equal(ck.state["a"].numpy(), arr)
    assert ck.state["n"] == [1, (2, 3)]
    assert ck.meta == {"k": [1, "x"]}
    with pytest.raises(ValueError, match="JSON"):
        save_checkpoint(tmp_path / "y.pt", {}, {"bad": object()})
    with pytest.raises(ValueError, match="not allowed"):
        save_checkpoint(tmp_path / "z.pt", {"bad": object()})
    assert not (tmp_path / "y.pt").exists() and not (tmp_path / "z.pt").exists()


class Exploit:
    """An object whose unpickling would run code."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_pickled_objects_are_refused(tmp_path):
    # A well-formed envelope (valid hash) around a payload holding an arbitrary object.
    buffer = io.BytesIO()
    torch.save(
        {"format": "hns_train.checkpoint", "format_version": 1, "meta_json": "{}",
         "state": {"x": Exploit()}},
        buffer,
    )  # fmt: skip
    body = buffer.getvalue()
    evil = tmp_path / "evil.pt"
    evil.write_bytes(HEADER.pack(MAGIC, len(body), hashlib.sha256(body).digest()) + body)
    with pytest.raises(CheckpointError, match="weights_only"):
        load_checkpoint(evil)

    # A plain pickle / torch file without the envelope is refused before parsing.
    plain = tmp_path / "plain.pt"
    torch.save({"x": Exploit()}, plain)
    with pytest.raises(CheckpointError, match="magic"):
        load_checkpoint(plain)


def test_corruption_and_truncation_are_detected(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", {"w": torch.arange(1000.0)}, {"a": 1})
    raw = bytearray(path.read_bytes())
    (tmp_path / "trunc.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(tmp_path / "trunc.pt")
    raw[HEADER.size + 200] ^= 0xFF
    (tmp_path / "flip.pt").write_bytes(raw)
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_checkpoint(tmp_path / "flip.pt")
    (tmp_path / "tiny.pt").write_bytes(struct.pack("<4s", b"HNSC"))
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "tiny.pt")


def test_checkpoint_dir_keeps_newest_and_skips_corrupt(tmp_path, caplog):
    folder = CheckpointDir(tmp_path / "checkpoints", keep=2)
    assert folder.latest() is None
    for step in (10, 20, 30, 40):
        folder.save(step, {"w": torch.full((3,), float(step))}, {"note": step})
    assert folder.steps() == [30, 40]
    assert folder.latest().meta == {"note": 40, "step": 40}

    # Newest file truncated (e.g. a crash of a non-atomic copy): the previous one is used.
    newest = folder.path_for(40)
    newest.write_bytes(newest.read_bytes()[:100])
    with caplog.at_level(logging.WARNING):
        ck = folder.latest()
    assert ck.meta["step"] == 30 and torch.equal(ck.state["w"], torch.full((3,), 30.0))
    assert "skipping unusable checkpoint" in caplog.text


def test_a_path_with_no_usable_checkpoint_says_what_is_there(tmp_path):
    with pytest.raises(ValueError, match="no such file or directory"):
        resolve_checkpoint(tmp_path / "run")
    folder = CheckpointDir(tmp_path / "run" / "checkpoints")
    with pytest.raises(ValueError, match="no checkpoint files"):
        resolve_checkpoint(tmp_path / "run")
    folder.path_for(3).write_bytes(b"cut short")
    with pytest.raises(ValueError, match=r"no usable checkpoint: checkpoint .*3\.pt is truncated"):
        resolve_checkpoint(folder.folder)


def test_only_the_names_it_writes_are_listed(tmp_path):
    folder = CheckpointDir(tmp_path / "checkpoints", keep=1)
    folder.save(1, {"w": torch.ones(1)})
    # Copied in by hand at another width: listed as step 2, it would be opened as the
    # ten-digit name, which is not there.
    save_checkpoint(folder.folder / "ckpt_00000002.pt", {"w": torch.full((1,), 2.0)})
    assert folder.steps() == [1]
    assert folder.newest_size() == folder.path_for(1).stat().st_size
    assert folder.latest().meta["step"] == 1
    assert resolve_checkpoint(folder.folder) == folder.path_for(1)
    folder.save(3, {"w": torch.ones(1)})  # prunes
    assert folder.steps() == [3]
    assert (folder.folder / "ckpt_00000002.pt").exists()  # not its file to delete
    big = 12_345_678_901  # more than ten digits: the width path_for writes, no leading zeros
    folder.path_for(big).write_bytes(b"listed")
    assert folder.path_for(big).name == "ckpt_12345678901.pt" and folder.steps() == [3, big]
    snapshots = CheckpointDir(tmp_path / "pool", prefix="snapshot_")
    save_checkpoint(snapshots.path_for(40), {"model": {}})
    save_checkpoint(snapshots.folder / "snapshot_50.pt", {"model": {}})
    assert snapshots.steps() == [40]
    only_odd = CheckpointDir(tmp_path / "odd")
    save_checkpoint(only_odd.folder / "ckpt_7.pt", {"w": torch.ones(1)})
    with pytest.raises(ValueError, match=r"no checkpoint files named ckpt_<10-digit step>\.pt"):
        resolve_checkpoint(only_odd.folder)


def test_prune_never_deletes_the_last_valid_checkpoint(tmp_path):
    folder = CheckpointDir(tmp_path, keep=1)
    folder.save(1, {"w": torch.ones(1)})
    # Simulate a broken newer file appearing (e.g. disk error) and then a prune.
    folder.path_for(2).write_bytes(b"not a checkpoint")
    folder.prune()
    assert folder.steps() == [1, 2]
    assert folder.latest().meta["step"] == 1
    folder.save(3, {"w": torch.ones(1)})
    assert folder.steps() == [3]
    with pytest.raises(ValueError, match="keep"):
        CheckpointDir(tmp_path, keep=0)
