"""A regular (non-editable) wheel install trains and evaluates from any folder: the configs ship
as package data, `hns-train` / `hns-eval` are console scripts, and `py.typed` is there.

The wheel goes into a fresh venv with `--no-deps`; its dependencies come from this interpreter's
site-packages through a .pth file (no download), so the test is quick."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*cmd, cwd, timeout=300) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("MUJOCO_GL", "egl")
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_wheel_install_trains_with_shipped_configs(tmp_path):
    dist = tmp_path / "dist"
    # the build backend from this interpreter when it has one (no download), else pip's own
    local = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", *local, "-q", "-w", dist, ROOT,
        cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = dist.glob("hns_train-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        f"hns_train/configs/{p.relative_to(ROOT / 'configs')}"
        for p in (ROOT / "configs").glob("**/*.yaml")
    }
    packages = {
        str(p.parent.relative_to(ROOT)) + "/__init__.py" for p in ROOT.glob("hns_train/**/*.py")
    }  # every source package is listed in pyproject.toml
    assert shipped <= names and packages <= names and "hns_train/py.typed" in names

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    site = next(venv.glob("lib/python*/site-packages"))
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    run(
        sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
        "--no-index", wheel, cwd=tmp_path,
    )  # fmt: skip

    work = tmp_path / "elsewhere"  # no configs/ here: they must come from the package
    work.mkdir()
    where = run(python, "-c", "import hns_train; print(hns_train.__file__)", cwd=work)
    assert Path(where.strip()).is_relative_to(site)
    assert "--resume RUN_DIR" in run(bin_dir / "hns-train", "--help", cwd=work)
    own = work / "mine.yaml"  # a user's own YAML on a shipped base
    own.write_text("base: smoke.yaml\nname: mine\nstop:\n  versions: 2\n")
    out = run(bin_dir / "hns-train", "--config", own, f"runs_dir={work / 'runs'}", cwd=work)
    assert "reached stop.versions=2" in out
    assert (work / "runs" / "mine" / "checkpoints").is_dir()
    # the README's `--config configs/chase.yaml` from a folder without configs/
    check = "from hns_train.config import load_config as f; print(f('configs/chase.yaml').name)"
    assert run(python, "-c", check, cwd=work).strip() == "chase"
    # a transfer task's config, whose base is one folder up
    check = check.replace("configs/chase.yaml", "configs/transfer/count_based.yaml")
    assert run(python, "-c", check, cwd=work).strip() == "count_based"
    out = run(bin_dir / "hns-eval", "compare", "latest", cwd=work)
    assert "Rapid" in out and "run mine" in out
