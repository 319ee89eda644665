"""Synthetic training records shaped like the paper's behaviour curves (test data for the phase
detector and `compare`): each phase switches the statistics it changes with a short linear
transition centred on its planned onset, plus Gaussian noise and a few one-record spikes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from hns_train.envs.stats import STAT_KEYS

PLAY_STEPS = 144  # randomwalls: 240 steps, 96 of them preparation

# Window-mean level of each statistic before any phase and after each phase began.
LEVELS = {
    "start": dict(
        hidden_fraction=0.6,
        num_box_lock_prep=0.05,
        max_box_move_prep=0.2,
        max_ramp_move_prep=0.1,
        ramp_after=0.3,
        num_ramp_lock_prep=0.0,
        num_box_surf=0.0,
    ),
    "running_and_chasing": dict(hidden_fraction=0.3),
    "fort_building": dict(hidden_fraction=0.8, num_box_lock_prep=1.8, max_box_move_prep=1.5),
    "ramp_use": dict(hidden_fraction=0.35, ramp_after=2.0),
    "ramp_defense": dict(
        hidden_fraction=0.85, num_ramp_lock_prep=1.7, max_ramp_move_prep=1.0, ramp_after=0.2
    ),
    "box_surfing": dict(hidden_fraction=0.55, num_box_surf=6.0),
    "surf_defense": dict(hidden_fraction=0.9, num_box_surf=0.4, num_box_lock_prep=3.5),
}


def records(
    onsets: dict[str, float],
    max_episodes: float,
    n_records: int = 400,
    noise: float = 0.04,
    spikes: int = 3,
    seed: int = 0,
    episodes_per_hour: float = 4e6,
    frames_per_episode: float = 240.0,
) -> list[dict]:
    """Training records every max_episodes / n_records episodes; `onsets` maps phase -> episode
    at which its transition is half done (transition width: 4 % of the onset, >= 1 record)."""
    rng = np.random.default_rng(seed)
    step = max_episodes / n_records
    spike_at = set(rng.choice(n_records, size=spikes, replace=False).tolist())
    out = []
    for i in range(1, n_records + 1):
        ep = i * step
        level = dict(LEVELS["start"])
        for phase, at in sorted(onsets.items(), key=lambda kv: kv[1]):
            width = max(0.04 * at, step)
            frac = float(np.clip((ep - (at - width / 2)) / width, 0.0, 1.0))
            for k, target in LEVELS[phase].items():
                level[k] = level[k] + frac * (target - level[k])
        stat = {k: v + rng.normal(0, noise * max(abs(v), 0.5)) for k, v in level.items()}
        if i - 1 in spike_at:  # a lucky batch: everything looks like an advanced phase
            stat.update(num_box_surf=8.0, num_box_lock_prep=3.0, num_ramp_lock_prep=2.0)
        hidden = float(np.clip(stat["hidden_fraction"], 0.0, 1.0))
        values = {
            "max_box_move_prep": max(stat["max_box_move_prep"], 0.0),
            "max_box_move": max(stat["max_box_move_prep"], 0.0) + 0.3,
            "num_box_lock_prep": max(stat["num_box_lock_prep"], 0.0),
            "num_box_lock": max(stat["num_box_lock_prep"], 0.0) + 0.2,
            "max_ramp_move_prep": max(stat["max_ramp_move_prep"], 0.0),
            "max_ramp_move": max(stat["max_ramp_move_prep"], 0.0) + max(stat["ramp_after"], 0.0),
            "num_ramp_lock_prep": max(stat["num_ramp_lock_prep"], 0.0),
            "num_ramp_lock": max(stat["num_ramp_lock_prep"], 0.0),
            "hider_return": PLAY_STEPS * (2 * hidden - 1),
            "seeker_return": -PLAY_STEPS * (2 * hidden - 1),
            "hidden_fraction": hidden,
            "num_box_surf": max(stat["num_box_surf"], 0.0),
            "task_score": 0.0,  # hide-and-seek has no task score
        }
        assert set(values) == set(STAT_KEYS)
        out.append(
            {
                "kind": "train",
                "time": 1.7e9 + 3600 * ep / episodes_per_hour,
                "hours": ep / episodes_per_hour,
                "episodes": int(ep),
                "frames": int(ep * frames_per_episode),
                "version": i * 10,
                **{f"episode/{k}": v for k, v in values.items()},
                "throughput/frames_per_s": 1e5,
                "loss/policy": 0.01,
            }
        )
    return out


def write_run(
    run_dir: Path, recs: list[dict], onsets: list[dict] = (), hardware: dict | None = None
) -> Path:
    """A run directory per the contract: config.yaml, hardware.yaml and metrics.jsonl (phase
    lines inserted after the training record they were detected at)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hw = hardware or {"cpus": 2, "gpus": 0, "gpu_name": None}
    (run_dir / "config.yaml").write_text(f"name: {run_dir.name}\ngame:\n  preset: randomwalls\n")
    (run_dir / "hardware.yaml").write_text(yaml.safe_dump(hw))
    lines = []
    pending = sorted(onsets, key=lambda o: o["episodes"])
    for r in recs:
        lines.append(json.dumps(r))
        while pending and pending[0]["episodes"] <= r["episodes"]:
            lines.append(json.dumps(pending.pop(0)))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir
