"""Test-wide settings.

Headless rendering must be chosen before MuJoCo is first imported. Torch uses one thread
(`HNS_TEST_THREADS` to measure the numerical tests with more, `bench/tolerances.py`): tests act
on small batches, where more threads only contend with each other and with the worker processes
that pipeline tests start on the same two cores. Ctrl-C and SIGTERM stop the
whole suite (below).
"""

import contextlib
import fcntl
import os
import signal
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.tolerances import TEST_THREADS  # noqa: E402

torch.set_num_threads(TEST_THREADS)


# ---------------------------------------------------------------- stopping the suite on a signal
# Ctrl-C (SIGINT) or SIGTERM stops the whole run, not only the test that is running. A test that
# trains holds the controller's own handlers (a clean stop: the run's workers end with it), so
# the test itself only ends; Python's wakeup file descriptor still receives every signal number
# that any Python-level handler takes, so the suite reads it after each test and stops there.
# Between training runs, SIGTERM raises KeyboardInterrupt as Ctrl-C does, so fixtures tear down
# (and stop the processes they started) instead of the interpreter dying with them running.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# Under pytest-xdist, make passes SIGTERM on to the controller alone: the controller hands it on
# to its workers (their pids, below), which stop as a single pytest process does. Ctrl-C reaches
# the workers from the terminal itself.
_WORKER_PIDS: list[int] = []


def _interrupt(signum, frame):
    if signum == signal.SIGTERM:
        for pid in _WORKER_PIDS:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    _WORKER_PIDS.append(node.gateway._rinfo().pid)


def pytest_sessionstart(session):
    if threading.current_thread() is not threading.main_thread():
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    session.config._stop_signal_pipe = read
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _interrupt)
    if session.config.getoption("numprocesses", None):  # the xdist controller: it runs no test
        signal.signal(signal.SIGINT, _interrupt)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield
    read = getattr(item.config, "_stop_signal_pipe", None)
    if read is None:
        return
    try:
        received = os.read(read, 4096)
    except BlockingIOError:
        return
    names = sorted({signal.Signals(b).name for b in received if b in STOP_SIGNALS})
    if names:
        item.session.shouldstop = f"stopped by {', '.join(names)}"


# ---------------------------------------------------------------- parallel workers (pytest-xdist)
# `make test` runs two workers with `--dist loadfile`: the tests of one file stay on one worker,
# in order (later README commands read the runs earlier ones made; module fixtures are built
# once). Tests that start a local Ray instance take a lock first, so that the two workers never
# run two Ray instances at once.
RAY_FILES = {"test_ray.py", "test_population_run.py", "test_third_party_learning.py"}
RAY_LOCK = Path(tempfile.gettempdir()) / "hns-train-tests-ray.lock"


@pytest.fixture(autouse=True)
def one_ray_instance_at_a_time(request):
    if request.node.path.name not in RAY_FILES:
        yield
        return
    with open(RAY_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
