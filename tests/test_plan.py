"""`hns-train plan`: the layout and hours it projects from a calibration, and the config it
writes trains."""

from __future__ import annotations

import re

import pytest

from hns_train import plan
from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller
from hns_train.eval.baselines import load_quadrant_onsets

NODE = load_config(CONFIG_DIR / "quadrant_node.yaml")
# a pod rank's costs as measured on a 2-core machine (docs/reproduction.md), for the arithmetic
CAL = plan.Calibration(
    ranks=2, cpu_ms=2.0, collect_ms=1.4, sim_share=0.5, learn_ms=0.5, trained_share=0.9,
    pss_gib=0.7, wall_efficiency=0.9, seconds=45, load=(0.1, 0.1),
)  # fmt: skip


def test_the_paper_onsets_come_from_the_baselines_file():
    onsets = {o.phase: o for o in load_quadrant_onsets()}
    assert list(onsets) == ["door_blocking", "ramp_use", "ramp_defense"]
    assert onsets["door_blocking"].frames == 2_690_000 * 80
    assert "blog post" in onsets["ramp_use"].source.where


def test_pods_one_per_core_and_the_hours_to_each_phase(tmp_path):
    node = plan.plan_for(plan.Machine(64, 0, 1, 256, False), CAL, NODE, [])
    assert "pipeline.n_trainers=64" in node.settings and node.backend == "pod"
    # a core's CPU rate at the wall efficiency the calibrating ranks had
    assert node.env_fps == pytest.approx(64 * 500 * 0.9)
    assert node.trained_fps == pytest.approx(64 * 500 * 0.9 * 0.9)
    # configs/quadrant_node.yaml at 64 ranks: at least the paper's 64k chunks of 10 per update
    assert node.batch_chunks10 >= 64_000 and not node.notes
    hours = {p: h for p, _, h in plan.phase_hours(node.env_fps)}
    assert hours["door_blocking"] == pytest.approx(215.2e6 / 28_800 / 3600)
    assert "projected" in node.how
    # memory decides when it is short: 16 GiB hold 21 ranks of 0.7 GiB, not 64
    small = plan.plan_for(plan.Machine(64, 0, 1, 16, False), CAL, NODE, [])
    assert small.ranks == 21 and any("memory" in n for n in small.notes)
    assert any("under the paper's" in n for n in small.notes)
    # with a GPU: the cores collect, the GPU acts and learns, and it says that is unmeasured
    gpu = plan.plan_for(plan.Machine(16, 1, 1, 64, False), CAL, NODE, [])
    assert gpu.env_fps == pytest.approx(14 * 1e3 / 1.4 * 0.9)
    assert "never" in gpu.how and "pipeline.device=cuda" in gpu.settings
    assert gpu.batch_chunks10 >= 64_000
    written = tmp_path / "gpu.yaml"
    plan.write_config(gpu, "quadrant_node.yaml", written)
    assert load_config(written).pipeline.n_actors == 14  # the layout passes the config's checks


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--cores", "0"], "--cores"),
        (["--nodes", "0"], "--nodes"),
        (["--memory", "-1"], "--memory"),
    ],
)
def test_bad_machine_descriptions_are_one_line_errors(argv, named, capsys):
    with pytest.raises(SystemExit):
        plan.main(argv)
    assert named in capsys.readouterr().err


@pytest.mark.slow
def test_the_plan_calibrates_here_and_the_config_it_writes_trains(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    small = ["pod.worlds=4", "agent.ppo.epochs=1", "agent.ppo.minibatches=1"]
    argv = ["--config", "smoke", "--seconds", "5", "--cores", "2", "--memory", "8"]
    assert plan.main([*argv, "--out", str(out), *small]) == 0
    text = capsys.readouterr().out
    assert "measured:" in text and "projected:" in text and "ramp_defense" in text
    # one rank per core here (2 on the test machines, 1 where only one core is left to it)
    efficiency = float(re.search(r"ran at ([0-9.]+) of that rate on the clock", text)[1])
    assert 0.05 < efficiency <= 1.0, text
    cfg = load_config(out, [f"runs_dir={tmp_path}", "stop.versions=2"])
    assert (cfg.pipeline.backend, cfg.pipeline.n_trainers, cfg.pod.worlds) == ("pod", 2, 4)
    summary = Controller(cfg).run()
    assert summary.reason == "reached stop.versions=2" and summary.restarts == 0
