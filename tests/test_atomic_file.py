"""`atomic_file`: a write that fails leaves the old file and no temporary behind; a written
file has the permissions the process umask gives a new file, as have JSON-lines logs and the
run lock."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hns_train.atomic_file import atomic_write, atomic_write_bytes, partial_files
from tests.scripts import ROOT


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = atomic_write_bytes(tmp_path / "out" / "a.png", b"old")

    def torn(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, torn, ".png")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.png"]
    atomic_write(path, lambda tmp: Path(tmp).write_text("new"), ".png")
    assert path.read_text() == "new"


def test_a_failed_write_names_the_file_asked_for_not_its_temporary(tmp_path):
    (tmp_path / "a.png").mkdir()  # the rename over it fails
    with pytest.raises(IsADirectoryError) as err:
        atomic_write_bytes(tmp_path / "a.png", b"x")
    assert err.value.filename == str(tmp_path / "a.png") and ".tmp" not in str(err.value)
    assert [p.name for p in tmp_path.iterdir()] == ["a.png"]


def test_partial_files_finds_a_writes_temporary_and_no_other_file(tmp_path):
    """What a killed writer leaves is found by the target's name, even one with glob
    characters, and nothing of another target or format is."""
    path = tmp_path / "m[1]*.mp4"
    for other in ("m[1]*.mp4", ".m[1]*.x.tmp.gif", ".m1.x.tmp.mp4", ".m[1]*x.tmp.mp4", "n.mp4"):
        (tmp_path / other).write_bytes(b"")
    seen = []
    atomic_write(path, lambda tmp: seen.append((Path(tmp), partial_files(path))), ".mp4")
    (tmp, found) = seen[0]
    assert found == [tmp] and partial_files(path) == []
    gif = partial_files(path, ".gif")
    assert [p.name for p in gif] == [".m[1]*.x.tmp.gif"]


# The umask is process-wide: it is set in a child process, never in the one running the tests.
UMASK_CHILD = """
import json, os, sys
from pathlib import Path
from hns_train.atomic_file import atomic_write, atomic_write_bytes
from hns_train.distributed.run_lock import RunLock
from hns_train.jsonl import append_record

out, modes = Path(sys.argv[1]), {}
for umask in (0o027, 0o022, 0o077, 0o002):
    os.umask(umask)
    a = atomic_write_bytes(out / f"{umask:o}" / "a.bin", b"x")
    b = atomic_write(out / f"{umask:o}" / "b.png", lambda tmp: Path(tmp).write_bytes(b"y"), ".png")
    append_record(out / f"{umask:o}" / "c.jsonl", {"x": 1})
    lock = RunLock(out / f"{umask:o}")
    lock.release()
    files = (a, b, out / f"{umask:o}" / "c.jsonl", lock.path)
    modes[f"{umask:o}"] = [oct(p.stat().st_mode & 0o777) for p in files]
print(json.dumps(modes))
"""


def test_written_files_follow_the_umask(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", UMASK_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    modes = json.loads(done.stdout)
    # a group that shares runs (umask 002) can append to their logs too
    expected = {"27": "0o640", "22": "0o644", "77": "0o600", "2": "0o664"}
    assert modes == {umask: [mode] * 4 for umask, mode in expected.items()}
