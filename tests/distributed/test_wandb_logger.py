"""WandbLogger writes a real offline wandb run that holds our keys and axes; `--resume` continues
it; disabled mode writes nothing; the Rapid reference run holds the paper's onsets.

Runs are read back with wandb's own reader (`wandb leet inspect`); WANDB_MODE stays
offline/disabled and wandb's directories point into tmp_path, so nothing reaches the network or
the home directory."""

import imageio.v2 as iio
import numpy as np
import pytest
from wandb_runs import offline_runs, read_offline_run

from hns_train.distributed.wandb_logger import (
    AXES,
    RUN_ID_FILE,
    WandbLogger,
    log_reference_run,
)
from hns_train.envs.stats import STAT_KEYS
from hns_train.eval.baselines import load_baselines
from hns_train.eval.phases import PhaseOnset


@pytest.fixture(autouse=True)
def wandb_env(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))


def record(i: int) -> dict:
    return {
        "kind": "train",
        "time": 1.7e9 + i,
        "hours": 0.5 * i,
        "episodes": 1000 * i,
        "frames": 240_000 * i,
        "version": 10 * i,
        **{f"episode/{k}": 0.1 * i + j for j, k in enumerate(STAT_KEYS)},
        "throughput/frames_per_s": 5000.0 + i,
        "note": "strings are not charts",
    }


def test_offline_run_holds_keys_axes_phase_video_and_table(tmp_path):
    run_dir = tmp_path / "runs" / "exp"
    config = {"name": "exp", "game": {"preset": "quadrant"}, "hardware": {"cpus": 2}}
    video = tmp_path / "match.mp4"
    frames = np.random.default_rng(0).integers(0, 255, (6, 64, 64, 3), dtype=np.uint8)
    iio.mimwrite(video, frames, fps=10)

    log = WandbLogger(run_dir, config, project="hns-test", mode="offline")
    for i in (1, 2, 3):
        log.log(record(i))
    onset = PhaseOnset("fort_building", 1500, 360_000, 0.75, 15, 1.7e9)
    log.log_phase(onset)
    log.log_table("leaderboard", ["snapshot", "role", "rating"], [[10, "hider", 25.1]])
    log.log_video(video, "replay/match", caption="version 30")
    log.finish()

    (offline,) = offline_runs(run_dir)
    run = read_offline_run(offline)
    assert run["run_id"] == (run_dir / "wandb" / RUN_ID_FILE).read_text().strip()
    assert run["project"] == "hns-test"
    assert run["config"]["game"] == {"preset": "quadrant"}
    metrics = {m["name"]: m for m in run["metrics"]}
    assert all(axis in metrics for axis in AXES)
    assert metrics["*"]["glob"] and metrics["*"]["step"] == "episodes"

    train_rows = [r for r in run["history"] if "episode/hidden_fraction" in r]
    assert len(train_rows) == 3
    for i, row in enumerate(train_rows, 1):
        want = record(i)
        for key in (*AXES, *(f"episode/{k}" for k in STAT_KEYS), "throughput/frames_per_s"):
            assert row[key] == pytest.approx(want[key]), key
        assert "kind" not in row and "time" not in row and "note" not in row

    (phase_row,) = [r for r in run["history"] if "phase/index" in r]
    assert phase_row["phase/index"] == 2
    assert phase_row["phase/fort_building"] == 1500
    assert {a: phase_row[a] for a in AXES} == {a: getattr(onset, a) for a in AXES}
    assert run["summary"]["phase/fort_building/frames"] == 360_000

    (phases_row,) = [r for r in run["history"] if "phases" in r]
    assert phases_row["phases"]["_type"] == "table-file"
    assert (phases_row["phases"]["ncols"], phases_row["phases"]["nrows"]) == (1 + len(AXES), 1)
    (table_row,) = [r for r in run["history"] if "leaderboard" in r]
    assert table_row["leaderboard"]["_type"] == "table-file"
    assert table_row["episodes"] == 3000 and table_row["version"] == 30
    (video_row,) = [r for r in run["history"] if "replay/match" in r]
    assert video_row["replay/match"]["_type"] == "video-file"
    assert video_row["replay/match"]["caption"] == "version 30"
    stored = offline / "files" / video_row["replay/match"]["path"]
    assert stored.read_bytes() == video.read_bytes()
    assert run["summary"]["episodes"] == {"max": 3000}  # define_metric(summary="max")


def test_resume_continues_the_same_run(tmp_path):
    run_dir = tmp_path / "exp"
    loggers = []
    for i, resume in enumerate((True, True, False), 1):  # mode defaults to offline
        log = WandbLogger(run_dir, {"name": "exp"}, resume=resume)
        log.log(record(i))
        log.finish()
        loggers.append(log)
    first, again, fresh = loggers
    assert again.run_id == first.run_id
    assert fresh.run_id != first.run_id
    ids = [read_offline_run(p)["run_id"] for p in offline_runs(run_dir)]
    assert sorted(ids) == sorted([first.run_id, first.run_id, fresh.run_id])


def test_disabled_writes_nothing(tmp_path, monkeypatch):
    run_dir = tmp_path / "exp"
    log = WandbLogger(run_dir, {"name": "exp"}, mode="disabled")
    log.log(record(1))
    log.log_phase(PhaseOnset("running_and_chasing", 1, 2, 0.1, 1, 0.0))
    log.log_table("t", ["a"], [[1]])
    log.finish()
    assert log.run is None and not run_dir.exists()

    monkeypatch.setenv("WANDB_MODE", "disabled")  # the job-wide switch beats mode="offline"
    log = WandbLogger(run_dir, {"name": "exp"}, mode="offline")
    log.log(record(1))
    log.finish()
    assert log_reference_run("p", tmp_path / "ref", mode="offline") is None
    assert not run_dir.exists() and not (tmp_path / "ref").exists()
    assert not (tmp_path / "wandb-home").exists()


def test_reference_run_holds_rapid_onsets_on_the_episode_axis(tmp_path):
    rid = log_reference_run("hns-test", tmp_path, mode="offline")
    (offline,) = offline_runs(tmp_path)
    run = read_offline_run(offline)
    assert run["run_id"] == rid and run["project"] == "hns-test"
    rapid = load_baselines().rapid
    rows = [r for r in run["history"] if "phase/index" in r]
    dated = [p for p, m in rapid.phases.items() if m.episodes is not None]
    assert [r["phase/index"] for r in rows] == [1, 2, 3, 4, 5][: len(dated)]
    for phase, row in zip(dated, rows, strict=True):
        assert row["episodes"] == rapid.phases[phase].episodes == row[f"phase/{phase}"]
    (scale,) = [r for r in run["history"] if "reference/run_reached_phase" in r]
    assert (scale["episodes"], scale["frames"], scale["hours"]) == (132.3e6, 31.7e9, 34.0)
    assert run["config"]["srl"]["speedup_vs_rapid"] == 5.0
    assert {m["name"]: m["step"] for m in run["metrics"]}["*"] == "episodes"
    # once per directory: a resumed experiment does not write it again
    assert log_reference_run("hns-test", tmp_path, mode="offline") == rid
    assert len(offline_runs(tmp_path)) == 1


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="mode 'cloud' is not allowed"):
        WandbLogger(tmp_path, {}, mode="cloud")
    log = WandbLogger(tmp_path, {}, mode="disabled")
    with pytest.raises(ValueError, match="lacks 'episodes'"):
        log.log({"kind": "train", "frames": 1})
    with pytest.raises(ValueError, match="row 0 has 2 cells for 1 columns"):
        log.log_table("t", ["a"], [[1, 2]])
    with pytest.raises(ValueError, match="does not exist"):
        log.log_video(tmp_path / "none.mp4", "v")


def test_members_of_a_population_share_a_group(tmp_path):
    """One wandb run per member, all in the population's group (compared side by side)."""
    runs = []
    for name in ("m0", "m1"):
        log = WandbLogger(tmp_path / name, {"name": name}, group="pop")
        runs.append((log.run.group, log.run.name, log.run_id))
        log.finish()
    assert [r[0] for r in runs] == ["pop", "pop"]
    assert [r[1] for r in runs] == ["m0", "m1"] and runs[0][2] != runs[1][2]
