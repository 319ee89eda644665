"""Parameters on the wire: torch state dicts as flat numpy arrays, and device choice.

A state dict travels as `name -> array` (float tensors as float32, integer counters as int64);
the receiver rebuilds tensors on its own device. Nothing is pickled: the wire format carries
only raw buffers with their dtype and shape.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch


def state_dict_to_arrays(state: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def arrays_to_state_dict(
    arrays: Mapping[str, np.ndarray], device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.array(v), device=device) for k, v in arrays.items()}


def resolve_device(name: str) -> torch.device:
    """`auto` is CUDA when present, else CPU; an explicit name is checked."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ValueError(f"pipeline.device={name!r}; allowed: auto, cpu, cuda, cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"pipeline.device={name!r} but no CUDA device is available")
    return torch.device(name)
