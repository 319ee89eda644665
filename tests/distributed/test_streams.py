"""Streams over real ZeroMQ sockets: batching, back-pressure, newest-only parameters, late
joiners, garbage tolerance, timeouts, and one exchange with a spawned process."""

from __future__ import annotations

import logging
import multiprocessing as mp
import shutil
import tempfile
import time

import numpy as np
import pytest
import zmq

from hns_train.distributed import streams
from hns_train.distributed.contract import ContractError
from hns_train.distributed.streams import (
    ControlClient,
    ControlServer,
    InferenceClient,
    InferenceServer,
    ParamPublisher,
    ParamSubscriber,
    SampleReceiver,
    SampleSender,
)
from hns_train.distributed.wire import encode


@pytest.fixture
def short_dir():
    # pytest's tmp_path can exceed the ~107-byte limit of ipc socket paths
    path = tempfile.mkdtemp(prefix="hns-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["ipc", "tcp"])
def bind_address(request, short_dir):
    if request.param == "ipc":
        return f"ipc://{short_dir}/s.sock"
    return "tcp://127.0.0.1:0"


def _wait_until(predicate, timeout_s=5.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def _raw(socket_type) -> zmq.Socket:
    sock = zmq.Context.instance().socket(socket_type)
    sock.linger = 0
    sock.sndtimeo = 5000  # a send with no peer to queue on fails the test instead of hanging it
    return sock


# --- endpoints -------------------------------------------------------------------------------


def test_bind_addresses_default_to_loopback_and_port_zero_picks_a_port():
    assert streams.resolve_bind("tcp://:0") == "tcp://127.0.0.1:*"
    assert streams.resolve_bind("tcp://localhost:5555") == "tcp://localhost:5555"
    with pytest.raises(ValueError, match="expose an unauthenticated socket"):
        streams.resolve_bind("tcp://0.0.0.0:0")
    with pytest.raises(ValueError, match="expose an unauthenticated socket"):
        streams.resolve_bind("tcp://*:0")
    with pytest.raises(ValueError, match="needs a port"):
        streams.resolve_bind("tcp://127.0.0.1")
    with pytest.raises(ValueError, match="transport 'udp'"):
        streams.resolve_bind("udp://127.0.0.1:1")
    with pytest.raises(ValueError, match="at most 107"):
        streams.resolve_bind("ipc:///tmp/" + "d" * 120 + "/x.sock")
    with SampleReceiver("tcp://:0") as rx:
        assert rx.endpoint.startswith("tcp://127.0.0.1:")
        assert int(rx.endpoint.rsplit(":", 1)[1]) > 0


def test_timeouts_return_empty_and_negative_timeouts_are_refused(short_dir):
    with (
        InferenceServer(f"ipc://{short_dir}/i.sock") as server,
        InferenceClient(server.endpoint) as client,
        SampleReceiver("tcp://127.0.0.1:0") as rx,
        ParamSubscriber(f"ipc://{short_dir}/nobody.sock") as sub,
    ):
        t0 = time.monotonic()
        assert server.recv(timeout_ms=50) == []
        assert client.recv(timeout_ms=50) is None
        assert rx.recv(timeout_ms=50) is None
        assert sub.poll_latest(timeout_ms=50) is None
        elapsed = time.monotonic() - t0
        assert 0.18 <= elapsed < 2.0
        with pytest.raises(ValueError, match="timeout_ms"):
            rx.recv(timeout_ms=-1)
        with pytest.raises(ValueError, match="timeout_ms"):
            client.send("x", timeout_ms=None)


# --- inference -------------------------------------------------------------------------------


def test_requests_from_many_clients_arrive_as_one_batch_and_replies_find_their_client(
    bind_address,
):
    n = 8
    with InferenceServer(bind_address, max_requests=64) as server:
        clients = [InferenceClient(server.endpoint, identity=f"actor{i}") for i in range(n)]
        try:
            for i, c in enumerate(clients):
                assert c.send("act", {"obs": np.full((2, 3), i, np.float32)}, {"group": i})
            assert _wait_until(lambda: server.socket.poll(0, zmq.POLLIN))
            time.sleep(0.2)  # let every request reach the server's queue
            batch = server.recv(timeout_ms=1000)
            assert sorted(peer for peer, _ in batch) == sorted(
                f"actor{i}".encode() for i in range(n)
            )
            for peer, msg in batch:
                i = int(peer[5:])
                assert msg.kind == "act" and msg.meta == {"group": i}
                np.testing.assert_array_equal(msg.arrays["obs"], np.full((2, 3), i, np.float32))
                assert server.reply(
                    peer, "act_result", {"actions": msg.arrays["obs"] * 2}, msg.meta
                )
            for i, c in enumerate(clients):
                reply = c.recv(timeout_ms=2000)
                assert reply is not None and reply.meta == {"group": i}
                np.testing.assert_array_equal(reply.arrays["actions"], np.full((2, 3), 2 * i))
        finally:
            for c in clients:
                c.close()


def test_server_batches_are_capped_and_replies_to_unknown_peers_fail(short_dir):
    with (
        InferenceServer(f"ipc://{short_dir}/cap.sock", max_requests=3) as server,
        InferenceClient(server.endpoint) as client,
    ):
        for i in range(8):
            assert client.send("act", meta={"i": i})
        assert _wait_until(lambda: server.socket.poll(0, zmq.POLLIN))
        time.sleep(0.1)
        sizes = []
        while len(got := server.recv(timeout_ms=200)) > 0:
            sizes.append(len(got))
        assert sizes == [3, 3, 2]
        assert not server.reply(b"nobody", "act_result")


# --- samples ---------------------------------------------------------------------------------


def test_sender_reports_back_pressure_instead_of_queueing(bind_address):
    payload = {"x": np.zeros(1 << 18, np.float32)}  # 1 MiB: OS socket buffers fill fast
    with SampleReceiver(bind_address, hwm=1) as rx, SampleSender(rx.endpoint, hwm=1) as tx:
        accepted = 0
        for _ in range(64):
            if not tx.send("chunk", payload, {"n": accepted}, timeout_ms=200):
                break
            accepted += 1
        assert 1 <= accepted <= 12, accepted  # about sender hwm + receiver hwm + OS buffers
        t0 = time.monotonic()
        assert not tx.send("chunk", payload, timeout_ms=100)
        assert time.monotonic() - t0 >= 0.09
        # draining the receiver releases the sender, and nothing was lost or reordered
        got = [rx.recv(timeout_ms=1000).meta["n"] for _ in range(accepted)]
        assert got == list(range(accepted))
        assert tx.send("chunk", payload, {"n": -1}, timeout_ms=2000)
        assert rx.recv(timeout_ms=2000).meta["n"] == -1


def test_several_senders_feed_one_receiver(short_dir):
    with SampleReceiver(f"ipc://{short_dir}/many.sock", hwm=64) as rx:
        senders = [SampleSender(rx.endpoint, hwm=8) for _ in range(3)]
        try:
            for k, s in enumerate(senders):
                for j in range(4):
                    assert s.send("chunk", {"v": np.array([k, j])}, timeout_ms=1000)
            got = []
            while len(got) < 12 and (msg := rx.recv(timeout_ms=2000)) is not None:
                got.append(msg)
            assert sorted(tuple(m.arrays["v"]) for m in got) == [
                (k, j) for k in range(3) for j in range(4)
            ]
        finally:
            for s in senders:
                s.close()


def test_garbage_from_a_raw_socket_is_dropped_counted_and_logged(short_dir, caplog):
    caplog.set_level(logging.WARNING, logger="hns_train.distributed.contract")
    with SampleReceiver(f"ipc://{short_dir}/g.sock") as rx:
        raw = _raw(zmq.PUSH)
        raw.connect(rx.endpoint)
        good = encode("chunk", {"x": np.arange(3)})
        raw.send_multipart([b"not msgpack \xc1"])
        raw.send_multipart([good[0]])  # header promises one array frame that is missing
        raw.send_multipart([good[0], b"\x00" * 5])  # wrong buffer size
        with SampleSender(rx.endpoint) as tx:
            assert tx.send("chunk", {"x": np.arange(3)}, {"ok": True})
            # PULL queues fairly between the two senders, so the good message may come before,
            # between or after the garbage: keep receiving until all four have been handled.
            good_ones = []
            deadline = time.monotonic() + 10
            while (len(good_ones) < 1 or rx.rejected < 3) and time.monotonic() < deadline:
                msg = rx.recv(timeout_ms=200)
                if msg is not None:
                    good_ones.append(msg)
        raw.close()
        assert [m.meta for m in good_ones] == [{"ok": True}]
        assert rx.rejected == 3
    reasons = " ".join(rx.drops.recent)
    assert "not valid msgpack" in reasons and "declares 1 arrays but has 0" in reasons
    assert "needs 24 bytes, frame has 5" in reasons
    # Logged at a bounded rate: the first drop at once, the next ones summed up later.
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(lines) == 1 and "SampleReceiver" in lines[0]


def test_a_receivers_check_takes_passes_over_or_drops_each_message(short_dir):
    def check(message):
        n = message.meta["n"]
        if n == 1:
            return None  # no longer wanted: passed over, not counted
        if n == 2:
            raise ContractError("n=2 does not fit")
        return n * 10  # what the receiver takes instead of the message

    with (
        SampleReceiver(f"ipc://{short_dir}/c.sock", check=check) as rx,
        SampleSender(rx.endpoint) as tx,
    ):
        for n in (1, 2, 3):
            assert tx.send("chunk", meta={"n": n})
        assert rx.recv(timeout_ms=2000) == 30
        assert rx.recv(timeout_ms=0) is None
        assert rx.rejected == 1 and rx.drops.recent[-1] == "n=2 does not fit"


def test_garbage_at_the_inference_server_does_not_hide_good_requests(short_dir):
    with (
        InferenceServer(f"ipc://{short_dir}/ig.sock") as server,
        InferenceClient(server.endpoint, identity="good") as client,
    ):
        raw = _raw(zmq.DEALER)
        raw.connect(server.endpoint)
        raw.send_multipart([b"\x92\x01\x02"])  # msgpack list, not a header map
        raw.send_multipart([b"", *encode("act")])  # REQ-style empty delimiter
        time.sleep(0.05)
        assert client.send("act", meta={"k": 1})
        got = []
        assert _wait_until(lambda: got.extend(server.recv(timeout_ms=100)) or got)
        raw.close()
        assert [(peer, m.meta) for peer, m in got] == [(b"good", {"k": 1})]
        assert server.rejected == 2


# --- parameters ------------------------------------------------------------------------------


def _params(version: int) -> dict[str, np.ndarray]:
    return {"w": np.full((4, 4), version, np.float32), "step": np.array(version)}


def test_slow_subscriber_gets_only_the_newest_version(short_dir):
    with (
        ParamPublisher(f"ipc://{short_dir}/p.sock") as pub,
        ParamSubscriber(pub.endpoint) as sub,
    ):
        pub.publish(0, _params(0))
        first = sub.poll_latest(timeout_ms=3000)  # connected and subscribed from here on
        assert first is not None and first.meta["version"] == 0
        sends = pub.sends
        for v in range(1, 6):  # each version really goes out, so all five queue up
            pub.publish(v, _params(v), {"loss": 0.5})
            assert _wait_until(lambda v=v: pub.sends >= sends + v)
        assert _wait_until(lambda: sub.socket.poll(0, zmq.POLLIN))
        time.sleep(0.5)
        # Sent is not yet delivered: on a busy machine the last versions may still be in
        # transit, so poll until version 5 shows; versions seen only ever increase, and the
        # queued ones in between are skipped, not handed over one by one.
        seen, deadline = [], time.monotonic() + 10
        while (not seen or seen[-1].meta["version"] < 5) and time.monotonic() < deadline:
            msg = sub.poll_latest(timeout_ms=200)
            if msg is not None:
                seen.append(msg)
        versions = [m.meta["version"] for m in seen]
        assert versions == sorted(set(versions)) and versions[-1] == 5 and len(versions) < 5
        msg = seen[-1]
        assert msg.meta["loss"] == 0.5 and sub.version == 5
        np.testing.assert_array_equal(msg.arrays["w"], np.full((4, 4), 5, np.float32))
        assert sub.poll_latest(timeout_ms=100) is None  # no stale or repeated version


def test_publish_copies_arrays_so_in_place_updates_do_not_leak(short_dir):
    weights = np.zeros(3, np.float32)
    with ParamPublisher(f"ipc://{short_dir}/c.sock") as pub:
        pub.publish(1, {"w": weights})
        weights += 7  # what an optimiser step does to a live parameter
        with ParamSubscriber(pub.endpoint) as sub:
            msg = sub.poll_latest(timeout_ms=3000)
    np.testing.assert_array_equal(msg.arrays["w"], np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="set by ParamPublisher"):
        pub.publish(2, {}, {"version": 3})


def test_late_joiners_catch_up_without_a_new_publish(bind_address):
    with ParamPublisher(bind_address) as pub:
        pub.publish(7, _params(7))
        time.sleep(0.1)  # published while nobody listened
        with ParamSubscriber(pub.endpoint) as early:
            msg = early.poll_latest(timeout_ms=3000)
            assert msg is not None and msg.meta["version"] == 7
            with ParamSubscriber(pub.endpoint) as late:
                msg = late.poll_latest(timeout_ms=3000)
                assert msg is not None and msg.meta["version"] == 7
            # the re-send for the late joiner reached `early` too, and is not returned twice
            assert early.poll_latest(timeout_ms=200) is None


def test_a_restarted_publisher_is_followed_whatever_its_version(short_dir):
    address = f"ipc://{short_dir}/r.sock"
    with ParamPublisher(address) as pub:
        pub.publish(3, _params(3))
        with ParamSubscriber(pub.endpoint) as sub:
            assert sub.poll_latest(timeout_ms=3000).meta["version"] == 3
            pub.close()
            # a restarted trainer (new publisher id) may count from an older checkpoint
            with ParamPublisher(address) as again:
                again.publish(2, _params(2))
                msg = sub.poll_latest(timeout_ms=5000)
                assert msg is not None and msg.meta["version"] == 2
                assert msg.meta["publisher"] == again.publisher_id != pub.publisher_id


def test_subscriber_drops_messages_that_are_not_parameters(short_dir):
    raw = _raw(zmq.PUB)
    raw.bind(f"ipc://{short_dir}/rp.sock")
    with ParamSubscriber(raw.getsockopt_string(zmq.LAST_ENDPOINT)) as sub:
        time.sleep(0.2)  # slow joiner: a raw PUB has no catch-up
        raw.send_multipart(encode("params", {"w": np.ones(2)}, {"version": "x", "publisher": "p"}))
        raw.send_multipart([b"junk"])
        raw.send_multipart(encode("params", {"w": np.ones(2)}, {"version": 4, "publisher": "p"}))
        msg = sub.poll_latest(timeout_ms=2000)
        raw.close()
        assert msg is not None and msg.meta["version"] == 4
        assert sub.rejected == 2


# --- control ---------------------------------------------------------------------------------


def test_control_heartbeats_and_stop_command(short_dir):
    with ControlServer(f"ipc://{short_dir}/ctl.sock") as ctl:
        workers = [ControlClient(ctl.endpoint, identity=f"actor-{i}") for i in range(3)]
        try:
            for w in workers:
                assert w.send("heartbeat", meta={"steps": 10})
            seen = []
            assert _wait_until(lambda: seen.extend(ctl.recv(timeout_ms=100)) or len(seen) == 3)
            assert sorted(wid for wid, _ in seen) == [b"actor-0", b"actor-1", b"actor-2"]
            assert all(m.kind == "heartbeat" and m.meta == {"steps": 10} for _, m in seen)
            assert ctl.send(b"actor-1", "stop", meta={"reason": "done"})
            msg = workers[1].recv(timeout_ms=2000)
            assert msg.kind == "stop" and msg.meta == {"reason": "done"}
            assert workers[0].recv(timeout_ms=50) is None
            # nobody takes over a connected worker's identity: the stranger is not heard and
            # what the controller sends still reaches the real worker
            stranger = ControlClient(ctl.endpoint, identity="actor-2")
            try:
                assert stranger.send("heartbeat", meta={"steps": 10**9})
                assert ctl.recv(timeout_ms=300) == []
                assert ctl.send(b"actor-2", "stop")
                assert workers[2].recv(timeout_ms=2000).kind == "stop"
                assert stranger.recv(timeout_ms=50) is None
            finally:
                stranger.close()
            # a restarted worker (a new incarnation) connects under a new identity
            workers[2].close()
            workers[2] = ControlClient(ctl.endpoint, identity="actor-2.1")
            assert workers[2].send("hello")
            hello = []
            assert _wait_until(lambda: hello.extend(ctl.recv(timeout_ms=100)) or hello)
            assert [(wid, m.kind) for wid, m in hello] == [(b"actor-2.1", "hello")]
            assert ctl.send(b"actor-2.1", "stop")
            assert workers[2].recv(timeout_ms=2000).kind == "stop"
        finally:
            for w in workers:
                w.close()


# --- across processes ------------------------------------------------------------------------


def _actor_process(inference: str, samples: str) -> None:
    """Child: ask the parent's policy server, then push a sample built from its answer."""
    with InferenceClient(inference, identity="child") as client, SampleSender(samples) as tx:
        client.send("act", {"obs": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"seq": 1})
        reply = client.recv(timeout_ms=20_000)
        if reply is None:
            return
        tx.send(
            "chunk",
            {"actions": reply.arrays["actions"] + 1},
            {"seq": reply.meta["seq"]},
            timeout_ms=20_000,
        )
        time.sleep(0.2)  # linger is 0: give the sample time to leave before closing


def test_exchange_with_a_spawned_process_over_tcp():
    with (
        InferenceServer("tcp://127.0.0.1:0") as server,
        SampleReceiver("tcp://127.0.0.1:0") as rx,
    ):
        proc = mp.get_context("spawn").Process(
            target=_actor_process, args=(server.endpoint, rx.endpoint)
        )
        proc.start()
        try:
            batch = []
            assert _wait_until(lambda: batch.extend(server.recv(timeout_ms=100)) or batch, 30)
            ((peer, request),) = batch
            assert peer == b"child"
            assert server.reply(
                peer, "act_result", {"actions": request.arrays["obs"] * 10}, request.meta
            )
            sample = rx.recv(timeout_ms=30_000)
            assert sample is not None and sample.meta == {"seq": 1}
            np.testing.assert_array_equal(
                sample.arrays["actions"], np.arange(6, dtype=np.float32).reshape(2, 3) * 10 + 1
            )
        finally:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        assert proc.exitcode == 0
