"""The pipeline's ZeroMQ streams: small classes that each own their socket(s) and speak wire.py.

| stream      | binding side (server)          | connecting side (client)        | pattern      |
|-------------|--------------------------------|---------------------------------|--------------|
| inference   | ``InferenceServer`` (policy)   | ``InferenceClient`` (actor)     | ROUTER/DEALER|
| samples     | ``SampleReceiver`` (trainer)   | ``SampleSender`` (actor)        | PULL/PUSH    |
| parameters  | ``ParamPublisher`` (trainer)   | ``ParamSubscriber`` (policy...) | XPUB/SUB     |
| control     | ``ControlServer`` (controller) | ``ControlClient`` (every worker)| ROUTER/DEALER|

Invariants:

- **Timeouts everywhere.** Every receive waits at most ``timeout_ms`` (0 = just look) and every
  send that could block takes a timeout too; ``None``/negative timeouts are refused. Sockets
  close with linger 0, so ``close()`` never waits for unsent data.
- **Robust receivers.** A malformed message (see ``wire.decode``), or one its receiver's
  ``check`` refuses (``contract.py``), is dropped: the stream's ``rejected`` counter goes up
  and the reason is logged through a ``contract.DropLog`` (at most one line per 10 s per
  stream, with the count); nothing raises into the worker loop.
  ``max_message_bytes`` (1 GiB by default; the pipeline passes ``pipeline.max_message_mb``)
  caps one *message*, all its frames together: libzmq drops the connection of a peer whose
  single frame exceeds it, before any memory is spent on the frame, and a message whose frames
  add up to more is dropped on receipt (libzmq hands out a multipart message only once all its
  frames have arrived, so what one message can occupy is bounded by the cap times its frame
  count, at most ``wire.MAX_ARRAYS`` + 1).
- **No pickle**: everything goes through ``wire.encode`` / ``wire.decode``.
- **Zero copy.** Large arrays are sent without a copy, so an array passed to ``send``/``reply``
  must not be modified in place afterwards (send a copy of a buffer that is reused).
  ``ParamPublisher.publish`` always copies, because torch parameters change in place.
  Received arrays are read-only views of the received frames.
- **Identities are not taken over.** ROUTER sockets refuse a second connection with an
  identity already connected (no ``ROUTER_HANDOVER``): a restarted worker's new connection is
  refused until the old one is gone (its process died, so at once) and then retried by libzmq,
  while a stranger cannot steal a live worker's replies. The control stream's messages also
  carry a per-worker token (``ControlClient(token=...)``) that the controller checks.
- **Endpoints.** ``ipc://`` (path under ~100 bytes) or ``inproc://`` on one host, ``tcp://``
  across hosts. ``tcp://:PORT`` binds 127.0.0.1 and port 0 picks a free port; ``endpoint``
  holds the address actually bound, to hand out. Binding a non-loopback address is refused
  unless ``security`` (CURVE keys, see security.py) is given: cluster runs encrypt and
  authenticate every socket. A socket bound to ``0.0.0.0``/``*`` reports that address; peers on
  other hosts must connect to the host's real address with the same port.
- **One zmq.Context per process** (``zmq.Context.instance()``). Processes are started with the
  spawn method; never fork after creating sockets. A socket is used from one thread only.

Back-pressure (samples): ``SampleSender`` holds at most ``hwm`` messages and the receiver at
most its own ``hwm``; beyond that (plus what the OS socket buffers hold) ``send`` waits up to
``timeout_ms`` and then returns False. Nothing queues without bound.

Late joiners (parameters): PUB/SUB delivers only what is published after a subscriber has
connected, so ``ParamPublisher`` keeps the latest parameters and a background thread re-sends
them as soon as a new subscription arrives (XPUB sees each subscribe, also on reconnects).
``ParamSubscriber.poll_latest``
drains its queue and returns only the newest version, never an older or repeated one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import zmq

from hns_train.distributed.contract import ContractError, DropLog
from hns_train.distributed.security import RunKeys
from hns_train.distributed.wire import Message, WireError, decode, encode

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
MAX_IPC_PATH_BYTES = 107  # sockaddr_un.sun_path on Linux, less the final NUL
MAX_IDENTITY_BYTES = 255
PARAMS_KIND = "params"

_Arrays = Mapping[str, np.ndarray] | None
_Meta = Mapping[str, Any] | None


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 in brackets or not) is this host only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # '*', interface names, host names


def resolve_bind(bind: str, security: RunKeys | None = None) -> str:
    """Normalise a bind address: default host 127.0.0.1, port 0 -> any free port."""
    if not isinstance(bind, str) or "://" not in bind:
        raise ValueError(f"bind address {bind!r} must look like tcp://HOST:PORT, ipc://PATH, ...")
    transport, rest = bind.split("://", 1)
    if transport == "ipc":
        if len(os.fsencode(rest)) > MAX_IPC_PATH_BYTES:
            raise ValueError(
                f"ipc path {rest!r} is {len(os.fsencode(rest))} bytes; at most "
                f"{MAX_IPC_PATH_BYTES} allowed (use a shorter directory, e.g. under /tmp)"
            )
        return bind
    if transport == "inproc":
        return bind
    if transport != "tcp":
        raise ValueError(f"transport {transport!r} not supported; use tcp, ipc or inproc")
    host, sep, port = rest.rpartition(":")
    if not sep or not (port == "*" or port.isdigit()):
        raise ValueError(f"tcp bind address {bind!r} needs a port (0 or * for any free port)")
    host = host or "127.0.0.1"
    if not is_loopback(host) and security is None:
        raise ValueError(
            f"binding {bind!r} would expose an unauthenticated socket beyond this host; bind "
            f"127.0.0.1, or pass security=RunKeys for a cluster run"
        )
    return f"tcp://{host}:{'*' if port in ('0', '*') else port}"


def free_tcp_ports(host: str, count: int) -> list[int]:
    """`count` distinct free ports on `host` (all held open together while they are chosen)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


def _check_timeout(timeout_ms: int) -> int:
    if timeout_ms is None or timeout_ms < 0:
        raise ValueError(f"timeout_ms must be >= 0 (no call may block forever), got {timeout_ms}")
    return int(timeout_ms)


def _identity(identity: str | bytes | None) -> bytes | None:
    if identity is None:
        return None
    raw = identity.encode() if isinstance(identity, str) else bytes(identity)
    if not 1 <= len(raw) <= MAX_IDENTITY_BYTES or raw[0] == 0:
        raise ValueError(
            f"identity {identity!r} must be 1..{MAX_IDENTITY_BYTES} bytes, not starting with NUL"
        )
    return raw


class _Stream:
    """One socket, bound or connected, with the shared rejection and closing logic.

    Every stream class takes ``security``, ``max_message_bytes``, ``check`` and ``what`` as
    keywords and passes them here as they are (``**settings``). ``check``, when given, is the
    receiver's contract: it gets each well-formed message and returns what the receiver takes
    instead (the message, or what it made of it), None to pass over it (no longer wanted, not
    wrong), or raises ``ContractError``, which drops and counts the message like a malformed
    one.
    ``what`` names the messages in the stream's drop log lines (by default its class and
    endpoint)."""

    def __init__(
        self,
        socket_type: int,
        *,
        bind: str | None = None,
        connect: str | Sequence[str] | None = None,
        security: RunKeys | None = None,
        sndhwm: int | None = None,
        rcvhwm: int | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        options: Mapping[int, Any] | None = None,
        check: Callable[[Message], Any] | None = None,
        what: str | None = None,
    ) -> None:
        if (bind is None) == (connect is None):
            raise ValueError("give exactly one of bind or connect")
        self.check = check
        self.max_message_bytes = _positive("max_message_bytes", max_message_bytes)
        self.drops = DropLog(what or type(self).__name__)
        self.socket: zmq.Socket = zmq.Context.instance().socket(socket_type)
        try:
            self.socket.linger = 0
            if sndhwm is not None:
                self.socket.sndhwm = _positive("hwm", sndhwm)
            if rcvhwm is not None:
                self.socket.rcvhwm = _positive("hwm", rcvhwm)
            self.socket.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
            for opt, value in (options or {}).items():
                self.socket.setsockopt(opt, value)
            if bind is not None:
                address = resolve_bind(bind, security)
                if security is not None:
                    security.apply_server(self.socket)
                self.socket.bind(address)
                self.endpoint: str = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                endpoints = [connect] if isinstance(connect, str) else list(connect)
                if not endpoints:
                    raise ValueError("connect needs at least one endpoint")
                if security is not None:
                    security.apply_client(self.socket)
                for ep in endpoints:
                    self.socket.connect(ep)
                self.endpoint = endpoints[0]
        except BaseException:
            self.socket.close(linger=0)
            raise
        self.drops.what = what or f"{type(self).__name__} {self.endpoint}"

    def close(self) -> None:
        if not self.socket.closed:
            self.socket.close(linger=0)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def rejected(self) -> int:
        """Messages this stream dropped (malformed, too large, or refused by its owner)."""
        return self.drops.total

    def _reject(self, reason: str, peer: bytes | None = None) -> None:
        self.drops.drop(reason, peer)

    def _decode(self, frames: Sequence[Any], peer: bytes | None = None) -> Message | None:
        size = sum(len(f) for f in frames)
        if size > self.max_message_bytes:
            self._reject(
                f"message of {size} bytes in {len(frames)} frames; at most "
                f"{self.max_message_bytes} allowed",
                peer,
            )
            return None
        try:
            message = decode(frames)
            return message if self.check is None else self.check(message)
        except (WireError, ContractError) as exc:
            self._reject(str(exc), peer)
            return None

    def _collect(self, timeout_ms: int, reads: int, take: Callable[[list], Any]) -> list:
        """What `take` makes of the queued messages, leaving out what it returns None for
        (dropped): once something is queued, at most `reads` messages are read, and until one
        is taken this waits again, up to timeout_ms in all."""
        deadline = _Deadline(timeout_ms)
        out: list = []
        while not out and self.socket.poll(deadline.remaining_ms(), zmq.POLLIN):
            for frames in itertools.islice(_queued(self.socket.recv_multipart, copy=False), reads):
                if (item := take(frames)) is not None:
                    out.append(item)
            if deadline.remaining_ms() == 0:
                break
        return out

    def recv(self, timeout_ms: int = 100) -> Message | None:
        """The next well-formed message, dropping malformed ones, or None after timeout_ms."""
        messages = self._collect(timeout_ms, 1, self._decode)
        return messages[0] if messages else None


def _positive(name: str, value: int) -> int:
    if not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _queued(receive: Callable[..., Any], **options) -> Iterator[Any]:
    """What `receive` (a socket's recv or recv_multipart) returns for each message queued now,
    without waiting."""
    while True:
        try:
            yield receive(flags=zmq.NOBLOCK, **options)
        except zmq.Again:
            return


class _Deadline:
    def __init__(self, timeout_ms: int) -> None:
        self.end = time.monotonic() + _check_timeout(timeout_ms) / 1000

    def remaining_ms(self) -> int:
        return max(0, int((self.end - time.monotonic()) * 1000))


# --- request/reply: inference and control ----------------------------------------------------


class _RouterServer(_Stream):
    """ROUTER: messages arrive as (peer id, Message); replies go to a peer id.

    ``recv`` returns at most ``max_requests`` messages per call (``DEFAULT_MAX_REQUESTS`` of the
    subclass when not given)."""

    DEFAULT_MAX_REQUESTS: int

    def __init__(
        self, bind: str, *, max_requests: int | None = None, hwm: int = 1000, **settings
    ) -> None:
        if max_requests is None:
            max_requests = self.DEFAULT_MAX_REQUESTS
        self.max_requests = _positive("max_requests", max_requests)
        # Unknown or full peers raise instead of being silently dropped, so send() can say so.
        # No ROUTER_HANDOVER: a live peer's identity cannot be taken over by another connection.
        options = {zmq.ROUTER_MANDATORY: 1}
        super().__init__(zmq.ROUTER, bind=bind, sndhwm=hwm, rcvhwm=hwm, options=options, **settings)

    def recv(self, timeout_ms: int = 100) -> list[tuple[bytes, Message]]:
        """Everything queued (at most ``max_requests``), waiting up to timeout_ms for the first."""
        return self._collect(timeout_ms, self.max_requests, self._from_peer)

    def _from_peer(self, frames: list) -> tuple[bytes, Message] | None:
        peer = frames[0].bytes
        if len(frames) < 2:
            self._reject("no payload after the peer id", peer)
            return None
        msg = self._decode(frames[1:], peer)
        return None if msg is None else (peer, msg)

    def send(
        self,
        peer: bytes,
        kind: str,
        arrays: _Arrays = None,
        meta: _Meta = None,
        *,
        timeout_ms: int = 1000,
    ) -> bool:
        """Send to one peer; False if it is not connected or its queue stays full for
        timeout_ms."""
        frames = [bytes(peer), *encode(kind, arrays, meta)]
        deadline = _Deadline(timeout_ms)
        while True:
            try:
                self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                return True
            except zmq.Again:  # that peer's queue is full: wait a little, like a blocking send
                if deadline.remaining_ms() == 0:
                    log.warning("%s: reply to %r timed out (peer queue full)", self.endpoint, peer)
                    return False
                time.sleep(0.001)
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    raise
                log.warning(
                    "%s: no connected peer %r; %s message dropped", self.endpoint, peer, kind
                )
                return False


class _Sender(_Stream):
    """A stream that sends: ``send`` waits up to timeout_ms for room in the queue."""

    def send(
        self, kind: str, arrays: _Arrays = None, meta: _Meta = None, *, timeout_ms: int = 1000
    ) -> bool:
        """Queue one message, its arrays as they are (see the module docstring); False if the
        queue stays full for timeout_ms."""
        if not self.socket.poll(_check_timeout(timeout_ms), zmq.POLLOUT):
            return False
        try:
            self.socket.send_multipart(encode(kind, arrays, meta), flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        return True


class _DealerClient(_Sender):
    """DEALER: requests to, and replies from, a ROUTER server; ``identity`` is the peer id the
    server sees.

    ``token``, when given, goes into the meta of every message sent (key ``"token"``): the
    controller hands each worker incarnation its own and accepts nothing without it."""

    def __init__(
        self,
        connect: str | Sequence[str],
        identity: str | bytes | None = None,
        *,
        token: str | None = None,
        hwm: int = 1000,
        **settings,
    ) -> None:
        self.identity = _identity(identity)
        self.token = token
        options = {} if self.identity is None else {zmq.ROUTING_ID: self.identity}
        super().__init__(
            zmq.DEALER, connect=connect, sndhwm=hwm, rcvhwm=hwm, options=options, **settings
        )

    def send(self, kind: str, arrays: _Arrays = None, meta: _Meta = None, **options) -> bool:
        if self.token is not None:
            meta = {**dict(meta or {}), "token": self.token}
        return super().send(kind, arrays, meta, **options)


class InferenceServer(_RouterServer):
    """Policy-worker side: batches of requests from many actors, one reply per request.

    ``recv`` returns every queued request (up to ``max_requests``) so batches grow by themselves
    while the worker is busy computing the previous one.
    """

    DEFAULT_MAX_REQUESTS = 256
    reply = _RouterServer.send  # one reply per request, to the client that sent it


class InferenceClient(_DealerClient):
    """Actor side: send requests, receive replies (each reply carries what the actor needs to
    match it, e.g. a group index in ``meta``; replies come back in request order per server)."""


class ControlServer(_RouterServer):
    """Controller side: heartbeats, stats and commands from and to workers by worker id."""

    DEFAULT_MAX_REQUESTS = 1024


class ControlClient(_DealerClient):
    """Worker side of the control stream; ``identity`` is the worker id the controller sees,
    ``token`` this worker incarnation's (see ``_DealerClient``)."""

    def __init__(self, connect: str, identity: str | bytes, **settings) -> None:
        if identity is None:
            raise ValueError("a ControlClient needs an identity (its worker id)")
        super().__init__(connect, identity, **settings)


# --- samples ---------------------------------------------------------------------------------


class SampleSender(_Sender):
    """Actor side of the sample stream (PUSH). Connect to one or several receivers (messages
    then go round-robin). ``send`` returns False under back-pressure instead of queueing."""

    def __init__(self, connect: str | Sequence[str], hwm: int = 8, **settings) -> None:
        super().__init__(zmq.PUSH, connect=connect, sndhwm=hwm, **settings)


class SampleReceiver(_Stream):
    """Trainer side of the sample stream (PULL, binds); any number of senders connect."""

    def __init__(self, bind: str, hwm: int = 8, **settings) -> None:
        super().__init__(zmq.PULL, bind=bind, rcvhwm=hwm, **settings)


# --- parameters ------------------------------------------------------------------------------


class ParamPublisher(_Stream):
    """Trainer side of the parameter stream.

    ``publish`` copies the arrays, keeps them as the latest version and hands them to a
    background thread that owns the XPUB socket. The thread sends each new version to all
    subscribers and re-sends the latest to everyone whenever a subscription arrives (a late
    joiner or a reconnect catches up at once).
    Each message is kind ``"params"`` with ``meta["version"]`` and ``meta["publisher"]`` (a
    random id of this publisher, so subscribers notice a restarted trainer).
    """

    _wake_ids = itertools.count()

    def __init__(self, bind: str, *, hwm: int = 4, **settings) -> None:
        self.publisher_id = os.urandom(8).hex()
        self.sends = 0  # messages handed to the socket, re-sends included
        self._latest: list | None = None
        self._lock = threading.Lock()
        options = {zmq.XPUB_VERBOSE: 1}
        super().__init__(zmq.XPUB, bind=bind, sndhwm=hwm, options=options, **settings)
        ctx = zmq.Context.instance()
        wake = f"inproc://hns-param-wake-{os.getpid()}-{next(self._wake_ids)}"
        self._wake_rx = ctx.socket(zmq.PAIR)
        self._wake_rx.linger = 0
        self._wake_rx.bind(wake)
        self._wake_tx = ctx.socket(zmq.PAIR)
        self._wake_tx.linger = 0
        self._wake_tx.connect(wake)
        # From here on the XPUB and wake_rx sockets belong to the thread.
        self._thread = threading.Thread(target=self._serve, name="ParamPublisher", daemon=True)
        self._thread.start()

    def publish(self, version: int, arrays: _Arrays = None, meta: _Meta = None) -> None:
        """Make ``version`` the latest and send it (asynchronously, never blocks)."""
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
            raise ValueError(f"version must be an int, got {version!r}")
        meta = dict(meta or {})
        if meta.get("version", version) != version or "publisher" in meta:
            raise ValueError(
                "meta keys 'version' and 'publisher' are set by ParamPublisher "
                f"(got version={meta.get('version')!r} for version {version})"
            )
        meta.update(version=int(version), publisher=self.publisher_id)
        owned = {name: np.array(a, copy=True, order="C") for name, a in (arrays or {}).items()}
        frames = encode(PARAMS_KIND, owned, meta)
        with self._lock:
            self._latest = frames
        try:
            self._wake_tx.send(b"new", flags=zmq.NOBLOCK)
        except zmq.Again:  # only if the thread has died; the next subscribe cannot be served
            log.error("ParamPublisher %s: publishing thread is not running", self.endpoint)

    def _serve(self) -> None:
        xpub = self.socket
        poller = zmq.Poller()
        poller.register(xpub, zmq.POLLIN)
        poller.register(self._wake_rx, zmq.POLLIN)
        sent: list | None = None
        try:
            while True:
                events = dict(poller.poll(1000))
                # "new" only wakes the loop; "stop" ends it
                if self._wake_rx in events and b"stop" in _queued(self._wake_rx.recv):
                    return
                resend = False
                if xpub in events:
                    # Read them all (a list: any() would stop at the first); a subscribe starts
                    # with 0x01, an unsubscribe with 0x00.
                    resend = any([sub[:1] == b"\x01" for sub in _queued(xpub.recv)])
                with self._lock:
                    latest = self._latest
                if latest is None or (latest is sent and not resend):
                    continue
                try:
                    xpub.send_multipart(latest, flags=zmq.NOBLOCK, copy=False)
                    self.sends += 1
                except zmq.ZMQError as exc:  # PUB drops for full peers; anything else: log
                    log.warning("ParamPublisher %s: send failed: %s", self.endpoint, exc)
                sent = latest
        finally:
            self._wake_rx.close(linger=0)
            xpub.close(linger=0)

    def close(self) -> None:
        if self._wake_tx.closed:
            return
        with contextlib.suppress(zmq.ZMQError):  # a full or dead pipe: the join times out
            self._wake_tx.send(b"stop", flags=zmq.NOBLOCK)
        self._thread.join(timeout=5)
        self._wake_tx.close(linger=0)


class ParamSubscriber(_Stream):
    """Policy/eval side of the parameter stream (SUB, connects)."""

    def __init__(self, connect: str | Sequence[str], *, hwm: int = 4, **settings) -> None:
        self.version: int | None = None  # version last returned by poll_latest
        self.publisher: str | None = None
        options = {zmq.SUBSCRIBE: b""}
        super().__init__(zmq.SUB, connect=connect, rcvhwm=hwm, options=options, **settings)

    def poll_latest(self, timeout_ms: int = 0) -> Message | None:
        """The newest version queued, if newer than the last one returned; else None.

        Drains everything queued, waiting up to timeout_ms for something new. A message from a
        different publisher (a restarted trainer) is accepted whatever its version.
        """
        # at most 10,000 reads: bounded even if the publisher refills as fast as we drain
        newer = self._collect(timeout_ms, 10_000, self._newer)
        return newer[-1] if newer else None

    def _newer(self, frames: list) -> Message | None:
        """The parameter message in `frames` if it is newer than the last one taken (which it
        then becomes); None otherwise."""
        msg = self._decode(frames)
        if msg is None:
            return None
        v, pub = msg.meta.get("version"), msg.meta.get("publisher")
        if msg.kind != PARAMS_KIND or type(v) is not int or not isinstance(pub, str):
            self._reject(f"not a parameter message (kind {msg.kind!r}, version {v!r})")
            return None
        if pub != self.publisher or self.version is None or v > self.version:
            self.version, self.publisher = v, pub
            return msg
        return None
