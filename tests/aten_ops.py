"""Counting the aten operations a piece of code dispatches (`AtenOpCounter`): a tool of the
tests and of bench/agents_speed.py.

Each operation below autograd is counted once by name, backward ones included, views and other
operations that move no data too: on a GPU each that computes is a kernel launch, on a CPU each
costs a fixed few microseconds of dispatch before any work. The count is fixed by the code, not
the machine, so a test can bound it.
"""

from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode


class AtenOpCounter(TorchDispatchMode):
    """`with AtenOpCounter() as ops: ...` then `ops.total`, `ops.ops` (name -> count)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
