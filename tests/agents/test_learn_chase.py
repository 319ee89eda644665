"""The learning proof: PPO on the real `chase` game makes the seeker keep the hider in sight.

`bench/learn_chase.py` is the driver; these tests run its rollout on the real env (fast) and the
whole script for a short, frame-budgeted training run (slow, about 2 minutes on 2 cores).
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hns_train.agents import ActorCritic, ChunkRecorder, NetworkConfig
from hns_train.envs.config import make_config
from hns_train.envs.observations import observation_shapes
from hns_train.envs.vector import VectorGame

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "learn_chase.py"


def load_driver():
    spec = importlib.util.spec_from_file_location("learn_chase", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_rollout_records_episodes_with_truncation_and_vision_reward():
    driver = load_driver()
    torch.manual_seed(0)
    cfg = make_config("chase")
    net = NetworkConfig(embed_dim=32, dense_dim=32, lstm_dim=16)
    model = ActorCritic(observation_shapes(cfg), net, device="cpu")
    env = VectorGame(cfg, n_worlds=3, seed=5)
    rollout = driver.Rollout.start(env, seed=6, lstm_dim=net.lstm_dim)
    steps = 2 * cfg.horizon  # two whole episodes per world
    recorder = ChunkRecorder(steps, bptt_len=10)

    in_sight = driver.rollout(rollout, model, steps, recorder)
    chunk = recorder.finish(driver.bootstrap_value(rollout, model), policy_version=0)

    assert in_sight.shape == (steps, 3)
    ends = np.zeros(steps, bool)
    ends[[cfg.horizon - 1, steps - 1]] = True
    np.testing.assert_array_equal(chunk.truncated, np.repeat(ends[:, None], 3, 1))
    starts = np.roll(ends, 1)
    np.testing.assert_array_equal(chunk.episode_start, np.repeat(starts[:, None], 3, 1))
    # The seeker's reward (from the rules) is +1 exactly on the steps its observation mask says
    # it sees the hider, including the last step of each episode (no prep, never OOB).
    np.testing.assert_array_equal(chunk.rewards, np.where(in_sight, 1.0, -1.0))
    # Truncation values come from the final observation, not the next episode's first one.
    assert np.all(chunk.truncated_value[ends] != 0)
    # The LSTM state was carried across steps and zeroed only at episode starts.
    assert np.abs(chunk.lstm_state[1]).sum() > 0


@pytest.mark.slow
def test_ppo_seeker_keeps_random_hider_in_sight_far_more_than_random():
    command = [
        sys.executable,
        str(SCRIPT),
        "--seed", "0",
        "--max-frames", "40960",
        "--minutes", "8",
        "--threads", "1",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("SUMMARY "), last
    summary = json.loads(last[len("SUMMARY ") :])
    assert summary["frames"] >= 40960
    random_seeker, trained = summary["eval_random_in_sight"], summary["eval_in_sight"]
    # A seeker turning at random keeps the hider in its 135-degree cone ~37% of the time.
    assert 0.25 < random_seeker < 0.5
    assert trained > random_seeker + 0.2, summary
