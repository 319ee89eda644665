"""Counting the places where device code waits for the host (`HostSyncCounter`): a tool of
the tests and of the benchmarks that report host syncs (bench/pod_speed.py, bench/warp_speed.py).

On a GPU, a tensor read on the host (`.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)`,
`float(t)`, `int(t)`) and an operation whose output size depends on data (`nonzero`, `unique`,
`masked_select`, indexing by a boolean mask) make the host wait until the device has caught up:
the launch queue drains and the device idles while Python catches up. The pod's step and the
Warp game's step must have none; a PPO update a small fixed number (its statistics, once).

The counter is a torch function mode: every such call made inside `with HostSyncCounter() as c`
is counted by name, on any device (a CPU tensor counts too, since the same code on a GPU would
wait), so tests on a CPU-only machine see the syncs a GPU run would pay for. Two exceptions,
which are host work on a GPU too: calls made from inside `torch.optim` (Adam keeps its step
counts as host tensors unless it is `capturable`) and `t.to(device)` unless the target is
written as the string "cpu" (torch's own code moves tensors to the device they are on).
"""

from __future__ import annotations

import sys
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

# host reads of a tensor's values, and ops whose output shape depends on the values
SYNC_CALLS = frozenset(
    {
        "item",
        "cpu",
        "numpy",
        "tolist",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "nonzero",
        "argwhere",
        "unique",
        "masked_select",
    }
)
_INDEXING = frozenset({"__getitem__", "__setitem__"})


class HostSyncCounter(TorchFunctionMode):
    """`with HostSyncCounter() as syncs: ...` then `syncs.total`, `syncs.calls` (name -> count)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        # every torch call seen: on a GPU each is at least one kernel launch unless captured
        self.ops = 0

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        self.ops += 1
        if name in SYNC_CALLS:
            counted = name
        elif name in _INDEXING and len(args) > 1 and _has_bool_mask(args[1]):
            counted = f"{name}[bool mask]"
        elif name == "to" and _to_host(args, kwargs or {}):
            counted = "to(cpu)"
        else:
            counted = None
        if counted and not _from_optimizer():
            self.calls[counted] += 1
        return func(*args, **(kwargs or {}))


def _from_optimizer() -> bool:
    frame = sys._getframe(2)  # the caller of the tensor method
    return frame.f_globals.get("__name__", "").startswith("torch.optim")


def _has_bool_mask(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _to_host(args, kwargs) -> bool:
    """`t.to("cpu")` / `t.to(torch.device("cpu"))` (a dtype-only `to` stays on the device)."""
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, str) and target.startswith("cpu")
