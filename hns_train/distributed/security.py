"""ZeroMQ CURVE keys for cluster runs: generate, store in the run dir, apply to sockets.

One run has two keypairs, made by the controller with ``zmq.curve_keypair``:

- the *server* pair: every binding socket of the run is a CURVE server with it;
- the *client* pair: every connecting socket is a CURVE client with it (and the server public key).

Binding sockets authenticate clients through a ZAP handler (one
``zmq.auth.thread.ThreadAuthenticator`` per process and context, started before the first
binding socket) that accepts only the run's client public key, in a ZAP domain named after the
run's server key; a peer with other keys, or none, never gets a message through. CURVE also
encrypts the traffic.

Key file: ``<run_dir>/security/curve_keys.json`` (z85 strings), created with mode 0600 in a 0700
directory and written atomically. ``load`` refuses a file or directory that other users can read
or write, or that belongs to another user. Secret keys never appear in ``repr``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

log = logging.getLogger(__name__)

KEYS_DIR = "security"
KEYS_FILE = "curve_keys.json"
KEYS_FORMAT = 1
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

    # --- files -----------------------------------------------------------------------------

    @staticmethod
    def path(run_dir: str | os.PathLike) -> Path:
        return Path(run_dir) / KEYS_DIR / KEYS_FILE

    def save(self, run_dir: str | os.PathLike) -> Path:
        """Write the key file (0600, directory 0700); returns its path."""
        path = self.path(run_dir)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)  # mkdir's mode is filtered by the umask
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"format": KEYS_FORMAT, **self.to_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> RunKeys:
        """Read the key file, refusing it when other users could read or change it."""
        path = cls.path(run_dir)
        for p, what in ((path.parent, "directory"), (path, "file")):
            st = os.stat(p)
            if st.st_uid != os.getuid():
                raise ValueError(f"CURVE key {what} {p} belongs to uid {st.st_uid}, not to us")
            if st.st_mode & 0o077:
                raise ValueError(
                    f"CURVE key {what} {p} has mode {stat.filemode(st.st_mode)}; other users "
                    f"must have no access (file 0600, directory 0700)"
                )
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"CURVE key file {path} is unreadable: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != KEYS_FORMAT:
            raise ValueError(f"CURVE key file {path} is not format {KEYS_FORMAT}")
        return cls.from_dict(data)

    # --- sockets ---------------------------------------------------------------------------

    def apply_server(self, socket: zmq.Socket) -> None:
        """Make a socket (before bind) a CURVE server that admits only this run's client key."""
        _authenticator(socket.context).allow(self.zap_domain, self.client_public)
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


class _KeySet:
    """ZAP credentials provider: the client keys allowed in one domain."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = key in self.keys
        if not allowed:
            log.warning("CURVE: refused a client key in ZAP domain %s", domain)
        return allowed


class _Authenticators:
    """One started ThreadAuthenticator per zmq context of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_context: dict[int, tuple[ThreadAuthenticator, dict[str, _KeySet]]] = {}

    def get(self, context: zmq.Context) -> _Authenticators._Handle:
        with self._lock:
            entry = self._by_context.get(id(context))
            if entry is None or entry[0].context is not context:
                auth = ThreadAuthenticator(context, log=log)
                auth.start()
                entry = (auth, {})
                self._by_context[id(context)] = entry
            return self._Handle(*entry, self._lock)

    def stop_all(self) -> None:
        with self._lock:
            for auth, _ in self._by_context.values():
                auth.stop()
            self._by_context.clear()

    class _Handle:
        def __init__(self, auth: ThreadAuthenticator, domains: dict[str, _KeySet], lock) -> None:
            self.auth, self.domains, self.lock = auth, domains, lock

        def allow(self, domain: str, client_public: bytes) -> None:
            with self.lock:
                keyset = self.domains.get(domain)
                if keyset is None:
                    keyset = self.domains[domain] = _KeySet()
                    self.auth.configure_curve_callback(domain, credentials_provider=keyset)
                keyset.keys.add(client_public)


_AUTHENTICATORS = _Authenticators()
atexit.register(_AUTHENTICATORS.stop_all)


def _authenticator(context: zmq.Context) -> _Authenticators._Handle:
    return _AUTHENTICATORS.get(context)
