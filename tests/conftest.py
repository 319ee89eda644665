"""Test-wide settings: headless rendering must be chosen before MuJoCo is first imported."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
