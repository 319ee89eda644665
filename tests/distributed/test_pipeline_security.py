"""A running encrypted pipeline refuses peers without the run's CURVE keys and goes on training.

The run uses real worker processes over tcp with `pipeline.encrypt` (what every Ray or
non-loopback run does). Intruders without keys, or with keys of another run, try to push
samples to the trainer, forge a trainer heartbeat to the controller and read the parameters.
A client holding the run's keys is the control group: its malformed chunk does reach the trainer
(which logs that it dropped it) and it reads the parameters, so the checks that nothing else got
through could see a breach.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from waiting import wait_for

from hns_train.config import CONFIG_DIR, load_config
from hns_train.distributed.controller import Controller
from hns_train.distributed.security import RunKeys
from hns_train.distributed.streams import ControlClient, ParamSubscriber, SampleSender

FORGED_VERSION = 1_000_000
DROPPED = "trainer0 chunks: dropped"


def intrude(endpoints: dict, keys: RunKeys | None, tag: str) -> bool:
    """Push a junk chunk, forge trainer0's heartbeat, try to read parameters; True if any
    parameters arrived."""
    junk = {"rewards": np.full((3, 2), 1e9, np.float32)}
    with SampleSender(endpoints["samples"], security=keys) as tx:
        tx.send("chunk", junk, {"actor": tag}, timeout_ms=500)
    with ControlClient(endpoints["control"], identity="trainer0", security=keys) as forged:
        forged.send("heartbeat", meta={"version": FORGED_VERSION})
        forged.send("stopped")
    with ParamSubscriber(endpoints["params"], security=keys) as sub:
        got = sub.poll_latest(timeout_ms=1500) is not None
    time.sleep(0.5)  # let libzmq finish (and refuse) the handshakes before the sockets go
    return got


@pytest.mark.slow
def test_peers_without_the_run_keys_are_refused_and_the_run_goes_on(tmp_path, capfd):
    cfg = load_config(
        CONFIG_DIR / "smoke.yaml",
        [
            f"runs_dir={tmp_path}",
            "name=secure",
            "pipeline.launcher=local",
            "pipeline.transport=tcp",
            "pipeline.encrypt=true",
            "stop.versions=0",
        ],
    )
    controller = Controller(cfg)
    assert controller.security is not None
    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: controller.version >= 1, 240, "a first optimisation step")
        intruders = {"no keys": None, "another run's keys": RunKeys.generate()}
        read = {who: intrude(controller.endpoints, keys, who) for who, keys in intruders.items()}
        before = controller.version
        wait_for(lambda: controller.version >= before + 2, 240, "training to go on")
        refused_err = capfd.readouterr().err
        # Control group: the run's own keys get a (malformed) chunk through to the trainer.
        with SampleSender(controller.endpoints["samples"], security=controller.security) as tx:
            assert tx.send("chunk", {"rewards": np.zeros((3, 2), np.float32)}, timeout_ms=2000)
            wait_for(lambda: DROPPED in capfd.readouterr().err, 60, "the keyed chunk's rejection")
        with ParamSubscriber(controller.endpoints["params"], security=controller.security) as sub:
            assert sub.poll_latest(timeout_ms=10_000) is not None, "keyed reader got nothing"
    finally:
        controller.request_stop("test over")
        thread.join(120)
    assert not thread.is_alive()
    assert read == {"no keys": False, "another run's keys": False}, "parameters leaked"
    assert DROPPED not in refused_err, "an intruder's chunk reached the trainer"
    # The forged heartbeat and 'stopped' never counted: the version is the trainer's own and the
    # trainer was still running (and checkpointing) when the test stopped the run.
    assert controller.stop_reason == "test over" and not controller.error
    assert before + 2 <= controller.version < 1000
    assert controller.workers["trainer0"].restarts == 0
    # The keys were handed to the workers in memory: nothing secret lands in the run directory.
    secret = controller.security.server_secret.decode()
    for path in (tmp_path / "secure").rglob("*"):
        if path.is_file() and path.stat().st_size < 1 << 20:
            assert secret not in path.read_text(errors="replace"), path
