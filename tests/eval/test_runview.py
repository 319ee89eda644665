"""`python -m hns_train.eval --run RUN_DIR` on a run directory built with the real pool, ratings,
replay and video APIs."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from hns_train.agents import NetworkConfig
from hns_train.agents.policy import ActorCritic
from hns_train.agents.pool import PolicyPool
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes
from hns_train.eval import recorder
from hns_train.eval import replay as replay_mod
from hns_train.eval.cli import main
from hns_train.eval.ratings import Ratings
from hns_train.eval.runview import win_rates
from hns_train.eval.video import VideoOptions, write_video
from tests.rated import Rated

CFG = make_config("chase", horizon=4)
SMALL = NetworkConfig(embed_dim=16, attention_heads=2, dense_dim=32, lstm_dim=16)
# (hider, seeker, hider score, the opponent class the eval worker stores): the latest policy
# wins 2 of 3 hiding from snapshot 3, wins one and draws one seeking random hiders, and wins the
# one seeking noop hiders.
MATCHES = [
    ("latest", 3, 0.9, "pool"),
    ("latest", 3, 0.1, "pool"),
    ("latest", 3, 0.8, "pool"),
    ("random", "latest", 0.2, "random"),
    ("random", "latest", 0.5, "random"),
    ("noop", "latest", 0.0, "noop"),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "viewrun"
    torch.manual_seed(0)
    model = ActorCritic(observation_shapes(CFG), SMALL)
    with PolicyPool(run / "pool") as pool:
        pool.add_snapshot(3, model.state_dict())
    with Ratings(run / "pool") as ratings:
        for hider, seeker, score, cls in MATCHES:
            stats = {"latest_version": 7, "hidden_fraction": score, "opponent_class": cls}
            ratings.record([Rated(hider, seeker, score, stats)])
    records = [
        {"kind": "train", "version": 7, "frames": 12345, "episodes": 321, "hours": 0.5},
        {
            "kind": "phase",
            "phase": "running_and_chasing",
            "episodes": 300,
            "frames": 12000,
            "hours": 0.4,
            "version": 6,
        },
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    act = recorder.random_actions(CFG, seed=1)
    older, newer = run / "replays" / "eval_older.npz", run / "replays" / "eval_newer.npz"
    for k, path in enumerate((older, newer)):
        replay = recorder.record_episode(CFG, act, seed=k, metadata={"kind": "eval"})
        replay_mod.save(replay, path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))
    write_video(replay_mod.load(newer), newer.with_suffix(".mp4"), VideoOptions(32, 32))
    return run


def test_run_view_prints_leaderboard_win_rates_phases_and_replays(run_dir, capsys):
    assert main(["--run", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "version 7, 12,345 env frames, 321 episodes" in out
    assert "pool: 1 snapshots, versions 3..3" in out
    assert "leaderboard (6 rated matches" in out

    # Every rated (policy, role) with mu ± 3 sigma as stored.
    with Ratings(run_dir / "pool") as ratings:
        board = ratings.leaderboard()
    assert len(board) == 5  # latest as hider and seeker, 3 seeker, random and noop hiders
    for r in board:
        line = next(x for x in out.splitlines() if f" {r.policy} " in x and f" {r.role} " in x)
        assert f"{r.mu:6.2f} ± {3 * r.sigma:5.2f}" in line
        assert line.rstrip().endswith(str(r.games))

    assert "newest match at version 7" in out
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^  (pool|random|noop) .*$", out, re.M)}
    assert re.search(r"pool\s+0\.67 \(3\)\s+0\.67 \(3\)\s+-\s+2/0/1", rows["pool"])
    assert re.search(r"random\s+0\.75 \(2\)\s+-\s+0\.75 \(2\)\s+1/1/0", rows["random"])
    assert re.search(r"noop\s+1\.00 \(1\)\s+-\s+1\.00 \(1\)\s+1/0/0", rows["noop"])

    assert "running_and_chasing: 300 episodes" in out
    newer, older = run_dir / "replays" / "eval_newer.npz", run_dir / "replays" / "eval_older.npz"
    assert out.index(str(newer)) < out.index(str(older))  # newest first
    assert f"video {newer.with_suffix('.mp4')}" in out
    assert "eval_older.mp4" not in out


def test_win_rates_keep_the_newest_matches_per_class(run_dir):
    with Ratings(run_dir / "pool") as ratings:
        full = win_rates(ratings)
        newest_two = win_rates(ratings, window=2)
    assert full["pool"].all.games == 3 and full["pool"].by_role["hider"].wins == 2
    # the two newest pool matches scored 0.8 (won) and 0.1 (lost)
    assert newest_two["pool"].all.games == 2 and newest_two["pool"].all.rate == 0.5
    assert newest_two["random"].all.rate == 0.75  # only two random matches exist


def test_run_view_refuses_what_is_not_a_run(tmp_path, capsys):
    assert main(["--run", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["--run", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("name: new\n")  # a run that has only just started
    assert main(["--run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no evaluation yet" in err and "not a run directory" not in err
    assert not (tmp_path / "pool").exists()  # looking does not create a pool
