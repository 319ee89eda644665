"""Reading a replay holds memory bounded by what a replay can hold, whatever the file claims."""

import io
import tracemalloc
import zipfile

import numpy as np
import pytest

from hns_train.eval import replay as R


def npy_header(shape: tuple, dtype: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def load_peak(path) -> tuple[str, int]:
    """The ReplayError text and the peak of traced allocations while loading."""
    tracemalloc.start()
    try:
        with pytest.raises(R.ReplayError) as err:
            R.load(path)
        return str(err.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_member_declaring_a_huge_array_is_refused_before_allocation(tmp_path):
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("header.npy", npy_header((1 << 31,)) + b"\0" * 64)  # 16 GiB claimed
    text, peak = load_peak(path)
    assert "header.npy" in text and "declares" in text
    assert peak < 20 << 20


def test_members_that_unpack_beyond_the_limit_are_refused_unread(tmp_path):
    path = tmp_path / "zeros.npz"
    block = bytes(1 << 20)
    n = (R.MAX_REPLAY_BYTES >> 20) + 8
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("big.npy", "w", force_zip64=True) as fh,
    ):
        fh.write(npy_header((n << 17,)))
        for _ in range(n):
            fh.write(block)
    assert path.stat().st_size < 2 << 20  # a small file...
    text, peak = load_peak(path)
    assert "more than" in text and "big.npy" in text
    assert peak < 20 << 20  # ...that is not unpacked
