"""`make setup` picks PyTorch's CPU wheel index when no NVIDIA driver answers, and the choice can
be overridden (read from `make -n`, which prints the commands without running them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def setup_commands(tmp_path, *args) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX"}
    done = subprocess.run(
        ["make", "-n", "-B", "setup", f"VENV={tmp_path / 'venv'}", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout


def has_driver() -> bool:
    return subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0


def test_cpu_index_without_a_driver_and_overrides(tmp_path):
    if has_driver():
        pytest.skip("this machine has an NVIDIA driver")
    assert CPU_INDEX in setup_commands(tmp_path)
    custom = setup_commands(tmp_path, "TORCH_INDEX=https://example.org/whl")
    assert "--extra-index-url https://example.org/whl" in custom and CPU_INDEX not in custom
    assert "--extra-index-url" not in setup_commands(tmp_path, "TORCH_INDEX=")
    # a torch wheel pip finds without an index (find-links) is tried first, then the index
    assert "--no-deps --no-index" in setup_commands(tmp_path)


def test_with_a_driver_torch_comes_from_pypi(tmp_path):
    if not has_driver():
        pytest.skip("no NVIDIA driver on this machine")
    commands = setup_commands(tmp_path)
    assert "--extra-index-url" not in commands and 'install -q "torch==' in commands
