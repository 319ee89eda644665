"""`make setup` picks PyTorch's CPU wheel index when no NVIDIA driver answers, and the choice can
be overridden (read from `make -n`, which prints the commands without running them); `make test`
stops on Ctrl-C and SIGTERM, worker processes included."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
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


def make_commands(tmp_path, target) -> str:
    done = subprocess.run(
        ["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout


def test_train_installs_the_package_alone_and_test_adds_the_test_extra(tmp_path):
    train = make_commands(tmp_path, "train")
    assert "pip install -q -e .\n" in train and "[test]" not in train
    assert "-m hns_train.train" in train
    test = make_commands(tmp_path, "test")
    assert "pip install -q -e .\n" in test and 'pip install -q -e ".[test]"' in test
    assert test.index('".[test]"') < test.index("-m pytest")


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


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_make_test_stops_on_a_signal_with_its_workers(tmp_path, sig):
    """`make test` while a test trains with worker processes: the signal stops the run (its
    workers end) and the whole suite, not only the running test. SIGINT goes to the whole
    foreground process group, as Ctrl-C in a terminal does; SIGTERM to make alone. With the
    Makefile's two pytest workers, as `make test` runs by default."""
    venv = Path(sys.prefix)
    env = {**os.environ, "STOP_TARGET_DIR": str(tmp_path), "WANDB_MODE": "disabled"}
    make = subprocess.Popen(
        ["make", "test", f"VENV={venv}", "-o", f"{venv}/.installed", "-o",
         f"{venv}/.installed-test",
         "PYTEST_ARGS=-n 2 --dist loadfile -p no:cacheprovider tests/stop_target.py"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while len(workers := _descendants(make.pid)) < 4 or not (tmp_path / "run").is_dir():
            assert make.poll() is None and time.monotonic() < deadline, make.stdout.read()
            time.sleep(0.5)
        time.sleep(3.0)  # the workers have started and connect
        workers = _descendants(make.pid)  # pytest and the run's worker processes
        if sig == signal.SIGINT:
            os.killpg(make.pid, sig)
        else:
            make.send_signal(sig)
        out, _ = make.communicate(timeout=120)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
    assert make.returncode != 0
    assert f"stopped by {sig.name}" in out, out
    assert not (tmp_path / "second-test-ran").exists()
    time.sleep(1.0)
    assert [p for p in workers if _running(p)] == []
