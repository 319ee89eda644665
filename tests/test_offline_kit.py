"""Runs without the optional packages: no wandb, no imageio-ffmpeg (an offline kit's install)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


WITHOUT_PACKAGES = """
import sys
sys.modules["wandb"] = None  # as in an install of the kit without its logging extras
sys.modules["imageio_ffmpeg"] = None
from pathlib import Path
from hns_train.distributed.wandb_logger import WandbLogger, log_reference_run
from hns_train.eval.video import write_video
run = Path(sys.argv[1])
for _ in range(2):
    logger = WandbLogger(run, {"name": "x"}, mode="offline")
    logger.log({"kind": "train", "episodes": 1, "frames": 10})
    logger.finish()
print("enabled", logger.enabled, "reference", log_reference_run(dir=run, mode="offline"))
print("wandb dir", (run / "wandb").exists())
try:
    write_video(None, run / "x.mp4")
except ValueError as err:
    print("video:", err)
"""


def test_runs_go_without_wandb_and_ffmpeg_saying_so_once(tmp_path):
    done = run(
        [sys.executable, "-c", WITHOUT_PACKAGES, str(tmp_path / "run")],
        env={**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "enabled False reference None" in done.stdout
    assert "wandb dir False" in done.stdout
    assert "mp4 needs the imageio-ffmpeg package" in done.stdout
    assert done.stderr.count("wandb is not installed") == 1, done.stderr
    assert "Traceback" not in done.stderr
