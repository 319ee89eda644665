"""`python -m hns_train.eval play`: a trainer checkpoint (real PPO + checkpoint APIs) against fixed
opponents, recorded to replays and rendered to mp4."""

from __future__ import annotations

import imageio.v2 as iio2
import numpy as np
import pytest
import torch

from hns_train.agents.checkpoint import CheckpointDir, Counters, training_state
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.agents.ppo import PPO
from hns_train.config import CONFIG_DIR, load_config, save_config
from hns_train.envs.contract import observation_shapes
from hns_train.eval import replay as replay_mod
from hns_train.eval.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory with its config, one trainer checkpoint (version 3) and one snapshot."""
    root = tmp_path_factory.mktemp("runs")
    cfg = load_config(CONFIG_DIR / "smoke.yaml", [f"runs_dir={root}", "name=playrun"])
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True)
    save_config(cfg, run_dir / "config.yaml")
    torch.manual_seed(0)
    model = ActorCritic(observation_shapes(cfg.game_config()), cfg.agent.network)
    ppo = PPO(model, cfg.agent.ppo)
    ppo.version = 3  # as if three optimisation steps had run
    state, meta = training_state(ppo, Counters(frames=100), cfg.to_dict())
    ckpt = CheckpointDir(run_dir / "checkpoints").save(3, state, meta)
    with PolicyPool(run_dir / "pool", cfg.pool) as pool:
        snapshot = pool.add_snapshot(2, model.state_dict())
    return cfg, ckpt, snapshot


def test_checkpoint_against_random_records_renders_and_prints(run, capsys):
    cfg, ckpt, _ = run
    argv = ["play", str(ckpt), "random", "--matches", "1", "--width", "64", "--height", "64"]
    assert main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out
    replays = sorted((cfg.run_dir / "replays").glob("play_*.npz"))
    assert [p.name.split("_")[2:5] for p in replays] == [
        ["a", "vs", "random"],  # A hides
        ["random", "vs", "a"],  # then the roles swap
    ]
    for path in replays:
        rep = replay_mod.load(path)
        assert rep.n_steps == cfg.game_config().horizon
        ours = rep.metadata["hiders"] if path.name.split("_")[2] == "a" else rep.metadata["seekers"]
        assert ours["version"] == 3 and ours["name"] == "A ckpt_0000000003.pt v3"
        # the printed table carries each match's hidden fraction and the replay path
        assert f"{rep.header['episode_stats']['hidden_fraction']:.3f}" in out
        assert str(path) in out
        video = path.with_suffix(".mp4")
        assert video.read_bytes()[4:8] == b"ftyp" and f"  {video}" in out
        with iio2.get_reader(str(video), format="FFMPEG") as reader:
            frames = [frame for frame in reader]  # list() asks len(): inf for ffmpeg
        assert len(frames) == rep.n_frames and frames[0].shape == (64, 64, 3)
    assert "hiding from random" in out and "random hiding from A" in out

    # Same seed, same deterministic policy and random team: the same matches, step for step.
    again = cfg.run_dir / "again"
    assert main([*argv, "--quiet", "--no-video", "--out", str(again)]) == 0
    capsys.readouterr()
    repeats = sorted(again.glob("play_*.npz"))
    assert len(repeats) == 2 and not list(again.glob("*.mp4"))
    for first, second in zip(replays, repeats, strict=True):
        np.testing.assert_array_equal(
            replay_mod.load(first)["actions"], replay_mod.load(second)["actions"]
        )


def test_snapshot_hides_from_scripted_seeker_only_one_way(run, tmp_path, capsys):
    _, _, snapshot = run
    argv = ["play", str(snapshot), "scripted_seeker", "--matches", "2", "--worlds", "2"]
    assert main([*argv, "--record", "1", "--no-video", "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("play_*.npz")  # --record 1 of the 2 matches; it cannot hide
    rep = replay_mod.load(path)
    assert rep.metadata["seekers"]["name"] == "scripted_seeker"
    assert rep.metadata["hiders"]["version"] == 2
    assert "over 2 matches" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["play", "missing.pt", "random"], "no such file"),
        (["play", "random", "noop"], "CHECKPOINT_A must be a checkpoint"),
        (["play", "CKPT", "bots"], "give a checkpoint"),
        (["play", "CKPT", "random", "--matches", "0"], "--matches must be >= 1"),
        (["play", "CKPT", "random", "--seed", "-1"], "--seed must be >= 0"),
        (["play", "CKPT", "random", "--width", "8"], "width=8 is not allowed"),
        (["play", "CKPT", "random", "--width", "63"], "mp4 needs even frame sizes"),
    ],
)
def test_bad_arguments_name_the_problem(run, argv, message, capsys):
    argv = [str(run[1]) if a == "CKPT" else a for a in argv]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert message in out.err
    assert "matches on" not in out.out  # refused before a match is played


def test_a_run_directory_or_latest_stands_for_its_newest_checkpoint(run, capsys, monkeypatch):
    """The README's `play runs/default random` works whatever checkpoint numbers a run has."""
    cfg, ckpt, _ = run
    monkeypatch.chdir(cfg.run_dir.parent.parent)  # `latest` looks under ./runs
    (cfg.run_dir.parent.parent / "runs").mkdir(exist_ok=True)
    (cfg.run_dir.parent.parent / "runs" / "playrun").symlink_to(cfg.run_dir)
    for arg in (str(cfg.run_dir), "latest"):
        argv = ["play", arg, "random", "--matches", "1", "--one-way", "--no-video", "--quiet"]
        assert main([*argv, "--out", str(cfg.run_dir / arg.replace("/", "_"))]) == 0
        out = capsys.readouterr().out
        assert f"A {ckpt.name} v3" in out, out


def test_a_file_that_is_no_checkpoint_is_refused_with_the_reason(tmp_path, capsys):
    bad = tmp_path / "ckpt_0000000001.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["play", str(bad), "random"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: checkpoint {bad}") and err.count("\n") == 1
