"""The shared-memory request codec: every key and dtype round-trips through a block, readers
see it read-only, and addresses that do not fit the run are refused."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hns_train.distributed.contract import ContractError
from hns_train.distributed.shared_rows import (
    ALIGN,
    FOLDER_PREFIX,
    SLOTS,
    RequestLayout,
    SharedBlock,
    SharedReader,
    shared_folder,
)
from hns_train.envs.config import make_config
from hns_train.envs.contract import observation_shapes

LSTM = 16


@pytest.fixture
def quadrant_shapes():
    return observation_shapes(make_config("quadrant"))


def fill(views: dict, rng: np.random.Generator) -> dict:
    """Random contents of every field, of its own dtype."""
    out = {}
    for name, view in views.items():
        if view.dtype == np.bool_:
            value = rng.random(view.shape) < 0.5
        elif view.dtype.kind == "i":
            value = rng.integers(-3, 1 << 40, view.shape)
        else:
            value = rng.standard_normal(view.shape).astype(view.dtype)
        view[...] = value
        out[name] = value
    return out


def test_every_key_and_dtype_round_trips_through_a_block(tmp_path, quadrant_shapes):
    layout = RequestLayout.of(quadrant_shapes, LSTM, rows=7)
    names = [name for name, _, _ in layout.fields]
    assert names == [f"obs/{k}" for k in quadrant_shapes] + ["state", "episode_start", "code"]
    assert all(offset % ALIGN == 0 for offset in layout.offsets)
    assert layout.block_bytes == SLOTS * layout.slot_bytes

    block = SharedBlock(tmp_path, "actor0-0-g0", layout)
    reader = SharedReader(tmp_path, quadrant_shapes, LSTM)
    rng = np.random.default_rng(0)
    written = [fill(block.slots[s], rng) for s in range(SLOTS)]  # fields must not overlap
    for slot in range(SLOTS):
        read = reader.read(block.address(slot))
        assert list(read) == names
        for name, value in written[slot].items():
            assert read[name].dtype == block.slots[slot][name].dtype
            np.testing.assert_array_equal(read[name], value)
            assert not read[name].flags.writeable
    # The writer's later writes are what the reader sees next (one mapping, no copies).
    block.slots[2]["state"][0, 0, 0] = 123.0
    assert reader.read(block.address(2))["state"][0, 0, 0] == 123.0
    reader.close()
    block.close()
    assert not (tmp_path / "actor0-0-g0").exists()


def test_addresses_that_do_not_fit_the_run_are_refused(tmp_path, quadrant_shapes):
    layout = RequestLayout.of(quadrant_shapes, LSTM, rows=4)
    block = SharedBlock(tmp_path, "actor0-0-g0", layout)
    good = block.address(0)
    reader = SharedReader(tmp_path, quadrant_shapes, LSTM)
    wider = SharedReader(tmp_path, quadrant_shapes, LSTM + 1)  # another run's contract
    cases = {
        "not a plain file name": {**good, "block": "../actor0-0-g0"},
        "cannot be opened": {**good, "block": "nothing-here"},
        "has .* bytes; 5 rows": {**good, "rows": 5},
        "not in 0..2": {**good, "slot": SLOTS},
        "1..65536 rows": {**good, "rows": 0},
        "rows .* is not an int": {**good, "rows": "4"},
        "slot .0. is not in": {**good, "slot": "0"},
    }
    for message, address in cases.items():
        with pytest.raises(ContractError, match=message):
            reader.read(address)
    with pytest.raises(ContractError, match="has .* bytes"):
        wider.read(good)
    assert reader.read(good)["code"].shape == (4,)
    with pytest.raises(ValueError, match="block name"):
        SharedBlock(tmp_path, "a/b", layout)
    with pytest.raises(FileExistsError):  # one writer per block
        SharedBlock(tmp_path, "actor0-0-g0", layout)
    reader.close()
    wider.close()
    block.close()


def test_a_run_folder_is_private_and_in_memory_where_the_os_has_tmpfs():
    folder = shared_folder()
    try:
        assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
        assert Path(folder).name.startswith(f"{FOLDER_PREFIX}{os.getpid()}-")
        if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
            assert folder.startswith("/dev/shm/")
    finally:
        shutil.rmtree(folder)


def test_folders_of_controllers_that_were_killed_go_with_the_next_run(tmp_path):
    """A killed controller's workers die with it (no cleanup runs); the next run removes
    their blocks, and only those."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{FOLDER_PREFIX}{gone.pid}-abc"
    stale.mkdir()
    (stale / "actor0-0-1-g0").write_bytes(b"\0" * 64)
    live = tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-def"
    live.mkdir()
    other = tmp_path / "not-ours-1"
    other.mkdir()
    new = shared_folder(str(tmp_path))
    assert not stale.exists() and live.exists() and other.exists() and Path(new).is_dir()
