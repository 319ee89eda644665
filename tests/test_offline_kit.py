"""The offline kit rehearsed end to end: built, installed with no index, then gpu_day from it.

The kit is built for this Python by bench/offline_kit.py (pip resolves and downloads from the
index, so the test is skipped where pip cannot reach one), without warp-lang's big library,
the packages torch brings and matplotlib (this environment has them; they are left out to keep
the test short), in parts of KIT_PART_MB = 4 so that a wheel larger than a part (mujoco-core)
is compressed, split and joined. Then:
- a missing part: part-1's install.sh installs the rest and names the part and what it held,
  with no traceback; a damaged piece is refused by its checksum;
- all parts: everything installs into the same folder (pip the first time, unzip the second),
  and `bench/gpu_day.sh` runs from the checkout with that folder on PYTHONPATH (DEVICE=cpu, a
  short DEADLINE): the report holds every step's section with its exit status, or its skip,
  and mujoco comes from the install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KIT_PART_MB = 4
SKIP = "torch numpy numba llvmlite warp-lang matplotlib"
STEPS = (
    "warp_compile",
    "warp_speed_quadrant",
    "warp_speed_randomwalls",
    "warp_pod",
    "c_pod",
    "learn_chase",
    "batch_memory",
)
DEADLINE_S = 30


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kit") / "kit"
    built = run(
        [
            sys.executable,
            str(ROOT / "bench" / "offline_kit.py"),
            "--out",
            str(out),
            "--skip",
            SKIP,
            "--part-mb",
            str(KIT_PART_MB),
            "--no-extras",
            "--xz-preset",
            "1",
        ],
        timeout=300,
    )
    if built.returncode != 0 and "could not resolve" in built.stderr + built.stdout:
        pytest.skip(f"pip cannot reach a package index here: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def part_of(manifest: dict, project: str) -> int:
    entry = next(e for e in manifest["wheels"] if e["project"] == project)
    return entry["pieces"][-1]["part"]


@pytest.mark.slow
def test_kit_installs_without_index_and_runs_gpu_day(kit, tmp_path):
    manifest = json.loads((kit / "part-1" / "kit.json").read_text())
    parts = sorted(kit.glob("part-*"))
    assert len(parts) == manifest["parts"] >= 2
    for part in parts:  # every part within the limit, install.sh and manifest included
        assert sum(f.stat().st_size for f in part.iterdir()) <= KIT_PART_MB * 2**20
    split = [e for e in manifest["wheels"] if "pieces" in e]
    assert "mujoco-core" in {e["project"] for e in split}
    assert all(len(e["pieces"]) >= 2 for e in split)
    projects = {e["project"] for e in manifest["wheels"]}
    assert not projects & {"torch", "numpy", "warp-lang", "wandb", "imageio-ffmpeg", "glfw"}

    # a missing part: the rest is installed, the part and what it held are named
    target = tmp_path / "site"
    hold = part_of(manifest, "mujoco-core")
    away = tmp_path / "away"
    shutil.move(kit / f"part-{hold}", away)
    env = {**os.environ, "PYTHON": sys.executable, "PIP_NO_INDEX": "1"}
    first = run(["sh", str(kit / "part-1" / "install.sh"), str(target)], env=env, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    assert f"part-{hold} is missing" in first.stdout
    assert "mujoco-core" in first.stdout
    assert "mujoco_core" not in (target / ".hns-kit-installed").read_text()
    assert (target / "pettingzoo").is_dir()  # a wheel of a part that is present

    # a damaged piece is refused by its checksum, plainly
    shutil.move(away, kit / f"part-{hold}")
    piece = next((kit / f"part-{hold}").glob("mujoco_core-*.xz.*"))
    original = piece.read_bytes()
    piece.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    bad = run(["sh", str(kit / "part-1" / "install.sh"), str(target)], env=env, timeout=300)
    assert bad.returncode == 2
    assert "does not match its checksum" in bad.stderr and "Traceback" not in bad.stderr
    piece.write_bytes(original)

    # all parts: the rest joins and installs into the same folder, unzipped as without pip
    second = run(
        ["sh", str(kit / "part-1" / "install.sh"), str(target), "--unzip"], env=env, timeout=300
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "is missing" not in second.stdout
    where = run(
        [sys.executable, "-c", "import mujoco; print(mujoco.__file__, mujoco.__version__)"],
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr

    # gpu_day from the install: every step has its section and status within the deadline
    reports = tmp_path / "reports"
    day = run(
        ["bash", str(ROOT / "bench" / "gpu_day.sh")],
        env={
            **os.environ,
            "PY": sys.executable,
            "PYTHONPATH": str(target),
            "DEVICE": "cpu",
            "DEADLINE": str(DEADLINE_S),
            "MIN_STEP_S": "3",
            "REPORT_DIR": str(reports),
        },
        timeout=DEADLINE_S + 60,
    )
    assert day.returncode == 0, day.stderr[-2000:]
    (report,) = reports.glob("gpu-*.md")
    text = report.read_text()
    for n, step in enumerate(STEPS, start=1):
        section = text.split(f"## {n}. {step}\n", 1)
        assert len(section) == 2, f"no section for {step} in\n{text}"
        status = section[1].split("\n## ", 1)[0]
        assert "exit " in status or "skipped:" in status, status
    assert f"mujoco 4.0.0 {target}" in text
    assert "## Summary" in text and f"of DEADLINE={DEADLINE_S}" in text


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
print("enabled", logger.run is not None, "reference", log_reference_run(dir=run, mode="offline"))
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
