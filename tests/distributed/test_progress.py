"""`python -m hns_train.train` in a pseudo-terminal (`script`): the progress bar shows env frames
and episodes from the start and is redrawn while the run goes, worker log lines do not run into
it, and the run stops close to `stop.minutes`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hns_train.config import load_config
from hns_train.distributed.reporting import ProgressBar

ROOT = Path(__file__).resolve().parents[2]
BAR = re.compile(r"env frames: (\d+) \[(\d\d):(\d\d), [^,\]]+, (?:workers \d+/\d+ up, )?episodes ")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux's script")
def test_bar_moves_in_a_terminal_and_the_run_stops_on_time(tmp_path):
    minutes = 0.25
    train = [
        sys.executable, "-m", "hns_train.train", "--config", str(ROOT / "configs" / "smoke.yaml"),
        f"runs_dir={tmp_path}", "name=tty", "logging.progress=true", "stop.versions=0",
        f"stop.minutes={minutes}",
    ]  # fmt: skip
    typescript = tmp_path / "typescript"
    # script's pseudo-terminal has no size unless it is given one (tqdm then draws nothing)
    command = "stty cols 160 rows 40; exec " + " ".join(train)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    start = time.monotonic()
    subprocess.run(
        ["script", "-qfec", command, str(typescript)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=300, check=True,
    )  # fmt: skip
    text = typescript.read_text(errors="replace")
    draws = [BAR.search(part) for part in re.split(r"[\r\n]", text)]
    draws = [(int(m[1]), 60 * int(m[2]) + int(m[3])) for m in draws if m]
    assert len(draws) >= 8, text[-2000:]  # redrawn about every second for 15 s
    frames, elapsed = zip(*draws, strict=True)
    assert list(frames) == sorted(frames) and frames[-1] > frames[0]
    assert list(elapsed) == sorted(elapsed) and elapsed[-1] - elapsed[0] >= 8
    assert "stopped         reached stop.minutes=0.25" in text
    wall = int(re.search(r"wall clock\s+(\d+) s", text)[1])
    assert wall <= minutes * 60 + 5, text[-2000:]
    assert time.monotonic() - start < minutes * 60 + 60  # start-up and shut-down included


def test_the_population_bar_is_the_runs_bar(capsys):
    """A population shows its members' frames on the run's bar, against `stop.frames`."""
    cfg = load_config("configs/chase.yaml", ["stop.frames=1000"])
    bar = ProgressBar(cfg, "population p")
    bar.show(250, "members 2 exploits 0")
    bar.close()
    shown = capsys.readouterr().err
    assert "population p:  25%" in shown and "250/1000" in shown and "members 2" in shown
    quiet = ProgressBar(cfg, "population p", disable=True)
    quiet.show(500, "members 2 exploits 0")
    quiet.close()
    assert capsys.readouterr().err == ""
