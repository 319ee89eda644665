"""bench/gpu_day.sh's first contact with an interpreter, on the cases a GPU node can present.

- An interpreter without torch (a plain venv): one line naming it and what to give instead,
  within 10 s, exit 3, no report.
- Warp without its CPU compiler, as the CUDA-only kit installs it (this environment's Warp
  with every file but `warp-clang.so`, linked into a folder put first on PYTHONPATH), with
  `DEVICE=cpu`: every step that runs the Warp game is skipped with that reason, the stack's
  versions head the report (numba, llvmlite and numba-cuda among them), and since no step
  succeeded the exit status is 1, said on the terminal.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_DAY = ROOT / "bench" / "gpu_day.sh"
NO_TORCH_S = 10  # the promise: a missing torch is named within this many seconds
WARP_STEPS = ("warp_compile", "warp_speed_quadrant", "warp_speed_randomwalls", "warp_pod")


def gpu_day(env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(GPU_DAY)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_an_interpreter_without_torch_stops_within_10_s_naming_it(tmp_path):
    venv = tmp_path / "notorch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    reports = tmp_path / "reports"
    start = time.monotonic()
    done = gpu_day(
        {"PY": str(python), "DEVICE": "cpu", "REPORT_DIR": str(reports), "PYTHONPATH": ""},
        timeout=60,
    )
    took = time.monotonic() - start
    assert done.returncode == 3, done.stdout + done.stderr
    assert took < NO_TORCH_S, took
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(python) in lines[0] and "has no torch" in lines[0]
    assert "/opt/torch/.venv/bin/python3" in lines[0]  # what to give on the GPU node
    assert not reports.exists()


def warp_without_cpu_compiler(folder: Path) -> Path:
    """This environment's warp package as the CUDA-only kit installs it: every file linked but
    `bin/warp-clang.so`. `warp/_src` is a real folder because Warp finds its `bin/` from the
    real path of `_src/..`."""
    spec = importlib.util.find_spec("warp")
    if spec is None:
        pytest.skip("warp-lang is not installed here")
    source = Path(spec.origin).parent
    if not (source / "bin" / "warp-clang.so").is_file():
        pytest.skip("this environment's Warp has no CPU compiler to leave out")
    warp = folder / "warp"
    for sub in ("", "_src", "bin"):
        (warp / sub).mkdir(parents=True)
        for entry in (source / sub).iterdir():
            if sub == "" and entry.name in ("_src", "bin"):
                continue
            if entry.name == "warp-clang.so":
                continue
            (warp / sub / entry.name).symlink_to(entry)
    return folder


def test_warp_steps_are_skipped_on_cpu_without_warp_cpu_compiler(tmp_path):
    site = warp_without_cpu_compiler(tmp_path / "site")
    reports = tmp_path / "reports"
    done = gpu_day(
        {
            "PY": sys.executable,
            "PYTHONPATH": str(site),
            "DEVICE": "cpu",
            "PARTS": "2",
            "DEADLINE": "120",
            "REPORT_DIR": str(reports),
        },
        timeout=180,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no step succeeded" in done.stderr.splitlines()[-1]
    (report,) = reports.glob("gpu-*-part2.md")
    text = report.read_text()
    environment = text.split("## Environment", 1)[1].split("\n## ", 1)[0]
    assert f"warp 1.19.0 {site}" in environment
    assert "warp CPU compiler: no" in environment
    for package in ("torch", "numpy", "numba", "llvmlite", "numba_cuda", "mujoco"):
        assert f"\n{package} " in environment or f"\n{package}:" in environment, package
    assert "CUDA visible: False" in environment
    for n, step in enumerate((*WARP_STEPS, "learn_chase"), start=1):
        section = text.split(f"## {n}. {step}\n", 1)[1].split("\n## ", 1)[0]
        assert "skipped: Warp has no CPU compiler here" in section, section
    assert "exit " not in text.split("## Summary", 1)[1]
