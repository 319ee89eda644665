"""`atomic_file`: a write that fails leaves the old file and no temporary behind."""

import os
from pathlib import Path

import pytest

from hns_train.atomic_file import atomic_write, atomic_write_bytes


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = atomic_write_bytes(tmp_path / "out" / "a.png", b"old")
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"

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
