"""Whether this machine can run a run's settings, checked once by the controller at start.

A worker refuses a device it cannot use; found only there, the refusal becomes a crash loop
(every restart fails the same way) that trains nothing. `device_problems(cfg)` asks the same
questions the workers will, with the same functions, before any worker starts:
- `pipeline.device` (policy workers, trainers and pods): `resolve_device` (the one the
  workers call too), the GPU it names, and for several trainers the collective backend
  (`ddp.choose_backend`);
- `pod.physics=warp` for pods: MuJoCo Warp must import. `auto` is not checked here: the pod
  picks Warp only on a CUDA device, and the C game otherwise (`pod_worker.make_game`).

On `pipeline.launcher=ray` the workers run on the cluster's nodes, not here: only what does not
depend on the machine is checked (the config's own rules), the rest by the workers.
"""

from __future__ import annotations

import importlib
import re

import torch

from hns_train.agents.policy import default_device
from hns_train.config import ConfigError, RunConfig
from hns_train.distributed.ddp import choose_backend


def resolve_device(name: str) -> torch.device:
    """`auto` is CUDA when present, else CPU; an explicit name must be well formed and name a
    device this machine has (a ValueError naming the device asked for and what there is)."""
    if name == "auto":
        return default_device()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise ValueError(f"pipeline.device={name!r}; allowed: auto, cpu, cuda, cuda:N")
    device = torch.device(name)
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # `cuda` is GPU 0 here; several ranks spread it over the GPUs there are (`ddp.rank_device`)
    if device.type == "cuda" and (device.index or 0) >= n:
        machine = f"this machine has {n} CUDA device{'' if n == 1 else 's'}"
        raise ValueError(f"pipeline.device={name!r} but {machine}")
    return device


def device_problems(cfg: RunConfig) -> list[str]:
    """One message per setting this machine cannot run (empty when all fit)."""
    p = cfg.pipeline
    if p.launcher == "ray":
        return []
    problems: list[str] = []
    try:
        device = resolve_device(p.device)
    except ValueError as err:
        return [f"{err}; use pipeline.device=cpu or auto"]
    if p.n_trainers > 1:
        try:
            choose_backend(p.ddp_backend, device)
        except ValueError as err:
            problems.append(str(err))
    if p.backend == "pod" and cfg.pod.physics == "warp":
        try:
            importlib.import_module("mujoco_warp")
        except Exception as err:  # ImportError, or a library that fails to load
            problems.append(
                f"MuJoCo Warp does not import here ({type(err).__name__}: {err}); "
                "pip install -e '.[warp]', or use the C game (pod.physics=c)"
            )
    return problems


def check_devices(cfg: RunConfig) -> None:
    """Raise ConfigError naming every setting this machine cannot run."""
    problems = device_problems(cfg)
    if problems:
        raise ConfigError("this machine cannot run these settings: " + "; ".join(problems))
