"""`rundirs`: `latest`, a run directory or a checkpoints folder name the newest usable checkpoint
(real checkpoint files); anything else is refused with the forms that are allowed."""

from __future__ import annotations

import os

import pytest

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.eval.rundirs import (
    VIDEO_FORMATS,
    output_format,
    resolve_checkpoint,
    resolve_run_dir,
)


def make_run(root, name, steps, mtime):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"name: {name}\n")
    ckpts = CheckpointDir(run / "checkpoints", keep=5)
    paths = [ckpts.save(s, {"w": s}, {}) for s in steps]
    for p in [run / "config.yaml", run / "checkpoints", *paths]:
        os.utime(p, (mtime, mtime))
    return run, paths


def test_latest_is_the_run_changed_last_and_its_newest_checkpoint(tmp_path):
    runs = tmp_path / "runs"
    old, _ = make_run(runs, "old", [1, 2], 1_000)
    new, paths = make_run(runs, "new", [3, 7], 2_000)
    (runs / "not_a_run").mkdir()
    assert resolve_run_dir("latest", runs) == new
    assert resolve_checkpoint("latest", runs) == paths[-1]
    assert resolve_checkpoint(old, runs).name == "ckpt_0000000002.pt"
    assert resolve_checkpoint(new / "checkpoints", runs) == paths[-1]
    assert resolve_checkpoint(paths[0], runs) == paths[0]  # a file is taken as it is


def test_a_broken_newest_checkpoint_is_skipped(tmp_path, caplog):
    run, paths = make_run(tmp_path, "r", [1, 2], 1_000)
    paths[-1].write_bytes(paths[-1].read_bytes()[:-5])  # torn write
    assert resolve_checkpoint(run) == paths[0]
    assert f"skipping unusable checkpoints newer than {paths[0]}" in caplog.text


def test_bad_names_say_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="no run directory under"):
        resolve_run_dir("latest", tmp_path / "runs")
    with pytest.raises(ValueError, match="give a checkpoint"):
        resolve_checkpoint(tmp_path / "nothing")
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ValueError, match="no usable checkpoint"):
        resolve_checkpoint(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("a file\n")
    with pytest.raises(ValueError, match="notes.txt: a file, not a directory"):
        resolve_run_dir(tmp_path / "notes.txt")


def test_a_render_format_comes_from_the_extension_or_format_then_mp4():
    assert output_format(None) == "mp4"
    assert output_format("runs/a.GIF") == "gif"
    assert output_format("runs/a.GIF", "gif") == "gif"
    assert output_format("runs/a", "html") == "html"
    with pytest.raises(
        ValueError, match=r"'runs/a.gif' as format 'html': its extension says 'gif'"
    ):
        output_format("runs/a.gif", "html")
    with pytest.raises(ValueError, match=r"'avi'.*\('mp4', 'gif', 'png', 'html'\)"):
        output_format("runs/a.avi")
    with pytest.raises(ValueError, match=r"'html'.*\('mp4', 'gif', 'png'\)"):
        output_format("runs/a.html", allowed=VIDEO_FORMATS)


def test_a_folder_is_no_render_path(tmp_path):
    with pytest.raises(ValueError, match=r"it is a folder; give a file in it \(.*NAME\.html\)"):
        output_format(tmp_path, "html")
