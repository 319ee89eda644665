"""The examples that train hide-and-seek with other trainers (examples/): TorchRL's IPPO makes
the chase seeker beat a random seeker by more than random seeds explain (a paired difference on
fresh evaluation seeds above 3 standard errors); short runs of TorchRL's MAPPO on the 2 v 2
quadrant game and of RLlib's PPO keep the other examples working (finite losses, the policy's
parameters moved, every share in [0, 1]): they claim nothing about learning."""

from __future__ import annotations

import math

import pytest

from tests.scripts import load_script

Z = 3.0  # standard errors a learning claim needs

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def example(name: str):
    return load_script(f"examples/{name}.py")


def check_ran(result: dict, frames: int) -> None:
    assert result["frames"] >= frames
    assert result["losses"] and all(math.isfinite(v) for v in result["losses"].values())
    assert result["policy_change"] > 0  # the learning team's policy was updated
    e = result["eval"]
    assert 0.0 <= e["random"] <= 1.0 and 0.0 <= e["trained"] <= 1.0
    assert math.isfinite(e["gain_se"])


@pytest.mark.slow
def test_torchrl_ippo_chase_seeker_beats_a_random_seeker():
    result = example("torchrl_mappo").main(
        ["--preset=chase", "--algo=ippo", "--frames=14400", "--seed=0", "--eval-episodes=256"]
    )
    check_ran(result, 14_400)
    e = result["eval"]
    assert e["metric"] == "in_sight" and e["episodes"] == 256
    assert 0.25 < e["random"] < 0.5  # a seeker turning at random: about 135/360
    assert e["gain"] > Z * e["gain_se"], e


@pytest.mark.slow
def test_torchrl_mappo_runs_on_the_two_team_game():
    result = example("torchrl_mappo").main(
        [
            "--preset=quadrant",
            "--algo=mappo",
            "--frames=400",
            "--frames-per-batch=200",
            "--minibatch-size=100",
            "--norm-steps=100",
            "--eval-episodes=4",
        ]
    )
    check_ran(result, 400)
    assert result["args"]["algo"] == "mappo" and len(result["history"]) == 2


@pytest.mark.slow
def test_rllib_ppo_runs():
    pytest.importorskip("ray.rllib", reason="RLlib's dependencies: pip install -e '.[third_party]'")
    result = example("rllib_ppo").main(
        [
            "--preset=chase",
            "--frames=400",
            "--frames-per-batch=200",
            "--minibatch-size=100",
            "--envs=2",
            "--eval-episodes=4",
        ]
    )
    check_ran(result, 400)
    assert len(result["history"]) == 2


@pytest.mark.parametrize("name", ["torchrl_mappo", "rllib_ppo"])
def test_bad_sizes_and_teams_are_named(name):
    main = example(name).main
    with pytest.raises(ValueError, match=r"minibatch_size \(400\) <= frames_per_batch \(1200\)"):
        main(["--frames=100"])
    with pytest.raises(SystemExit):  # argparse names the allowed teams
        main(["--team=hiders"])
