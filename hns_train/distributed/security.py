"""ZeroMQ CURVE keys for cluster runs: generate, hand to workers as plain data, apply to sockets.

One run has two keypairs, made by the controller with ``zmq.curve_keypair``:

- the *server* pair: every binding socket of the run is a CURVE server with it;
- the *client* pair: every connecting socket is a CURVE client with it (and the server public key).

Binding sockets authenticate clients through a ZAP handler (one
``zmq.auth.thread.ThreadAuthenticator`` per process and context, started before the first
binding socket) that accepts only the run's client public key, in a ZAP domain named after the
run's server key; a peer with other keys, or none, never gets a message through. CURVE also
encrypts the traffic.

The keys are never written to disk: the controller makes them per run and hands them to its
workers inside their start specs (``to_dict`` / ``from_dict``). Secret keys never appear in
``repr``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

log = logging.getLogger(__name__)

_KEY_FIELDS = ("server_public", "server_secret", "client_public", "client_secret")


def _check_key(name: str, key: Any) -> bytes:
    if isinstance(key, str):
        key = key.encode("ascii", errors="replace")
    if not isinstance(key, bytes) or len(key) != 40:
        raise ValueError(f"{name} must be a 40-character z85 CURVE key")
    try:
        z85.decode(key)
    except Exception as exc:
        raise ValueError(f"{name} is not valid z85: {exc}") from exc
    return key


@dataclass(frozen=True)
class RunKeys:
    """The CURVE keypairs of one run (z85-encoded bytes, 40 characters each)."""

    server_public: bytes
    server_secret: bytes = field(repr=False)
    client_public: bytes
    client_secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        for name in _KEY_FIELDS:
            object.__setattr__(self, name, _check_key(name, getattr(self, name)))
        for pair in ("server", "client"):
            public, secret = getattr(self, f"{pair}_public"), getattr(self, f"{pair}_secret")
            if zmq.curve_public(secret) != public:
                raise ValueError(f"{pair}_public does not belong to {pair}_secret")

    @classmethod
    def generate(cls) -> RunKeys:
        """Fresh keypairs for a new run."""
        if not zmq.has("curve"):
            raise RuntimeError("this libzmq was built without CURVE support")
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public, server_secret, client_public, client_secret)

    @property
    def zap_domain(self) -> str:
        """ZAP domain of this run: keeps two runs in one process apart."""
        return "hns-" + hashlib.sha256(self.server_public).hexdigest()[:16]

    def to_dict(self) -> dict[str, str]:
        """Plain strings, for handing the keys to a worker (e.g. a Ray actor argument)."""
        return {name: getattr(self, name).decode("ascii") for name in _KEY_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunKeys:
        missing = [n for n in _KEY_FIELDS if n not in data]
        if missing:
            raise ValueError(f"CURVE key data lacks {missing}; needs {list(_KEY_FIELDS)}")
        return cls(**{n: data[n] for n in _KEY_FIELDS})

    # --- sockets ---------------------------------------------------------------------------

    def apply_server(self, socket: zmq.Socket) -> None:
        """Make a socket (before bind) a CURVE server that admits only this run's client key."""
        _allow(socket.context, self.zap_domain, self.client_public)
        socket.curve_secretkey = self.server_secret
        socket.curve_publickey = self.server_public
        socket.curve_server = True
        socket.zap_domain = self.zap_domain.encode()
        # Fail closed if the ZAP handler were ever missing (libzmq >= 4.3).
        with contextlib.suppress(zmq.ZMQError, AttributeError):
            socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)

    def apply_client(self, socket: zmq.Socket) -> None:
        """Make a socket (before connect) a CURVE client of this run's servers."""
        socket.curve_secretkey = self.client_secret
        socket.curve_publickey = self.client_public
        socket.curve_serverkey = self.server_public


class _KeySet(set):
    """ZAP credentials provider: the client keys allowed in one domain."""

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = key in self
        if not allowed:
            log.warning("CURVE: refused a client key in ZAP domain %s", domain)
        return allowed


# One started ThreadAuthenticator per zmq context of this process, with its domains' key sets.
_LOCK = threading.Lock()
_BY_CONTEXT: dict[int, tuple[ThreadAuthenticator, dict[str, _KeySet]]] = {}


def _allow(context: zmq.Context, domain: str, client_public: bytes) -> None:
    """Admit `client_public` in ZAP `domain` on `context`, whose authenticator starts on first
    use."""
    with _LOCK:
        entry = _BY_CONTEXT.get(id(context))
        if entry is None or entry[0].context is not context:
            auth = ThreadAuthenticator(context, log=log)
            auth.start()
            entry = _BY_CONTEXT[id(context)] = (auth, {})
        auth, domains = entry
        keyset = domains.get(domain)
        if keyset is None:
            keyset = domains[domain] = _KeySet()
            auth.configure_curve_callback(domain, credentials_provider=keyset)
        keyset.add(client_public)


@atexit.register
def _stop_authenticators() -> None:
    with _LOCK:
        for auth, _ in _BY_CONTEXT.values():
            auth.stop()
        _BY_CONTEXT.clear()
