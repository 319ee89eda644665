"""Shared-memory sums between real processes: every rank gets the same bits, the sum in rank
order, for any size (fewer elements than ranks included) and dtype; a missing rank is a named
timeout, not a hang; a rank's files go when it closes."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from waiting import run_spawned

from hns_train.distributed.host_sums import SMALL_BYTES, HostSums, remove_files

# (elements, dtype) of each sum in turn: the slots grow, shrink and change dtype between calls,
# small sums (one barrier) come between large ones (two), twice in a row too
CALLS = [
    (3, torch.float64),
    (10_001, torch.float32),
    (7, torch.float32),
    (5, torch.float64),
    (50_000, torch.float32),
    (3, torch.float64),
]


def values(rank: int, call: int) -> torch.Tensor:
    size, dtype = CALLS[call]
    gen = torch.Generator().manual_seed(1000 * call + rank)
    return torch.randn(size, generator=gen, dtype=torch.float64).to(dtype)


def _rank(rank: int, n: int, folder: str, out: str, small_bytes: int) -> None:
    torch.set_num_threads(1)
    sums = HostSums("sums-g0", rank, n, 30, directory=Path(folder), small_bytes=small_bytes)
    try:
        for call in range(len(CALLS)):
            tensor = values(rank, call)
            if call in (1, 3):  # a strided view is summed in place like any tensor
                tensor = torch.stack([tensor, tensor], dim=1)[:, 0]
                assert not tensor.is_contiguous()
            sums.all_sum(tensor)
            np.save(f"{out}/r{rank}-c{call}.npy", tensor.numpy())
    finally:
        sums.close()


@pytest.mark.parametrize(("n", "small_bytes"), [(2, SMALL_BYTES), (5, SMALL_BYTES), (5, 0)])
def test_every_rank_gets_the_sum_in_rank_order(tmp_path, n, small_bytes):
    """`small_bytes=0`: every sum takes the two-barrier way, sums of fewer elements than ranks
    included."""
    folder = tmp_path / "shared"
    folder.mkdir()
    codes = run_spawned(_rank, [(r, n, str(folder), str(tmp_path), small_bytes) for r in range(n)])
    assert codes == [0] * n, f"rank exit codes {codes}"
    assert not any(folder.iterdir()), "files left after every rank closed"
    for call, (size, _) in enumerate(CALLS):
        got = [np.load(tmp_path / f"r{r}-c{call}.npy", allow_pickle=False) for r in range(n)]
        expected = values(0, call)
        for r in range(1, n):
            expected = expected + values(r, call)  # the one order every slice is summed in
        for r in range(n):
            assert got[r].dtype == expected.numpy().dtype and got[r].shape == (size,)
            np.testing.assert_array_equal(got[r], expected.numpy(), err_msg=f"rank {r}")


def test_a_rank_that_never_comes_is_a_named_timeout(tmp_path):
    sums = HostSums("sums-g3", 0, 2, timeout_s=0.5, directory=tmp_path)
    try:
        start = time.monotonic()
        expected = r"rank 0: 1 of the group's 2 ranks.*ddp_timeout_s=0\.5"
        with pytest.raises(TimeoutError, match=expected):
            sums.all_sum(torch.ones(10))
        assert time.monotonic() - start < 5
    finally:
        sums.close()
    assert not list(tmp_path.iterdir())


def test_a_killed_groups_files_are_removed_by_tag(tmp_path):
    """What the controller does after killing a group: only that generation's files go."""
    old = [HostSums("sums-g0", r, 2, timeout_s=1, directory=tmp_path) for r in range(2)]
    new = HostSums("sums-g1", 0, 2, timeout_s=1, directory=tmp_path)
    try:
        assert remove_files(tmp_path, "sums-g0") == 8  # 3 files and a pipe per rank
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == [f"sums-g1-r0.{k}" for k in ("in", "out", "pipe", "small")]
    finally:
        for s in [*old, new]:
            s.close()


def test_a_cuda_tensor_or_a_rank_outside_the_group_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"rank 2 outside 0\.\.1"):
        HostSums("sums-g0", 2, 2, timeout_s=1, directory=tmp_path)
    sums = HostSums("sums-g0", 0, 1, timeout_s=1, directory=tmp_path)
    try:
        t = torch.arange(5.0)
        assert torch.equal(sums.all_sum(t), torch.arange(5.0))  # one rank: the sum is itself
        with pytest.raises(ValueError, match="CPU tensors, not meta"):
            sums.all_sum(torch.ones(3, device="meta"))
    finally:
        sums.close()


def test_a_rank_holding_many_descriptors_still_waits_and_times_out(tmp_path):
    """A rank of a big group holds many descriptors; one numbered past 1023 (which select
    cannot wait on) still waits, and still ends in the named timeout."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 1200
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the descriptor limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        sums = HostSums("sums-g0", 0, 2, timeout_s=0.3, directory=tmp_path)
        try:
            assert sums._pipe > 1023  # the case this test is about
            with pytest.raises(TimeoutError, match="ddp_timeout_s=0.3"):
                sums.all_sum(torch.ones(3))
        finally:
            sums.close()
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
