"""No single process or message can end or poison a run: killed or hung workers, killed
controllers, well-formed but wrong messages on every stream, impostors on the control channel,
resumes without a checkpoint. Real processes, real ZeroMQ sockets, kill -9, SIGSTOP."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from waiting import alive, children_of, wait_for

from hns_train.agents.checkpoint import CheckpointDir
from hns_train.agents.pool import PolicyPool
from hns_train.config import CONFIG_DIR, load_config, save_config
from hns_train.distributed.actor import ActorWorker
from hns_train.distributed.contract import state_dict_to_arrays
from hns_train.distributed.controller import Controller, WorkerState
from hns_train.distributed.launchers import make_endpoints
from hns_train.distributed.policy import PolicyWorker
from hns_train.distributed.shared_rows import RequestLayout, SharedBlock
from hns_train.distributed.streams import (
    ControlClient,
    ControlServer,
    InferenceClient,
    InferenceServer,
    ParamPublisher,
    SampleReceiver,
    SampleSender,
)
from hns_train.distributed.trainer import TrainerWorker
from hns_train.distributed.worker import (
    ControllerGone,
    ParentWatch,
    Worker,
    WorkerSpec,
    pool_dir,
)
from tests.synthetic import synthetic_chunk

ROOT = Path(__file__).resolve().parents[2]
SMOKE = CONFIG_DIR / "smoke.yaml"


def smoke(tmp_path, *overrides):
    return load_config(SMOKE, [f"runs_dir={tmp_path}", *overrides])


def local(tmp_path, name, *overrides):
    return smoke(tmp_path, f"name={name}", "pipeline.launcher=local", "stop.versions=0", *overrides)


def run_in_thread(controller: Controller) -> threading.Thread:
    thread = threading.Thread(target=controller.run, daemon=True)
    thread.start()
    return thread


def stop(controller: Controller, thread: threading.Thread, limit_s: float = 90) -> float:
    """Stop the run; how long the shutdown took."""
    start = time.monotonic()
    controller.request_stop("test over")
    thread.join(limit_s)
    assert not thread.is_alive(), "the controller did not shut down"
    return time.monotonic() - start


def no_worker_left(controller: Controller) -> bool:
    pids = [s.pid for s in controller.workers.values() if s.pid]
    return not any(alive(p) for p in pids)


def finite(module: torch.nn.Module) -> bool:
    return all(
        bool(torch.isfinite(v).all()) for v in module.state_dict().values() if v.is_floating_point()
    )


# ----------------------------------------------------------------------------- 1. progress


@pytest.mark.slow
def test_a_killed_policy_worker_does_not_freeze_training(tmp_path):
    cfg = local(tmp_path, "policy", "pipeline.request_timeout_s=3", "pipeline.stall_timeout_s=0")
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    try:
        wait_for(lambda: controller.version >= 1, 240, "a first optimisation step")
        pid = controller.workers["policy0"].pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: controller.workers["policy0"].pid != pid, 120, "the new policy's hello")
        frames, version = controller.frames, controller.version
        # The actor re-sends what died with the old policy worker.
        wait_for(lambda: controller.frames > frames + 400, 120, "frames after the restart")
        wait_for(lambda: controller.version > version, 120, "training after the restart")
        assert controller.workers["actor0"].restarts == 0
    finally:
        stop(controller, thread)
    assert no_worker_left(controller)


@pytest.mark.slow
def test_the_controller_restarts_a_worker_that_heartbeats_without_progress(tmp_path):
    # Requests are never re-sent here: the actor stays stuck after the policy worker dies,
    # alive and heartbeating, until the controller sees it makes no progress.
    cfg = local(tmp_path, "stall", "pipeline.request_timeout_s=0", "pipeline.stall_timeout_s=20")
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    try:
        wait_for(lambda: controller.version >= 1, 240, "a first optimisation step")
        actor_restarts = controller.workers["actor0"].restarts
        pid = controller.workers["policy0"].pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: controller.workers["policy0"].pid != pid, 120, "the new policy's hello")
        wait_for(
            lambda: controller.workers["actor0"].restarts > actor_restarts,
            120,
            "the stuck actor's restart",
        )
        frames = controller.frames
        wait_for(lambda: controller.frames > frames + 400, 180, "frames after the restart")
        assert not controller.error
    finally:
        stop(controller, thread)


@pytest.mark.slow
def test_a_pod_whose_step_or_update_hangs_is_restarted_from_its_checkpoint(tmp_path, caplog):
    # A pod heartbeats only from its loop, between env steps (pod_worker.py): a step that never
    # returns leaves it silent, never heartbeating without progress. An update it announced
    # (`busy`) may be silent for pipeline.update_timeout_s. A stopped process is either hang as
    # the controller sees it.
    caplog.set_level(logging.WARNING, logger="hns_train.distributed.controller")
    timeout_s = 5  # for heartbeats and updates alike: no healthy one here comes near
    cfg = local(
        tmp_path, "frozen", "pipeline.backend=pod", "pod.worlds=4", "agent.ppo.epochs=1",
        "agent.ppo.minibatches=1", "pipeline.checkpoint_every=1",
        f"pipeline.heartbeat_timeout_s={timeout_s}",
        f"pipeline.update_timeout_s={timeout_s}",
    )  # fmt: skip
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    pod, pids = controller.workers, []

    def freeze(in_update: bool) -> float:
        """Stop the pod in an update (after its `busy`, before the heartbeat that ends it) or
        in a step; when it was stopped."""
        pids.append(pod["trainer0"].pid)
        for _ in range(20):
            wait_for(lambda: pod["trainer0"].busy == in_update, 60, f"busy={in_update}")
            os.kill(pids[-1], signal.SIGSTOP)
            stopped_at = time.monotonic()
            time.sleep(1.0)  # a message sent just before the stop has arrived by now
            if pod["trainer0"].busy == in_update:
                return stopped_at
            os.kill(pids[-1], signal.SIGCONT)
        raise AssertionError(f"the pod was never stopped with busy={in_update}")

    try:
        wait_for(lambda: controller.version >= 1, 240, "a first optimisation step")
        for restarts, in_update, said in [
            (1, False, "trainer0 silent for"),
            (2, True, "trainer0 silent in an update for"),
        ]:
            stopped_at = freeze(in_update)
            saved = CheckpointDir(tmp_path / "frozen" / "checkpoints").steps()[-1]
            wait_for(lambda n=restarts: pod["trainer0"].restarts == n, 60, "the hung pod's restart")
            assert time.monotonic() - stopped_at < timeout_s + 10
            assert any(said in r.getMessage() for r in caplog.records)
            wait_for(lambda v=saved: controller.version > v, 240, "training after the restart")
        assert pod["trainer0"].pid not in pids and not controller.error
    finally:
        stop(controller, thread)
    assert no_worker_left(controller) and not any(alive(pid) for pid in pids)


# ----------------------------------------------------------------------------- 2. parent watch


@pytest.mark.slow
def test_workers_exit_when_the_controller_is_killed(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "hns_train.train",
        "--config",
        str(SMOKE),
        f"runs_dir={tmp_path}",
        "name=orphans",
        "pipeline.launcher=local",
        "stop.versions=0",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "orphans"

    def newest_write() -> float:
        return max((p.stat().st_mtime for p in run.rglob("*") if p.is_file()), default=0.0)

    try:
        wait_for(lambda: (run / "checkpoints").is_dir() and newest_write(), 120, "the run")
        wait_for(lambda: CheckpointDir(run / "checkpoints").steps(), 400, "a first checkpoint")
        workers = [p for p in children_of(proc.pid) if alive(p)]
        assert len(workers) >= 3
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: not any(alive(p) for p in workers), 15, "every worker to exit")
        last = newest_write()
        time.sleep(3)
        assert newest_write() == last, "an orphan went on writing into the run directory"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_worker_exits_when_its_controller_falls_silent(tmp_path):
    # The watch for workers whose parent is not the controller (Ray actors).
    cfg = smoke(
        tmp_path,
        "pipeline.controller_timeout_s=1.5",
        "pipeline.heartbeat_s=0.2",
        "pipeline.heartbeat_timeout_s=5",
    )
    folder = tempfile.mkdtemp(prefix="hns-")
    endpoint = f"ipc://{folder}/control"
    spec = WorkerSpec("policy", 0, cfg.to_dict(), str(tmp_path / "run"), {"control": endpoint})
    with ControlServer(endpoint) as server:
        worker = Worker(spec)
        try:
            until = time.monotonic() + 3.0
            while time.monotonic() < until:  # answered: the worker stays
                worker.poll_control()
                for rid, _ in server.recv(timeout_ms=50):
                    server.send(rid, "alive")
            gone_at = time.monotonic()
            with pytest.raises(ControllerGone, match="controller_timeout_s"):
                while time.monotonic() - gone_at < 10:
                    worker.poll_control()
                    time.sleep(0.05)
            assert 1.0 <= time.monotonic() - gone_at < 5
        finally:
            worker.close()


def test_the_parent_watch_notices_a_parent_that_is_already_gone():
    other = os.getpid()  # not this process's parent
    with pytest.raises(ControllerGone, match=f"parent process {other}"):
        ParentWatch(parent_pid=other)
    ParentWatch().check()  # the real parent is there


# ----------------------------------------------------------------------------- 3. messages


@pytest.fixture
def inproc(tmp_path):
    # One name per test: zmq frees an inproc address after close() in the background, so the
    # next test could find the previous test's address still taken.
    name = f"fuzz-{tmp_path.name}"
    cfg = smoke(tmp_path, f"name={name}", "pipeline.batch_chunks=2")
    endpoints = make_endpoints(cfg, "inproc")
    control = ControlServer(endpoints["control"])
    yield cfg, endpoints, dict(config=cfg.to_dict(), run_dir=str(tmp_path / name))
    control.close()


def test_the_trainer_drops_wrong_chunks_and_undoes_non_finite_updates(inproc):
    cfg, endpoints, spec = inproc
    trainer = TrainerWorker(WorkerSpec("trainer", 0, endpoints=endpoints, **spec))
    trainer.poll_ms = 20
    sender = SampleSender(endpoints["samples"], hwm=64)
    rng = np.random.default_rng(0)
    T = cfg.pipeline.chunk_len

    def chunk(steps: int = T):
        return synthetic_chunk(trainer.learner.model, steps, 2, cfg.agent.ppo.bptt_len, rng)

    def arrays(edit, steps: int = T) -> dict:
        c = chunk(steps)
        edit(c)
        return c.to_arrays()

    key = "lidar"
    wrong = [
        arrays(lambda c: c.obs.pop(key)),  # an observation key missing
        arrays(lambda c: setattr(c, "lstm_state", np.zeros((*c.lstm_state.shape[:3], 7)))),
        arrays(lambda c: c.rewards.__setitem__((0, 0), np.nan)),
        arrays(lambda c: c.obs[key].__setitem__((0, 0), np.inf)),
        arrays(lambda c: setattr(c, "actions", c.actions.astype(np.float32))),
        arrays(lambda c: c.actions.__setitem__((0, 0, 0), 99)),
        arrays(lambda c: c.policy_version.__setitem__(0, -5)),
        arrays(lambda c: setattr(c, "truncated", c.truncated.astype(np.int8))),
        arrays(lambda c: None, steps=T // 2),  # not pipeline.chunk_len steps
        arrays(lambda c: c.obs.__setitem__("mystery", np.zeros((T, 2, 3), np.float32))),
    ]
    # Well-formed: an entity type with no rows in this game may come along, empty.
    empty = chunk().to_arrays()
    empty["obs/box_obs"] = np.zeros((T, 2, 0, 3), np.float32)
    for a in [*wrong, empty, chunk().to_arrays()]:
        assert sender.send("chunk", a, timeout_ms=1000)
    deadline = time.monotonic() + 30
    while trainer.learner.version < 1 and time.monotonic() < deadline:
        trainer.step()
    assert trainer.learner.version == 1 and trainer.samples.rejected == len(wrong)
    assert len(set(trainer.samples.drops.recent)) == len(wrong)
    assert finite(trainer.learner.model)

    # Finite but absurd rewards overflow the update: it is undone, nothing non-finite stays.
    before = {k: v.clone() for k, v in trainer.learner.model.state_dict().items()}
    for _ in range(2):
        c = chunk()
        c.rewards[:] = 3e38
        assert sender.send("chunk", c.to_arrays(), timeout_ms=1000)
    deadline = time.monotonic() + 30
    while trainer.learner.skipped_updates < 1 and time.monotonic() < deadline:
        trainer.step()
    assert trainer.learner.skipped_updates == 1 and trainer.learner.version == 1
    after = trainer.learner.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    path = trainer.learner.save_checkpoint()
    saved = CheckpointDir(path.parent).latest()
    assert all(
        bool(torch.isfinite(v).all())
        for v in saved.state["ppo"]["model"].values()
        if v.is_floating_point()
    )
    sender.close()
    trainer.close()


def test_the_policy_worker_drops_wrong_requests_and_parameters(inproc, tmp_path):
    cfg, endpoints, spec = inproc
    folder = tmp_path / "rows"
    folder.mkdir()
    endpoints = {**endpoints, "shared_rows": str(folder)}
    params = ParamPublisher(endpoints["params"])
    policy = PolicyWorker(WorkerSpec("policy", 0, endpoints=endpoints, **spec))
    policy.poll_ms = 10
    client = InferenceClient(endpoints["inference"], identity="fuzzer")
    try:
        good = state_dict_to_arrays(policy.model.state_dict())
        params.publish(0, good)
        wait_for(lambda: policy.step() or policy.version == 0, 10, "the first parameters")
        name = next(k for k, v in good.items() if v.dtype.kind == "f" and v.size > 1)
        bad = [
            {**good, name: good[name][:1]},  # a wrong shape
            {**good, name: np.full_like(good[name], np.nan)},
            {k: v for k, v in good.items() if k != name},  # a name missing
        ]
        for version, arrays in enumerate(bad, start=1):
            params.publish(version, arrays)
            wait_for(lambda v=version: policy.step() or policy.params.rejected == v, 10, "a drop")
        assert policy.version == 0 and finite(policy.model)

        c = synthetic_chunk(policy.model, 10, 4, 10, np.random.default_rng(1))
        H = cfg.agent.network.lstm_dim

        def request(**edit) -> dict:
            out = {f"obs/{k}": v[0] for k, v in c.obs.items()}
            out.update(
                state=np.zeros((4, 4, H), np.float32),
                episode_start=np.ones(4, bool),
                code=np.full(4, -1, np.int64),
            )
            out.update(edit)
            return {k: v for k, v in out.items() if v is not None}

        wrong = [
            request(state=np.zeros((4, 4, H + 1), np.float32)),
            request(state=np.full((4, 4, H), np.nan, np.float32)),
            request(code=np.full(4, -7, np.int64)),
            request(code=None),
            request(episode_start=np.ones(4, np.int64)),
            request(**{"obs/lidar": None}),
            request(**{"obs/mystery": np.zeros((4, 2), np.float32)}),
            request(code=np.zeros(3, np.int64)),
        ]
        # Requests through shared memory: an address must name a block of this run's folder
        # whose size fits the contract for the rows it claims.
        block = SharedBlock(folder, "actor0-0-g0", RequestLayout.of(policy.shapes, H, 4))
        for k, v in request().items():
            block.slots[1][k][...] = v
        (tmp_path / "outside").write_bytes(b"\0" * block.layout.block_bytes)
        os.symlink(tmp_path / "outside", folder / "link")
        good_address = block.address(1)
        wrong_addresses = [
            {**good_address, "block": "../outside"},
            {**good_address, "block": "missing"},
            {**good_address, "block": "link"},
            {**good_address, "rows": 5},
            {**good_address, "slot": 3},
        ]
        for i, a in enumerate(wrong):
            assert client.send("act", a, {"seq": i})
        for i, address in enumerate(wrong_addresses):
            assert client.send("act", None, {"seq": 50 + i, **address})
        assert client.send("act", request(), {"seq": 60, **good_address})  # arrays and address
        assert client.send("act", request(), {"seq": 100})
        # A code naming no snapshot of the pool is played by the latest policy.
        assert client.send("act", request(code=np.full(4, 12345, np.int64)), {"seq": 101})
        assert client.send("act", None, {"seq": 102, **good_address})
        # A snapshot of the pool plays its rows, read from disk once.
        pool = PolicyPool(pool_dir(policy.spec.run_dir), cfg.pool)
        pool.add_snapshot(3, policy.model.state_dict())
        pool.close()
        assert client.send("act", request(code=np.array([3, 3, -1, -1])), {"seq": 103})
        replies = []

        def served() -> bool:
            policy.step()
            while (m := client.recv(timeout_ms=0)) is not None:
                replies.append(m)
            return len(replies) >= 4

        wait_for(served, 20, "the good requests' replies")
        assert sorted(m.meta["seq"] for m in replies) == [100, 101, 102, 103]
        assert all(m.arrays["actions"].shape == (4, 5) for m in replies)
        assert policy.server.rejected == len(wrong) + len(wrong_addresses) + 1
        block.close()
        counters = policy.counters()
        assert counters["unknown_snapshots"] == 1 and counters["snapshot_loads"] == 1
    finally:
        client.close()
        policy.close()
        params.close()


def test_an_actor_drops_wrong_replies_and_resends_unanswered_requests(inproc, tmp_path):
    cfg, endpoints, spec = inproc
    spec["config"]["pipeline"]["request_timeout_s"] = 0.5
    server = InferenceServer(endpoints["inference"][0])
    samples = SampleReceiver(endpoints["samples"][0])
    actor = ActorWorker(WorkerSpec("actor", 0, endpoints=endpoints, **spec))
    actor.poll_ms = 10
    H = cfg.agent.network.lstm_dim
    try:
        actor.step()
        requests = []
        wait_for(lambda: requests.extend(server.recv(timeout_ms=50)) or len(requests) >= 2, 10, "")
        rows = len(requests[0][1].arrays["code"])

        def reply(**edit) -> dict:
            out = dict(
                actions=np.zeros((rows, 5), np.int64),
                logp=np.zeros(rows, np.float32),
                values=np.zeros(rows, np.float32),
                state=np.zeros((rows, 4, H), np.float32),
            )
            out.update(edit)
            return {k: v for k, v in out.items() if v is not None}

        wrong = [
            reply(actions=np.zeros((rows, 4), np.int64)),
            reply(actions=np.full((rows, 5), 11, np.int64)),  # move_bins is 11: 0..10
            reply(values=np.full(rows, np.nan, np.float32)),
            reply(state=np.zeros((rows, 4, H + 2), np.float32)),
            reply(logp=None),
        ]
        client, first = requests[0]
        for a in wrong:
            assert server.reply(client, "act_result", a, first.meta)
        deadline = time.monotonic() + 5
        while actor.inference.rejected < len(wrong) and time.monotonic() < deadline:
            actor.step()
        assert actor.inference.rejected == len(wrong) and actor._frames == 0
        # Unanswered for request_timeout_s: both groups ask again, under new numbers.
        again = []
        deadline = time.monotonic() + 10
        while len(again) < 2 and time.monotonic() < deadline:
            actor.step()
            again.extend(server.recv(timeout_ms=20))
        assert len(again) == 2 and actor._resent == 2
        assert {m.meta["seq"] for _, m in again} == {m.meta["seq"] + 1 for _, m in requests}
        for client, message in again:
            assert server.reply(client, "act_result", reply(), message.meta)
        deadline = time.monotonic() + 5
        while actor._frames == 0 and time.monotonic() < deadline:
            actor.step()
        assert actor._frames > 0
    finally:
        actor.close()
        server.close()
        samples.close()


def test_the_controller_drops_wrong_heartbeats_and_keeps_its_counters(tmp_path):
    cfg = smoke(tmp_path, "name=beats", "eval.n_workers=1")
    controller = Controller(cfg)
    try:
        specs = {s.name: s for s in controller.specs()}
        clients = {}
        for name in ("actor0", "trainer0", "eval0"):
            spec = specs[name]
            controller.workers[name] = WorkerState(spec, time.monotonic(), connected=True)
            clients[name] = ControlClient(
                controller.endpoints["control"], identity=spec.routing_id, token=spec.token
            )
        outside = str(tmp_path.parent / "elsewhere.mp4")
        wrong = [
            ("actor0", {"frames": "abc"}),
            ("actor0", {"frames": -5}),
            ("actor0", {"frames": 10, "stat_sums": [1.0]}),
            ("actor0", {"frames": 10, "episodes": 2.5}),
            ("trainer0", {"version": 1.5}),
            ("trainer0", {"stats": {"loss": "nan"}}),
            ("trainer0", {"staleness": [1]}),
            ("trainer0", {"stat_sums": [1.0]}),
            ("eval0", {"rating": {"hider": [25.0]}}),
            ("eval0", {"rating": {"hider": ["a", 1.0]}}),
            ("eval0", {"rating": ["hider"]}),
            ("eval0", {"win_rate": {"random": 7}}),
            ("eval0", {"new_videos": [outside]}),
            ("eval0", {"leaderboard": {"columns": ["a"], "rows": [[1, 2]]}}),
            ("eval0", {"leaderboard": {"columns": ["a"], "rows": [[{"x": 1}]]}}),
        ]
        for name, meta in wrong:
            assert clients[name].send("heartbeat", meta=meta)
        assert clients["actor0"].send("mystery")
        # Right identity, no token / someone else's token: a forged trainer heartbeat.
        forged = ControlClient(controller.endpoints["control"], identity="trainer0.1")
        assert forged.send("heartbeat", meta={"version": 10**9})
        forged.close()
        for _ in range(20):
            controller.tick()
        assert controller.control_drops.total == len(wrong) + 2
        assert controller.frames == 0 and controller.version == 0 and not controller.log.eval_latest
        assert clients["actor0"].send("heartbeat", meta={"frames": 10, "episodes": 1})
        assert clients["eval0"].send("heartbeat", meta={"rating": {"hider": [25.0, 8.0]}})
        for _ in range(20):
            controller.tick()
        assert controller.frames == 10, list(controller.control_drops.recent)
        assert controller.log.eval_latest["rating"]["hider"][0] == 25.0
        assert controller._record() is None and controller.log.last["control/rejected"] > 0
    finally:
        for c in clients.values():
            c.close()
        for name in ("actor0", "trainer0", "eval0"):
            controller.workers[name].stopped = True
        controller._stop_workers()


# ----------------------------------------------------------------------------- 4. identity


@pytest.mark.slow
def test_nobody_can_speak_for_a_worker_on_the_control_channel(tmp_path):
    cfg = local(tmp_path, "impostor")
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    try:
        wait_for(lambda: controller.version >= 1, 240, "a first optimisation step")
        trainer = controller.workers["trainer0"]
        impostors = [
            ControlClient(controller.endpoints["control"], identity=rid, token=token)
            for rid, token in (
                (trainer.spec.routing_id, None),  # the live worker's identity: refused
                (trainer.spec.routing_id, "0" * 32),
                ("trainer0.1", None),  # its next incarnation, without the token
                ("trainer0", trainer.spec.token[::-1]),
            )
        ]
        for _ in range(5):
            for fake in impostors:
                assert fake.send("heartbeat", meta={"version": 10**9, "steps": 1})
            time.sleep(0.2)
        version = controller.version
        wait_for(lambda: controller.version >= version + 2, 240, "training to go on")
        assert controller.version < 10**6 and trainer.restarts == 0
        assert controller.control_drops.total >= 10
        for fake in impostors:
            fake.close()
    finally:
        took = stop(controller, thread)
    assert took < 45 and no_worker_left(controller) and not controller.error


def test_the_rendezvous_store_listens_on_loopback_only():
    from hns_train.distributed.ddp import make_store

    store, port = make_store("127.0.0.1", timeout_s=10)
    listening = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            listening.append(address)
    assert listening == ["0100007F"]  # 127.0.0.1, not 0.0.0.0
    del store


# ----------------------------------------------------------------------------- 5. checkpoints


def test_resume_without_a_loadable_checkpoint_is_an_error_naming_what_was_found(tmp_path):
    cfg = smoke(tmp_path, "name=nothing")
    run = tmp_path / "nothing"
    (run / "checkpoints").mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    (run / "checkpoints" / "ckpt_0000000004.pt").write_bytes(b"HNSCKPT1 cut short")
    cmd = [sys.executable, "-m", "hns_train.train", "--resume", str(run)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("error: --resume") and "nothing to resume from" in lines[-1]
    assert "ckpt_0000000004.pt" in lines[-1] and "truncated" in lines[-1]
    (run / "checkpoints" / "ckpt_0000000004.pt").unlink()
    with pytest.raises(ValueError, match="no checkpoint files"):
        Controller(cfg, resume=True)
    assert not (run / "pool").exists(), "a refused resume must not touch the run"


@pytest.mark.slow
def test_a_killed_trainer_restarts_from_its_newest_checkpoint_by_default(tmp_path):
    # Versions alone would checkpoint rarely here: the time limit does it.
    cfg = local(
        tmp_path, "trainer", "pipeline.checkpoint_every=1000", "pipeline.checkpoint_every_s=3"
    )
    assert cfg.pipeline.restart_trainer
    controller = Controller(cfg)
    thread = run_in_thread(controller)
    ckpts = CheckpointDir(tmp_path / "trainer" / "checkpoints")
    try:
        wait_for(lambda: ckpts.steps() and ckpts.steps()[-1] >= 2, 240, "a timed checkpoint")
        os.kill(controller.workers["trainer0"].pid, signal.SIGKILL)
        saved = ckpts.steps()[-1]
        wait_for(lambda: controller.workers["trainer0"].restarts == 1, 60, "the restart")
        wait_for(lambda: controller.version >= saved + 2, 240, "training to go on")
        assert not controller.error
    finally:
        stop(controller, thread)
    assert ckpts.latest().meta["counters"]["version"] >= saved + 2


# ----------------------------------------------------------------------------- 6. smaller


def test_a_corrupt_pool_index_is_one_line(tmp_path):
    cfg = smoke(tmp_path, "name=pool")
    run = tmp_path / "pool"
    (run / "pool").mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    (run / "pool" / "pool.sqlite").write_bytes(b"this is not a database" * 100)
    cmd = [sys.executable, "-m", "hns_train.train", "--resume", str(run)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pool.sqlite" in lines[0] and "move it away" in lines[0], lines


def test_one_message_is_capped_with_all_its_frames(tmp_path):
    folder = tempfile.mkdtemp(prefix="hns-")
    cap = 1 << 20
    with SampleReceiver(f"ipc://{folder}/cap", max_message_bytes=cap) as rx:
        with SampleSender(rx.endpoint) as tx:
            part = np.zeros(cap // 2 - 1000, np.uint8)  # each frame fits, all four do not
            assert tx.send("chunk", {f"a{i}": part for i in range(4)})
            assert tx.send("chunk", {"a": part}, {"ok": True})
            got = []
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                if (m := rx.recv(timeout_ms=100)) is not None:
                    got.append(m)
        assert [m.meta for m in got] == [{"ok": True}] and rx.rejected == 1
        assert "frames" in rx.drops.recent[-1]


def test_dropped_messages_are_logged_at_a_bounded_rate(tmp_path, caplog):
    import zmq

    caplog.set_level(logging.WARNING, logger="hns_train.distributed.contract")
    folder = tempfile.mkdtemp(prefix="hns-")
    with SampleReceiver(f"ipc://{folder}/flood", hwm=1000) as rx:
        raw = zmq.Context.instance().socket(zmq.PUSH)
        raw.linger = 0
        raw.connect(rx.endpoint)
        for _ in range(300):
            raw.send(b"garbage")
        deadline = time.monotonic() + 10
        while rx.rejected < 300 and time.monotonic() < deadline:
            rx.recv(timeout_ms=50)
        raw.close()
        assert rx.rejected == 300
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) <= 2


@pytest.mark.parametrize(
    "override, named",
    [
        ("pipeline.checkpoint_every=0", "pipeline.checkpoint_every"),
        ("pipeline.batch_chunks=0", "pipeline.batch_chunks"),
        ("pipeline.batch_chunks=-4", "pipeline.batch_chunks"),
        ("pipeline.keep_checkpoints=0", "pipeline.keep_checkpoints"),
        ("pipeline.sample_buffer_chunks=-1", "pipeline.sample_buffer_chunks"),
        ("pipeline.max_inference_batch=0", "pipeline.max_inference_batch"),
        ("pipeline.heartbeat_timeout_s=-1", "pipeline.heartbeat_timeout_s"),
        ("pipeline.heartbeat_s=0", "pipeline.heartbeat_s"),
        ("pipeline.request_timeout_s=-2", "pipeline.request_timeout_s"),
        ("pipeline.update_timeout_s=-1", "pipeline.update_timeout_s"),
        ("pipeline.checkpoint_every_s=-1", "pipeline.checkpoint_every_s"),
        ("pipeline.max_staleness=-1", "pipeline.max_staleness"),
        ("pipeline.reuse=0", "pipeline.reuse"),
        ("pipeline.max_message_mb=0", "pipeline.max_message_mb"),
        ("agent.ppo.lr=-0.1", "agent.ppo.lr"),
        ("agent.ppo.gamma=1.5", "agent.ppo.gamma"),
        ("agent.ppo.lr=.nan", "agent.ppo.lr"),
        ("agent.network.lstm_dim=0", "agent.network.lstm_dim"),
        ("agent.network.attention_heads=0", "attention_heads"),
        ("logging.every_s=0", "logging.every_s"),
        ("stop.minutes=-1", "stop.minutes"),
        ("seed=-1", "seed"),
        ("eval.worlds=0", "worlds"),
    ],
)
def test_config_checks_name_the_field_and_what_is_allowed(tmp_path, override, named):
    from hns_train.config import ConfigError

    with pytest.raises(ConfigError) as err:
        smoke(tmp_path, override)
    text = str(err.value)
    assert named in text and any(w in text for w in ("must", "allowed", "need")), text


def test_every_numeric_config_field_has_a_range():
    """A numeric field added to the config without a range would take any value unchecked."""
    import dataclasses

    from hns_train.config import RunConfig
    from hns_train.typed_config import bounds

    def numeric(obj, prefix):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from numeric(value, f"{prefix}{f.name}.")
            elif type(value) in (int, float):
                yield f"{prefix}{f.name}"

    cfg = RunConfig()
    # game and pool check their own fields
    fields = {k for k in numeric(cfg, "") if not k.startswith(("pool.", "game."))}
    ranges = bounds(RunConfig)
    missing = sorted(fields - set(ranges))
    assert not missing, f"numeric config fields without a range: {missing}"
    assert "eval.stop_render_wait_s" in ranges
