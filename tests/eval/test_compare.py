"""`compare`: the table shows the baselines' numbers and the run's; the plot is a PNG of the
asked size; runs without phases or hardware info still compare; the baseline data loads typed."""

import struct

import pytest
import synthetic_metrics as S
import yaml

from hns_train.eval.baselines import DEFAULT_PATH, load_baselines
from hns_train.eval.cli import main as cli_main
from hns_train.eval.compare import human, run_compare
from hns_train.eval.phases import PhaseDetector

ONSETS = {
    "running_and_chasing": 0.2e6,
    "fort_building": 6e6,
    "ramp_use": 30e6,
    "ramp_defense": 36e6,
}


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def run_dir(tmp_path):
    recs = S.records(ONSETS, 60e6, n_records=300, episodes_per_hour=1.5e6)
    det = PhaseDetector()
    onsets = [o.to_record() for r in recs for o in det.update(r)]
    assert [o["phase"] for o in onsets] == list(ONSETS)
    hw = {"cpus": 16, "gpus": 1, "gpu_name": "H100"}
    return S.write_run(tmp_path / "demo", recs, onsets, hardware=hw), onsets, recs


def test_table_has_baselines_and_this_run(run_dir, tmp_path):
    path, onsets, recs = run_dir
    text = run_compare(path, tmp_path / "c.png", width=900, height=700)
    b = load_baselines()
    rapid_run = b.rapid.runs[0]
    srl_run = b.srl.runs[0]
    for phase in ("fort_building", "ramp_use", "ramp_defense", "box_surfing"):
        assert "≈" + human(b.rapid.phases[phase].episodes) in text
    assert f"{human(rapid_run.episodes)} ep, {human(rapid_run.frames)} frames, 34.0 h" in text
    assert "132.3 M ep, 31.7 B frames" in text
    assert f"{srl_run.hardware()}, 68.0 h" in text and "1,000 CPU cores + 8 GPUs" in text
    assert "up to 5x faster" in text and "15,000 CPU cores + 32 A100 GPUs" in text
    assert "1909.07528" in text and "2306.16688" in text
    # this run: every recorded onset with its counters, the hardware, and the progress so far
    lines = {line.split("  ")[0]: line for line in text.splitlines()}
    for o in onsets:
        row = lines[o["phase"].replace("_", " ")]
        assert human(o["episodes"]) in row and human(o["frames"]) in row
        assert f"{o['hours']:.2f} h" in row or f"{o['hours']:.1f} h" in row
    assert "not reached" in lines["box surfing"]
    assert "16 CPU cores + 1 x H100" in lines["hardware"]
    assert human(recs[-1]["episodes"]) in lines["so far"]
    ratio = onsets[1]["episodes"] / b.rapid.phases["fort_building"].episodes
    assert f"{ratio:.2g}x" in lines["fort building"]
    assert png_size(tmp_path / "c.png") == (900, 700)


def test_table_reads_the_baseline_file(run_dir, tmp_path, monkeypatch):
    path, _, _ = run_dir
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    data["baselines"]["rapid"]["phases"]["fort_building"]["episodes"] = 12_345_678
    data["baselines"]["srl"]["runs"][0]["cpu_cores"] = 4321
    alt = tmp_path / "alt.yaml"
    alt.write_text(yaml.safe_dump(data))
    from hns_train.eval import compare

    text = compare.run_compare(path, tmp_path / "c.png", baselines=load_baselines(alt))
    assert "≈12.3 M" in text and "4,321 CPU cores" in text
    assert "≈25 M" not in text


@pytest.mark.parametrize("size", [(640, 480), (1234, 567)])
def test_plot_is_a_png_of_the_asked_size(run_dir, tmp_path, size):
    path, _, _ = run_dir
    out = tmp_path / "sub" / "plot.png"
    argv = [str(path), "--out", str(out), "--width", str(size[0]), "--height", str(size[1])]
    assert cli_main(["compare", *argv]) == 0  # python -m hns_train.eval compare ...
    assert png_size(out) == size


def test_run_without_phases_or_hardware(tmp_path, capsys):
    recs = S.records({}, 2e5, n_records=30)
    path = S.write_run(tmp_path / "young", recs)
    (path / "config.yaml").write_text("name: young\n")  # no game
    (path / "hardware.yaml").unlink()  # a run the controller did not start
    assert cli_main(["compare", str(path)]) == 0
    text = capsys.readouterr().out
    assert "has not reached any phase yet (30 training records, 200 k episodes)" in text
    assert "hardware not recorded" in text
    assert png_size(path / "compare.png") == (1400, 1000)

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    assert cli_main(["compare", str(empty), "--width", "400", "--height", "300"]) == 0
    assert "no training records" in capsys.readouterr().out
    assert png_size(empty / "compare.png") == (400, 300)


def test_onsets_missing_from_the_file_are_redetected(run_dir, tmp_path):
    path, onsets, recs = run_dir
    S.write_run(path, recs, onsets[:2], hardware={"cpus": 16, "gpus": 1, "gpu_name": "H100"})
    text = run_compare(path, tmp_path / "c.png")
    rows = {line.split("  ")[0]: line for line in text.splitlines()}
    assert human(onsets[1]["episodes"]) + " " in rows["fort building"] + " "
    assert human(onsets[3]["episodes"]) + "*" in rows["ramp defense"]
    assert "re-running the phase detector" in text


def test_bad_input(tmp_path, capsys):
    assert cli_main(["compare", str(tmp_path / "nope")]) == 2
    assert "error: run directory" in capsys.readouterr().err
    path = S.write_run(tmp_path / "r", S.records({}, 1e5, n_records=10))
    assert cli_main(["compare", str(path), "--width", "50"]) == 2
    assert "width=50" in capsys.readouterr().err
    assert cli_main(["compare", str(path), "--out", str(tmp_path)]) == 2
    assert f"cannot render to '{tmp_path}': it is a folder" in capsys.readouterr().err
    assert cli_main(["compare", str(path), "--out", str(tmp_path / "plot.svg")]) == 2
    assert "its extension says 'svg'" in capsys.readouterr().err  # the plot is a PNG
    assert not (tmp_path / "plot.svg").exists()


def test_baseline_file_is_typed_and_sourced(tmp_path):
    b = load_baselines()
    assert b.rapid.phases["running_and_chasing"].episodes == 0
    assert b.rapid.phases["box_surfing"].episodes == 380e6
    (run,) = b.rapid.runs
    assert (run.episodes, run.frames, run.hours) == (132.3e6, 31.7e9, 34.0)
    assert (run.batch_chunks, run.chunk_length) == (64000, 10)
    assert b.srl.speedup_vs_rapid.factor == 5.0
    assert {r.cpu_cores for r in b.srl.runs} == {1000, 15000}
    for baseline in (b.rapid, b.srl):
        assert baseline.source.arxiv in ("1909.07528", "2306.16688")
        for mark in baseline.phases.values():
            assert mark.source.title and mark.source.where
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    data["baselines"]["rapid"]["phases"]["tool_use"] = data["baselines"]["rapid"]["phases"][
        "ramp_use"
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="unknown phase 'tool_use'"):
        load_baselines(bad)
    data = yaml.safe_load(DEFAULT_PATH.read_text())
    data["baselines"]["rapid"]["runs"][0]["hours"] = "34 h"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="hours=.34 h. has type str; expected float"):
        load_baselines(bad)


def test_table_fits_100_columns_and_drops_an_empty_ratio_column(run_dir, tmp_path, capsys):
    path, _, _ = run_dir
    text = run_compare(path, tmp_path / "c.png", width=400, height=300)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "x Rapid" in text  # fort building has an onset to relate
    young = S.write_run(tmp_path / "young", S.records({}, 2e5, n_records=30))
    text = run_compare(young, tmp_path / "y.png", width=400, height=300)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "x Rapid" not in text and "/Rapid" not in text


def test_plot_zooms_to_the_run_and_lists_later_onsets(tmp_path):
    from hns_train.eval.compare import beyond_note, load_run, x_range

    short = load_run(S.write_run(tmp_path / "short", S.records({}, 2e5, n_records=30)))
    marks = [(p, m.episodes) for p, m in load_baselines().rapid.phases.items() if m.episodes]
    lo, hi = x_range(short, marks)
    first = min(r["episodes"] for r in short.records if r["episodes"] > 0)
    assert lo <= first and 2e5 <= hi <= 2e6  # the run's span, not Rapid's 10^8
    note = beyond_note(marks, hi)
    assert all(f"≈{human(ep)}" in note for _, ep in marks)  # all of Rapid's onsets lie beyond
    assert note.index("fort building") < note.index("box surfing")  # in episode order
    assert beyond_note(marks, 1e9) == ""


def test_a_damaged_metrics_line_is_skipped_and_said_once(tmp_path, caplog):
    from hns_train.eval.compare import load_run

    recs = S.records({}, 2e5, n_records=30)
    path = S.write_run(tmp_path / "cut", recs)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    (path / "metrics.jsonl").write_text("\n".join([lines[0], lines[1][:20], *lines[2:]]) + "\n")
    caplog.clear()
    run = load_run(path)
    assert len(run.records) == 29  # the cut line costs its record, not the comparison
    warnings = [r.getMessage() for r in caplog.records if "damaged line" in r.getMessage()]
    assert len(warnings) == 1, warnings  # the file is read once


@pytest.mark.parametrize("name", ["config.yaml", "hardware.yaml"])
@pytest.mark.parametrize(
    "data, said",
    [(b"name: [cut sho", "not valid YAML"), (b"\xff\xfe\x00name: x\n", "not UTF-8 text")],
)
def test_a_damaged_yaml_file_is_refused_naming_it(tmp_path, capsys, name, data, said):
    path = S.write_run(tmp_path / "r", S.records({}, 1e5, n_records=10))
    (path / name).write_bytes(data)  # a write cut short; a file that is not text
    assert cli_main(["compare", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path / name}: " in err and said in err and err.count("\n") == 1, err
