"""The host-sync counter sees every kind of host read it promises to, and nothing else."""

import torch

from tests.host_syncs import HostSyncCounter


def test_counts_host_reads_and_data_dependent_shapes_only():
    x = torch.arange(6.0)
    with HostSyncCounter() as syncs:
        y = (x * 2 + 1).clamp(max=5).reshape(2, 3)  # device work: not counted
        x.to(torch.float64)  # a dtype change stays on the device
        torch.where(x > 2, x, 0.0)
        assert syncs.total == 0
        y.sum().item()
        x.cpu()
        x.tolist()
        bool(x.any())
        float(x.sum())
        x.nonzero()
        x[x > 2]
        x.to("cpu")
    assert syncs.calls["item"] == 1
    assert syncs.calls["__bool__"] == 1
    assert syncs.calls["__getitem__[bool mask]"] == 1
    assert syncs.calls["to(cpu)"] == 1
    assert syncs.total == 8
