"""`pipeline.backend=warp`: actors that simulate on MuJoCo Warp and run the policy themselves.

A real serial run on the smoke config (chase, 4 worlds): the Warp actor takes the trainer's
parameters from the parameter stream, acts, and its chunks pass the trainer's checks and train
it to the stop version, with checkpoints and episode statistics, and no policy worker is
started. Needs the optional extra `warp`; the chase kernels compile on the first run of a
machine (about 20-40 s on 2 cores, cached after that), hence `slow`.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mujoco_warp")

from hns_train.agents.checkpoint import CheckpointDir  # noqa: E402
from hns_train.config import CONFIG_DIR, load_config  # noqa: E402
from hns_train.distributed.controller import Controller  # noqa: E402

pytestmark = pytest.mark.slow


def test_serial_run_with_warp_actors_trains_to_the_stop_version(tmp_path):
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [f"runs_dir={tmp_path}", "name=warp", "pipeline.backend=warp", "stop.versions=2"],
    )
    controller = Controller(cfg)
    assert [s.kind for s in controller.specs()].count("policy") == 0
    summary = controller.run()
    assert summary.reason == "reached stop.versions=2"
    assert summary.version >= 2 and summary.frames > 0 and summary.episodes > 0
    run = tmp_path / "warp"
    assert CheckpointDir(run / "checkpoints").latest() is not None
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    train = [r for r in records if r["kind"] == "train"]
    assert train and "loss/approx_kl" in train[-1]
    assert any("episode/seeker_return" in r for r in train)
    assert train[-1].get("env/physics_warnings", 0) == 0
