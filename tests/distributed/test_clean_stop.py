"""A run that stops normally logs no dropped message; a drop during the run is still logged."""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hns_train.config import load_config
from hns_train.distributed.controller import Controller
from hns_train.distributed.streams import InferenceClient, InferenceServer

ROOT = Path(__file__).resolve().parents[2]


def test_a_normal_stop_of_a_real_run_logs_no_dropped_message(tmp_path):
    # One world per actor group: the policy worker is the bottleneck, so two actors' requests
    # are in flight whenever the run stops (here right after the first frames). Before policy
    # workers stopped first, it answered an actor that had left, logging "no connected peer
    # ...; act_result message dropped" (2 runs of 2 on the code before the fix).
    cmd = [
        sys.executable,
        "-m",
        "hns_train.train",
        "--config",
        "chase",
        f"runs_dir={tmp_path}",
        "name=stop",
        "pipeline.n_actors=2",
        "pipeline.envs_per_actor=2",
        "stop.frames=1",
        "logging.progress=false",
        "logging.wandb=disabled",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "reached stop.frames=1" in log, log
    assert "dropped" not in log and "no connected peer" not in log, log


def test_policy_workers_are_asked_to_stop_before_the_workers_they_serve(tmp_path):
    cfg = load_config(
        "smoke", [f"runs_dir={tmp_path}", "name=order", "stop.versions=0", "stop.frames=1"]
    )
    controller = Controller(cfg)
    asked: list[str] = []
    send = controller.control.send

    def recording(worker_id, kind, *args, **kwargs):
        if kind == "stop":
            asked.append(worker_id.decode().rpartition(".")[0])
        return send(worker_id, kind, *args, **kwargs)

    controller.control.send = recording
    summary = controller.run()
    assert summary.reason == "reached stop.frames=1"
    assert sorted(asked) == ["actor0", "policy0", "trainer0"]
    assert asked[0] == "policy0"


def test_a_reply_to_an_actor_gone_during_the_run_is_still_logged(caplog):
    caplog.set_level(logging.WARNING, logger="hns_train.distributed.streams")
    folder = tempfile.mkdtemp(prefix="hns-")
    with InferenceServer(f"ipc://{folder}/inference") as server:
        client = InferenceClient(server.endpoint, identity="actor0.0")
        assert client.send("act", {"x": np.zeros(3, np.float32)}, {"group": 0})
        requests = []
        deadline = time.monotonic() + 10
        while not requests and time.monotonic() < deadline:
            requests = server.recv(timeout_ms=100)
        assert requests, "the request never arrived"
        peer, _ = requests[0]
        client.close()  # the actor died with its request unanswered
        delivered = True
        while delivered and time.monotonic() < deadline:  # until the server sees it gone
            delivered = server.reply(peer, "act_result", {"y": np.ones(3, np.float32)})
            time.sleep(0.01)
        assert not delivered
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("no connected peer" in m and "act_result message dropped" in m for m in lines)
