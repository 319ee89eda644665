"""Two tests that `tests/test_makefile.py` runs through `make test` and stops with a signal: the
first trains (a controller and its worker processes, until stopped), the second must never run.
Not collected by the suite (the name does not start with test_); the folder to use comes from
STOP_TARGET_DIR."""

import os
from pathlib import Path

import pytest

from hns_train import train

DIR = os.environ.get("STOP_TARGET_DIR")
pytestmark = pytest.mark.skipif(not DIR, reason="run by tests/test_makefile.py only")


def test_trains_until_stopped():
    code = train.main(
        [
            "--config",
            "smoke",
            f"runs_dir={DIR}",
            "name=run",
            "pipeline.launcher=local",
            "stop.versions=0",
            "stop.minutes=10",
        ]
    )
    pytest.fail(f"the run ended ({code}): a stop signal ends the suite with it")


def test_after_the_signal():
    (Path(DIR) / "second-test-ran").touch()
