"""docs/extending.md, walked: a task from a module outside the package trains on pods and logs
its statistic; an `mlp` run on chase trains, plays in `eval play RUN random` with no network
flag, shows why it has no ratings in `eval --run`, and compares without all-zero panels."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller
from hns_train.eval.baselines import load_baselines
from hns_train.eval.cli import main as eval_main
from hns_train.eval.compare import draw_run, load_run

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["logging.progress=false", "logging.wandb=disabled"]


def worked_task() -> str:
    """The task module docs/extending.md shows, as written there."""
    text = (ROOT / "docs" / "extending.md").read_text()
    found = re.search(r"<!-- mytasks\.py[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/extending.md lost its mytasks.py example"
    return found.group(1)


def train_records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


@pytest.mark.slow
def test_a_task_of_the_users_own_module_trains_on_pods_and_logs_its_statistic(tmp_path):
    """`game.task=mytasks:PrepLockBonus` from a folder on PYTHONPATH, in a run whose pod is a
    process of its own (the local launcher): the controller checks the name, the pod imports the
    module, and the task's statistic reaches metrics.jsonl. Refused on the code before:
    `task='mytasks:PrepLockBonus' is not one of (...)`."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "mytasks.py").write_text(worked_task())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mine"), str(ROOT)])}
    cmd = [
        sys.executable, "-m", "hns_train.train", "--config", "smoke", f"runs_dir={tmp_path}",
        "name=bonus", "game.preset=quadrant", "game.task=mytasks:PrepLockBonus",
        "pipeline.backend=pod", "pipeline.launcher=local", "pod.worlds=4", "agent.ppo.epochs=1",
        "stop.versions=2", *QUIET,
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    train = train_records(tmp_path / "bonus")
    # records whose window saw episodes end (the last, written at the stop, may not have)
    episodes = [r for r in train if "episode/prep_box_locks" in r]
    assert episodes and all(np.isfinite(r["episode/prep_box_locks"]) for r in episodes), train[-1]
    # the task's statistic sits beside the game's own in every such record
    assert all("episode/hider_return" in r for r in episodes)


@pytest.fixture(scope="module")
def mlp_chase(tmp_path_factory) -> Path:
    """A chase run of the `mlp` network: one pod, a few optimisation steps."""
    root = tmp_path_factory.mktemp("runs")
    cfg = load_config(
        CONFIG_DIR / "chase.yaml",
        [f"runs_dir={root}", "name=mlp", "agent.network.kind=mlp", "pipeline.backend=pod",
         "pipeline.launcher=serial", "pod.worlds=16", "stop.versions=4", "logging.every_s=0.5",
         *QUIET],
    )  # fmt: skip
    summary = Controller(cfg).run()
    assert summary.reason == "reached stop.versions=4"
    return root / "mlp"


@pytest.mark.slow
def test_an_mlp_run_trains_on_chase_and_plays_with_no_network_flag(mlp_chase, capsys):
    ckpt = CheckpointDir(mlp_chase / "checkpoints").latest()
    assert ckpt.meta["network"]["kind"] == "mlp"  # the checkpoint names its network
    weights = ckpt.state["ppo"]["model"]
    assert "policy_net.body.0.weight" in weights and "policy_net.lstm.weight_ih" not in weights
    train = train_records(mlp_chase)
    losses = [r["loss/value_loss"] for r in train if "loss/value_loss" in r]
    assert train[-1]["version"] >= 4 and losses and all(np.isfinite(losses))
    # the entity network's sizes, nothing about the mlp: `play` builds what the checkpoint names
    argv = ["play", str(mlp_chase), "random", "--matches", "1", "--no-video", "--quiet"]
    assert eval_main(argv) == 0, capsys.readouterr().err
    assert len(list((mlp_chase / "replays").glob("play_*.npz"))) == 2  # one match per role


@pytest.mark.slow
def test_a_chase_run_without_eval_workers_says_why_it_has_no_ratings(mlp_chase, capsys):
    assert eval_main(["--run", str(mlp_chase)]) == 0
    out = capsys.readouterr().out
    assert "no rated matches: this run has no evaluation workers (eval.n_workers=0" in out


@pytest.mark.slow
def test_a_chase_runs_compare_figure_has_no_all_zero_panel(mlp_chase):
    """Chase has no boxes, ramps or preparation: their panels were flat at zero (3 of 4), and
    the title promised Rapid's dashed onsets where the run's span holds none."""
    run = load_run(mlp_chase)
    fig = draw_run(run, load_baselines())
    axes = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in axes] == ["outcome"]
    for ax in axes:
        drawn = [line.get_ydata() for line in ax.get_lines() if len(line.get_ydata()) > 1]
        assert any(np.any(np.asarray(y, float) != 0) for y in drawn), ax.get_title(loc="left")
    dashed = [ln for ax in axes for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    title = fig._suptitle.get_text()
    assert ("dashed" in title) == bool(dashed), title
    assert "not drawn, the chase game has none: boxes (preparation), ramps, box surfing" in title
