"""Phase detection: onsets near where the behaviour changed, once each, robust to noise."""

import json

import pytest
import synthetic_metrics as S

from hns_train.eval.phases import (
    PHASES,
    PhaseConfig,
    PhaseDetector,
    PhaseOnset,
    read_metrics,
)

PAPER = {  # planned onsets (episodes), shaped like the paper's run
    "running_and_chasing": 5e6,  # after the starting level is measured (baseline_records)
    "fort_building": 25e6,
    "ramp_use": 100e6,
    "ramp_defense": 110e6,
    "box_surfing": 380e6,
    "surf_defense": 430e6,
}


def _detect(recs, detector=None):
    detector = detector or PhaseDetector()
    return [onset for r in recs for onset in detector.update(r)], detector


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paper_like_run_fires_each_phase_once_in_order_near_its_onset(seed):
    recs = S.records(PAPER, max_episodes=500e6, n_records=500, seed=seed)
    onsets, det = _detect(recs)
    assert [o.phase for o in onsets] == list(PHASES)
    step = 1e6  # episodes between records
    for o in onsets:
        # window lag: at most window + persistence records, or 10 % of the onset
        tolerance = max(0.1 * PAPER[o.phase], (5 + 3) * step)
        assert abs(o.episodes - PAPER[o.phase]) <= tolerance, (o.phase, o.episodes)
    # the onset carries the counters of one real record (the start of the streak)
    by_episodes = {r["episodes"]: r for r in recs}
    for o in onsets:
        r = by_episodes[o.episodes]
        assert (o.frames, o.hours, o.version, o.time) == (
            r["frames"],
            r["hours"],
            r["version"],
            r["time"],
        )
    assert set(det.fired) == set(PHASES)
    assert _detect(recs[-50:], det)[0] == []  # nothing fires twice


def test_spikes_and_noise_alone_fire_nothing_beyond_chasing():
    recs = S.records(
        {"running_and_chasing": 2e6}, max_episodes=50e6, n_records=400, noise=0.1, spikes=40
    )
    onsets, _ = _detect(recs)
    assert [o.phase for o in onsets] == ["running_and_chasing"]


@pytest.mark.parametrize("start", [0.35, 0.6])
def test_chasing_is_measured_from_the_runs_starting_level(start):
    # Untrained seekers that already see hiders most of the time (a small arena) are not a
    # phase; the hidden share leaving its starting level is, whichever team learned first.
    flat = S.records({}, max_episodes=10e6, n_records=60, noise=0.02)
    for r in flat:
        r["episode/hidden_fraction"] += start - 0.6
    assert _detect(flat)[0] == []
    moved = S.records({"running_and_chasing": 4e6}, max_episodes=10e6, n_records=60, noise=0.02)
    for r in moved:
        r["episode/hidden_fraction"] += start - 0.6
    onsets, det = _detect(moved)
    assert det.baseline["hidden_fraction"] == pytest.approx(start, abs=0.03)
    assert [o.phase for o in onsets] == ["running_and_chasing"]
    assert 3e6 <= onsets[0].episodes <= 5e6


def test_phases_wait_for_their_predecessor():
    # forts appear although seekers never learned to chase: fort building must not fire
    recs = S.records({"fort_building": 5e6}, max_episodes=20e6, n_records=100)
    for r in recs:
        r["episode/hidden_fraction"] = 0.7
    assert _detect(recs)[0] == []
    unordered = PhaseDetector(PhaseConfig(require_order=False))
    assert [o.phase for o in _detect(recs, unordered)[0]] == ["fort_building"]


def _surf_records(values):
    return [
        {"kind": "train", "episodes": 1000 * (i + 1), "frames": 0, "episode/num_box_surf": v}
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize(
    "values, fires_at",
    [
        ([0, 2.5, 1.8, 2.5, 2.5], 2000),  # a dip within the hysteresis band keeps the streak
        ([0, 2.5, 1.0, 2.5, 2.5], None),  # a real drop breaks it
        ([0, 2.5, 1.0, 2.5, 2.5, 2.5], 4000),  # ... and the next streak starts after the drop
    ],
)
def test_hysteresis_and_persistence(values, fires_at):
    cfg = PhaseConfig(window_records=1, persistence=3, hysteresis=0.2, require_order=False)
    onsets, _ = _detect(_surf_records(values), PhaseDetector(cfg))
    assert [o.episodes for o in onsets] == ([fires_at] if fires_at else [])


def test_restore_and_replay_from_metrics(tmp_path):
    recs = S.records(PAPER, max_episodes=200e6, n_records=200)
    first, _ = _detect(recs[:120])
    assert [o.phase for o in first] == list(PHASES[:4])
    # a recorded onset that differs from what re-detection would find: the record wins
    recorded = [o.to_record() for o in first]
    recorded[1]["episodes"] = 12_345
    run = S.write_run(tmp_path / "r", recs[:120], recorded)
    det = PhaseDetector.from_metrics(run / "metrics.jsonl")
    assert det.fired["fort_building"].episodes == 12_345
    assert _detect(recs[120:], det)[0] == []  # all four already fired, none beyond in data

    fresh = PhaseDetector()
    fresh.restore([PhaseOnset.from_record({"phase": p}) for p in PHASES[:2]])
    later, _ = _detect(recs, fresh)
    assert [o.phase for o in later] == ["ramp_use", "ramp_defense"]


def test_surf_defense_after_resume_without_the_surfing_records():
    recs = S.records(PAPER, max_episodes=500e6, n_records=500, seed=4)
    det = PhaseDetector()
    # resumed after box surfing, window empty
    det.restore([PhaseOnset.from_record({"phase": p}) for p in PHASES[:5]])
    late = [r for r in recs if r["episodes"] >= 385e6]
    onsets, _ = _detect(late, det)
    assert [o.phase for o in onsets] == ["surf_defense"]
    assert abs(onsets[0].episodes - PAPER["surf_defense"]) <= 0.1 * PAPER["surf_defense"]


def test_records_without_statistics_are_ignored():
    det = PhaseDetector(PhaseConfig(window_records=1, persistence=1, baseline_records=1))
    assert det.update({"kind": "phase", "phase": "fort_building", "episodes": 5}) == []
    assert det.update({"kind": "train", "episodes": 10, "throughput/x": 1.0}) == []
    assert (
        det.update({"kind": "train", "episodes": 11, "episode/hidden_fraction": float("nan")}) == []
    )
    assert det.update({"kind": "train", "episodes": 12, "episode/hidden_fraction": 0.6}) == []
    assert det.baseline == {"hidden_fraction": 0.6}  # the first record with statistics
    (onset,) = det.update({"kind": "train", "episodes": 13, "episode/hidden_fraction": 0.2})
    assert onset == PhaseOnset("running_and_chasing", 13, 0, 0.0, 0, 0.0)
    assert PhaseOnset.from_record(onset.to_record()) == onset


def test_read_metrics_skips_damaged_lines_and_says_so_once(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    good = [{"kind": "train", "episodes": 1}, {"kind": "phase", "phase": "ramp_use"}]
    path.write_text("\n".join(json.dumps(r) for r in good) + '\n{"kind": "tra')
    train, onsets = read_metrics(path)
    assert train == good[:1] and [o.phase for o in onsets] == ["ramp_use"]
    # a line cut by a full disk in the middle of the file costs that record only
    path.write_text('{"kind": "tra\n' + json.dumps(good[0]) + "\n[1]\n")
    caplog.clear()
    assert read_metrics(path) == ([good[0]], [])
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "2 damaged lines skipped" in warnings[0], warnings
    assert "metrics.jsonl:1" in warnings[0]
    with pytest.raises(ValueError, match="does not exist"):
        read_metrics(tmp_path / "missing.jsonl")


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="persistence=0 is not allowed; it must be >= 1"):
        PhaseConfig(persistence=0)
    with pytest.raises(ValueError, match="chase_min_change=nan must be a finite number"):
        PhaseConfig(chase_min_change=float("nan"))
    with pytest.raises(ValueError, match="unknown phase"):
        PhaseOnset("tool_use", 0, 0, 0.0, 0, 0.0)
