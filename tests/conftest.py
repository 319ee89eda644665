"""Test-wide settings.

Headless rendering must be chosen before MuJoCo is first imported. Torch uses one thread:
tests act on small batches, where more threads only contend with each other and with the
worker processes that pipeline tests start on the same two cores.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import torch  # noqa: E402

torch.set_num_threads(1)
