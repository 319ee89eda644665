"""A learner's allocator setting (`learner.reuse_freed_memory`): the blocks an update frees are
reused by the next, not given back and faulted in again page by page."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)"
)

# 16 MiB blocks, as an update's activations: allocated, written and freed ten times over
PROBE = """
import ctypes, resource, sys
import torch
from hns_train.distributed import learner
if sys.argv[1] == "reuse":
    learner.reuse_freed_memory(True)
else:  # every block of 1 MiB and more from mmap, given back when freed
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(learner.M_MMAP_THRESHOLD, 1 << 20)
    libc.mallopt(learner.M_TRIM_THRESHOLD, 1 << 20)
torch.empty(4 << 20).fill_(1.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.empty(4 << 20).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(out.stdout.split()[-1])


def test_freed_blocks_are_reused_not_faulted_in_again():
    given_back, reused = page_faults("give-back"), page_faults("reuse")
    # given back, each of the 10 blocks faults its 4,096 pages of 4 KiB in again
    assert given_back > 10 * 4096 // 2, given_back
    # reused: at most the first block is faulted in once more (glibc keeps the heap after it)
    assert reused <= 2 * 4096 < given_back // 4, (reused, given_back)
