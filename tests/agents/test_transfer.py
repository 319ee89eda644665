"""Fine-tuning starts: a checkpoint of every hide-and-seek preset loads into every transfer task."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hns_train.agents import PPO, ActorCritic, PPOConfig
from hns_train.agents.checkpoint import (
    CheckpointDir,
    Counters,
    load_checkpoint,
    save_checkpoint,
    training_state,
)
from hns_train.agents.transfer import (
    REINITIALISED,
    checkpoint_path,
    load_pretrained,
    match_observations,
    resolve_init,
    source_game,
)
from hns_train.config import load_config
from hns_train.envs.config import PRESETS, make_config
from hns_train.envs.contract import observation_shapes

# sources: the games, and the count-based pretraining (bench/transfer.py's --init-count arm)
GAMES = ("quadrant", "randomwalls", "chase", "count_based")
# targets: the tasks a run fine-tunes on (count_based is a pretraining, never a target)
TASKS = sorted(
    p
    for p, v in PRESETS.items()
    if v.get("task", "hide_and_seek") not in ("hide_and_seek", "count_based")
)


def _checkpoint(tmp_path, preset: str):
    torch.manual_seed(1)
    model = ActorCritic(observation_shapes(make_config(preset)), device="cpu")
    for p in model.parameters():  # not the initialisation a fresh network would draw
        p.data.add_(torch.randn_like(p))
    model.value_norm.biased_mean.fill_(7.0)
    ppo = PPO(model, PPOConfig())
    state, meta = training_state(ppo, Counters(version=3), {"game": {"preset": preset}})
    path = save_checkpoint(tmp_path / preset / "checkpoints" / "ckpt_0000000003.pt", state, meta)
    return path, model


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("game", GAMES)
def test_a_checkpoint_of_every_game_loads_into_every_task(tmp_path, game, task):
    path, source = _checkpoint(tmp_path, game)
    flags = match_observations(make_config(task), source_game(load_checkpoint(path).meta))
    cfg = make_config(task, **flags)
    torch.manual_seed(2)
    model = ActorCritic(observation_shapes(cfg), device="cpu")
    fresh_value_norm = model.value_norm.biased_mean.clone()
    fresh = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(REINITIALISED)}
    report = load_pretrained(model, load_checkpoint(path))

    src, got = source.state_dict(), model.state_dict()
    for name in (
        "policy_net.self_embed.weight",
        "value_net.dense.weight",
        "policy_net.lstm.weight_hh",
    ):
        assert torch.equal(got[name], src[name]), name
    # the paper's fine-tuning: both networks' last dense layer and LayerNorm start afresh
    assert len(fresh) == 8  # weight and bias of head and lstm_norm, in both networks
    for name, value in fresh.items():
        assert torch.equal(got[name], value) and not torch.equal(got[name], src[name]), name
        assert name in report.fresh
    assert torch.equal(
        got["obs_norm.stats.lidar.biased_mean"], src["obs_norm.stats.lidar.biased_mean"]
    )
    assert torch.equal(got["value_norm.biased_mean"], fresh_value_norm)  # the task's scale
    # entity embeddings follow their kind, wherever it sits in either network
    src_kinds = [s.kind.name for s in source.layout.entities]
    own_kinds = [s.kind.name for s in model.layout.entities]
    for i, kind in enumerate(own_kinds):
        name = f"policy_net.entity_embed.{i}.dense.weight"
        if kind in src_kinds:
            src_name = f"policy_net.entity_embed.{src_kinds.index(kind)}.dense.weight"
            assert torch.equal(got[name], src[src_name]), kind
            assert f"policy_net.entity_embed.{kind}.dense.weight" in report.loaded
        else:
            assert f"policy_net.entity_embed.{kind}.dense.weight" in report.fresh
    for kind in set(src_kinds) - set(own_kinds):
        assert f"policy_net.entity_embed.{kind}.dense.weight" in report.unused


def test_match_observations_keeps_the_task_rows_where_they_fit():
    task = make_config("lock_and_return")
    assert task.box_size_obs
    flags = match_observations(task, make_config("randomwalls"))
    assert flags["box_size_obs"] is True  # randomwalls' box rows carry sizes too
    flags = match_observations(task, make_config("quadrant"))
    assert flags["box_size_obs"] is False  # a quadrant network saw 12-wide box rows


def test_resolve_init_writes_the_flags_into_the_run_config(tmp_path):
    path, _ = _checkpoint(tmp_path, "quadrant")
    overrides = ["game.preset=lock_and_return", "pipeline.chunk_len=40"]
    cfg = load_config(None, [*overrides, f"agent.init={path.parent.parent}"])
    resolved = resolve_init(cfg)
    assert resolved.agent.init == str(path)  # the run directory's newest checkpoint
    assert resolved.game["box_size_obs"] is False
    assert resolved.game_config().box_size_obs is False
    for init in ("", "scratch"):  # from scratch: the config as it is
        scratch = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, init=init))
        assert resolve_init(scratch) is scratch


def test_a_missing_init_names_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="agent.init=.*no checkpoint there"):
        checkpoint_path(tmp_path / "nothing")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ValueError, match="run directory with checkpoints"):
        checkpoint_path(tmp_path / "run")


def test_a_run_directory_names_its_newest_checkpoint_that_verifies(tmp_path):
    folder = CheckpointDir(tmp_path / "run" / "checkpoints")
    good = folder.save(10, {"w": torch.zeros(2)})
    folder.save(20, {"w": torch.ones(2)}).write_bytes(b"cut short")  # a write the disk lost
    assert checkpoint_path(tmp_path / "run") == good
    assert checkpoint_path(folder.folder) == good
