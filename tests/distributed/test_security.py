"""CURVE run keys: valid pairs, secrets kept out of reprs, and only the run's clients get
messages through."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest
import zmq

from hns_train.distributed.security import RunKeys
from hns_train.distributed.streams import (
    InferenceClient,
    InferenceServer,
    ParamPublisher,
    ParamSubscriber,
    SampleReceiver,
    SampleSender,
)
from hns_train.distributed.wire import encode


@pytest.fixture(scope="module")
def keys() -> RunKeys:
    return RunKeys.generate()


def test_keys_are_valid_pairs_and_secrets_stay_out_of_repr(keys):
    assert zmq.curve_public(keys.server_secret) == keys.server_public
    assert zmq.curve_public(keys.client_secret) == keys.client_public
    assert keys.server_public != keys.client_public
    text = repr(keys)
    assert keys.server_secret.decode() not in text and keys.client_secret.decode() not in text
    assert RunKeys.from_dict(keys.to_dict()) == keys
    swapped = {**keys.to_dict(), "client_public": keys.server_public.decode()}
    with pytest.raises(ValueError, match="client_public does not belong to client_secret"):
        RunKeys.from_dict(swapped)
    with pytest.raises(ValueError, match="40-character"):
        RunKeys.from_dict({**keys.to_dict(), "server_secret": "short"})


def _intruders(endpoint: str, keys: RunKeys) -> list[zmq.Socket]:
    """PUSH sockets that must not get through: no CURVE, another run's keys, and a client that
    knows the server's public key but has its own keypair. Their sends time out rather than
    block: a PUSH socket whose handshake was refused may have no pipe left to queue on."""
    ctx = zmq.Context.instance()
    plain = ctx.socket(zmq.PUSH)
    other_run = ctx.socket(zmq.PUSH)
    RunKeys.generate().apply_client(other_run)
    impostor = ctx.socket(zmq.PUSH)
    public, secret = zmq.curve_keypair()
    impostor.curve_publickey, impostor.curve_secretkey = public, secret
    impostor.curve_serverkey = keys.server_public
    socks = [plain, other_run, impostor]
    for s in socks:
        s.linger = 0
        s.sndtimeo = 1000
        s.connect(endpoint)
    return socks


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:0", "tcp://0.0.0.0:0"])
def test_only_the_runs_client_gets_samples_through(keys, address):
    with SampleReceiver(address, security=keys) as rx:
        endpoint = rx.endpoint.replace("0.0.0.0", "127.0.0.1")
        intruders = _intruders(endpoint, keys)
        with SampleSender(endpoint, security=keys) as tx:
            try:
                assert tx.send("chunk", {"x": np.arange(3)}, {"who": "legit", "n": 0})
                for i, s in enumerate(intruders):
                    # zmq.Again: refused before it could even queue, also kept out
                    with contextlib.suppress(zmq.Again):
                        s.send_multipart(encode("chunk", {"x": np.arange(3)}, {"who": f"bad{i}"}))
                time.sleep(0.3)  # handshakes fail, the legit stream goes on
                assert tx.send("chunk", {"x": np.arange(3)}, {"who": "legit", "n": 1})
                got = []
                while (msg := rx.recv(timeout_ms=500)) is not None:
                    got.append(msg.meta)
            finally:
                for s in intruders:
                    s.close()
    assert got == [{"who": "legit", "n": 0}, {"who": "legit", "n": 1}]


def test_curve_request_reply_and_parameters(keys):
    loaded = RunKeys.from_dict(keys.to_dict())  # what a worker gets in its spec
    with (
        InferenceServer("tcp://127.0.0.1:0", security=keys) as server,
        InferenceClient(server.endpoint, identity="a0", security=loaded) as client,
        ParamPublisher("tcp://127.0.0.1:0", security=keys) as pub,
        ParamSubscriber(pub.endpoint, security=loaded) as sub,
        ParamSubscriber(pub.endpoint) as outsider,
    ):
        assert client.send("act", {"obs": np.ones(2)})
        batch = []
        end = time.monotonic() + 5
        while not batch and time.monotonic() < end:
            batch = server.recv(timeout_ms=100)
        assert [peer for peer, _ in batch] == [b"a0"]
        assert server.reply(b"a0", "act_result", {"a": batch[0][1].arrays["obs"] + 1})
        np.testing.assert_array_equal(client.recv(timeout_ms=3000).arrays["a"], np.full(2, 2.0))

        pub.publish(9, {"w": np.ones(3)})
        assert sub.poll_latest(timeout_ms=3000).meta["version"] == 9
        assert outsider.poll_latest(timeout_ms=300) is None


def test_non_loopback_bind_needs_keys():
    with pytest.raises(ValueError, match="security=RunKeys"):
        SampleReceiver("tcp://0.0.0.0:0")
