"""`python -m hns_train.train` in a pseudo-terminal (`script`): the progress bar shows env frames
and episodes from the start and is redrawn while the run goes, worker log lines do not run into
it, and the run stops close to `stop.minutes`, which a run and a population count alike."""

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
from hns_train.distributed import controller, population
from hns_train.distributed.controller import Controller
from hns_train.distributed.population import PopulationController
from hns_train.distributed.reporting import ProgressBar

ROOT = Path(__file__).resolve().parents[2]
BAR = re.compile(r"env frames: (\d+) \[(\d\d):(\d\d), [^,\]]+, (?:workers \d+/\d+ up, )?episodes ")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux's script")
def test_bar_moves_in_a_terminal_and_the_run_stops_on_time(tmp_path):
    minutes = 0.4  # start-up counts too (stop.minutes): about 15 s or more of redraws
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
    assert len(draws) >= 8, text[-2000:]  # redrawn about every second once workers run
    frames, elapsed = zip(*draws, strict=True)
    assert list(frames) == sorted(frames) and frames[-1] > frames[0]
    assert list(elapsed) == sorted(elapsed) and elapsed[-1] - elapsed[0] >= 8
    assert f"stopped         reached stop.minutes={minutes}" in text
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


def slowed(function, delay_s):
    def slow(*args, **kwargs):
        time.sleep(delay_s)
        return function(*args, **kwargs)

    return slow


def test_a_run_and_a_population_count_stop_minutes_from_their_start_and_on_after_a_resume(
    tmp_path, monkeypatch
):
    # On the code before, the run's clock started after its start-up (hardware, launcher,
    # sockets) and began again at each resume; the population's counted the resumed time.
    delay = 1.0
    quiet = ["logging.wandb=disabled", "logging.progress=false", "stop.versions=0"]
    monkeypatch.setattr(controller, "hardware_info", slowed(controller.hardware_info, delay))
    cfg = load_config("smoke", [f"runs_dir={tmp_path}", "name=run", "stop.minutes=1", *quiet])
    run = Controller(cfg)
    try:
        assert run.elapsed_s() >= delay
        assert run._stop_in_s() <= 60 - delay
        run.tick()
        assert not run.stop_reason
        run.prior_s = 60  # as a resume restores it: a run resumed with its minute spent
        run.tick()
        assert run.stop_reason == "reached stop.minutes=1.0"
        run._check_made_frames()  # nothing was left to do: no error for want of frames
        assert not run.error
    finally:
        run._stop_workers()

    monkeypatch.setattr(population, "parse_ranges", slowed(population.parse_ranges, delay))
    members = ["population.members=2", "eval.n_workers=0", "stop.minutes=1", *quiet]
    pop = PopulationController(load_config("chase", [f"runs_dir={tmp_path}", *members]))
    try:
        assert pop.elapsed_s() >= delay  # the time its stop limits and records count
    finally:
        pop.close()
