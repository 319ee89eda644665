"""The wire format: named numpy arrays plus a small metadata dict as one multipart message.

Layout of a message (format version 1):

- frame 0: a msgpack map ``{"magic": "hns", "version": 1, "kind": str,
  "arrays": [{"name": str, "dtype": str, "shape": [int, ...]}, ...], "meta": {...}}``
- frames 1..N: the raw bytes of each array in the order of ``arrays`` (C order, little endian).

Invariants:

- **No pickle.** The header is msgpack (plain data only: no extension types are accepted), the
  arrays are raw buffers read with ``np.frombuffer`` and dtypes come from a fixed allow-list of
  plain numeric and bool types. Nothing received can run code or build an arbitrary object.
- **Versioned.** A header whose magic is not ``"hns"`` or whose version is not ``FORMAT_VERSION``
  is rejected (a newer sender is not guessed at).
- **Zero copy.** ``encode`` hands out the arrays themselves as frames (pyzmq sends large frames
  without copying when ``copy=False``), so an array must not be modified in place after it is
  sent. ``decode`` returns read-only views of the received frames.
- **Strict.** ``decode`` raises ``WireError`` (a ``ValueError``) for anything malformed, naming
  the problem; it never raises another exception type and never allocates more memory than the
  frames it was given (declared shapes are checked against the real buffer sizes first).

Nested dicts travel as flat ``"a/b"`` names, as ``Chunk.to_arrays()`` writes them
(``"obs/<key>"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

MAGIC = "hns"
FORMAT_VERSION = 1

# Limits that bound the work and memory of decoding an untrusted header.
MAX_HEADER_BYTES = 1 << 20
MAX_ARRAYS = 4096
MAX_NDIM = 32
MAX_DIM = 1 << 40
MAX_NAME_CHARS = 256
MAX_KIND_CHARS = 64

# dtype string on the wire (numpy ``dtype.str``, always little endian) -> dtype
ALLOWED_DTYPES: dict[str, np.dtype] = {
    np.dtype(t).newbyteorder("<").str: np.dtype(t).newbyteorder("<")
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
}

_HEADER_KEYS = {"magic", "version", "kind", "arrays", "meta"}
_ARRAY_KEYS = {"name", "dtype", "shape"}


class WireError(ValueError):
    """A message that cannot be encoded or decoded; the text names the problem."""


@dataclass
class Message:
    """One decoded message: its kind, named arrays and metadata."""

    kind: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def _describe(name: Any, dtype: Any, shape: Sequence[int]) -> tuple[dict, np.dtype]:
    """The header's descriptor of one array and the dtype it travels as."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise WireError(
            f"array name {name!r} must be a non-empty str of at most {MAX_NAME_CHARS} chars"
        )
    dt = np.dtype(dtype)
    plain = dt.kind in "biuf" and dt.fields is None and dt.subdtype is None
    wire = dt.newbyteorder("<") if dt.byteorder != "|" else dt
    if not plain or wire.str not in ALLOWED_DTYPES:
        raise WireError(
            f"array {name!r} has dtype {dt} which cannot travel; allowed: "
            f"{', '.join(str(d) for d in ALLOWED_DTYPES.values())}"
        )
    if len(shape) > MAX_NDIM:
        raise WireError(f"array {name!r} has {len(shape)} dims; at most {MAX_NDIM} allowed")
    return {"name": name, "dtype": wire.str, "shape": [int(n) for n in shape]}, wire


def _meta_default(obj: Any) -> Any:
    # numpy scalars are common in stats dicts; send them as plain Python numbers.
    if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
        return obj.item()
    if isinstance(obj, np.ndarray):
        raise TypeError("numpy arrays belong in `arrays`, not in `meta`")
    raise TypeError(f"{type(obj).__name__} is not msgpack-able")


def encode(
    kind: str,
    arrays: Mapping[str, np.ndarray] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> list:
    """Frames of one message: ``[header bytes, array, array, ...]``.

    Arrays that are already C-contiguous and little endian are handed out as-is (zero copy);
    others are converted once. Meta must be msgpack-able (str keys; tuples arrive as lists;
    numpy scalars arrive as Python numbers).
    """
    if not isinstance(kind, str) or not kind or len(kind) > MAX_KIND_CHARS:
        raise WireError(f"kind must be a non-empty str of at most {MAX_KIND_CHARS} chars")
    arrays = arrays or {}
    if len(arrays) > MAX_ARRAYS:
        raise WireError(f"{len(arrays)} arrays in one message; at most {MAX_ARRAYS} allowed")
    descriptors = []
    frames: list = [b""]
    for name, value in arrays.items():
        arr = np.asarray(value)
        descriptor, dt = _describe(name, arr.dtype, arr.shape)
        descriptors.append(descriptor)
        # ascontiguousarray would make 0-d 1-d
        frames.append(arr.astype(dt, order="C", copy=False))
    frames[0] = _pack_header(kind, descriptors, meta)
    # Unpack once with the receiver's rules (a few microseconds for a small header) so that a
    # message that encodes always decodes, e.g. meta with int keys fails here, not remotely.
    try:
        _unpack_header(frames[0])
    except WireError as exc:
        raise WireError(f"meta of a {kind!r} message would not decode: {exc}") from exc
    return frames


def _pack_header(kind: str, descriptors: list[dict], meta: Mapping[str, Any] | None) -> bytes:
    header = {
        "magic": MAGIC,
        "version": FORMAT_VERSION,
        "kind": kind,
        "arrays": descriptors,
        "meta": dict(meta or {}),
    }
    try:
        packed = msgpack.packb(header, use_bin_type=True, default=_meta_default)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"meta of a {kind!r} message cannot be packed: {exc}") from exc
    if len(packed) > MAX_HEADER_BYTES:
        raise WireError(f"header is {len(packed)} bytes; at most {MAX_HEADER_BYTES} allowed")
    return packed


def encoded_size(
    kind: str,
    layout: Mapping[str, tuple[Any, Sequence[int]]],
    meta: Mapping[str, Any] | None = None,
) -> int:
    """Bytes of the message `encode` makes from arrays of these (dtype, shape), all frames
    together, without making any array: how a run checks its messages against a size cap
    before it starts (`message_sizes.py`)."""
    descriptors, data = [], 0
    for name, (dtype, shape) in layout.items():
        descriptor, wire = _describe(name, dtype, shape)
        descriptors.append(descriptor)
        data += math.prod(descriptor["shape"]) * wire.itemsize
    return len(_pack_header(kind, descriptors, meta)) + data


def _buffer(frame: Any, index: int) -> memoryview:
    buf = getattr(frame, "buffer", None)  # zmq.Frame: view of the message, no copy
    try:
        view = memoryview(buf if buf is not None else frame)
    except TypeError as exc:
        raise WireError(f"frame {index} is a {type(frame).__name__}, not a buffer") from exc
    if not view.c_contiguous:
        raise WireError(f"frame {index} is not a contiguous buffer")
    if view.nbytes == 0:
        return memoryview(b"")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _no_ext(code: int, data: bytes) -> Any:
    raise WireError(f"msgpack extension type {code} is not allowed in a header")


def short_repr(value: Any, limit: int = 80) -> str:
    """repr bounded in length: reasons are logged, and a hostile header can be large."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unpack_header(head: Any) -> Any:
    try:
        return msgpack.unpackb(
            head, raw=False, strict_map_key=True, ext_hook=_no_ext, use_list=True
        )
    except WireError:
        raise
    except Exception as exc:
        raise WireError(f"header is not valid msgpack: {type(exc).__name__}: {exc}") from exc


def _check_descriptor(i: int, d: Any) -> tuple[str, np.dtype, tuple[int, ...]]:
    if not isinstance(d, dict) or set(d) != _ARRAY_KEYS:
        raise WireError(f"array descriptor {i} must be a map with keys {sorted(_ARRAY_KEYS)}")
    name, dtype, shape = d["name"], d["dtype"], d["shape"]
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise WireError(f"array descriptor {i}: name must be a str of 1..{MAX_NAME_CHARS} chars")
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
        raise WireError(
            f"array {name!r}: dtype {short_repr(dtype)} is not allowed; "
            f"allowed: {sorted(ALLOWED_DTYPES)}"
        )
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        raise WireError(f"array {name!r}: shape must be a list of at most {MAX_NDIM} ints")
    for n in shape:
        # bool is an int subclass; msgpack never yields it for an int, but a crafted header can.
        if type(n) is not int or not 0 <= n <= MAX_DIM:
            raise WireError(f"array {name!r}: shape {short_repr(shape)} needs ints in 0..{MAX_DIM}")
    return name, ALLOWED_DTYPES[dtype], tuple(shape)


def decode(frames: Sequence[Any]) -> Message:
    """Parse frames (bytes, ``zmq.Frame`` or memoryview) into a ``Message``.

    The arrays are read-only views of the frames.
    Raises ``WireError`` for anything malformed.
    """
    try:
        return _decode(frames)
    except WireError:
        raise
    except Exception as exc:  # a last guard: the contract is "WireError or a Message"
        raise WireError(f"malformed message: {type(exc).__name__}: {short_repr(str(exc))}") from exc


def _decode(frames: Sequence[Any]) -> Message:
    if isinstance(frames, (bytes, bytearray, memoryview)) or not isinstance(frames, Sequence):
        raise WireError("a message is a sequence of frames")
    if len(frames) == 0:
        raise WireError("empty message (no header frame)")
    head = _buffer(frames[0], 0)
    if len(head) > MAX_HEADER_BYTES:
        raise WireError(f"header is {len(head)} bytes; at most {MAX_HEADER_BYTES} allowed")
    header = _unpack_header(head)
    if not isinstance(header, dict):
        raise WireError(f"header must be a map, got {type(header).__name__}")
    if header.get("magic") != MAGIC:
        raise WireError(f"wrong magic {short_repr(header.get('magic'))}; expected {MAGIC!r}")
    version = header.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise WireError(
            f"format version {short_repr(version)} not supported; this build reads {FORMAT_VERSION}"
        )
    if set(header) != _HEADER_KEYS:
        raise WireError(
            f"header keys {short_repr(list(header))} differ from {sorted(_HEADER_KEYS)}"
        )
    kind, descriptors, meta = header["kind"], header["arrays"], header["meta"]
    if not isinstance(kind, str) or not kind or len(kind) > MAX_KIND_CHARS:
        raise WireError(f"kind must be a str of 1..{MAX_KIND_CHARS} chars")
    if not isinstance(meta, dict):
        raise WireError(f"meta must be a map, got {type(meta).__name__}")
    if not isinstance(descriptors, list) or len(descriptors) > MAX_ARRAYS:
        raise WireError(f"arrays must be a list of at most {MAX_ARRAYS} descriptors")
    if len(frames) != 1 + len(descriptors):
        raise WireError(
            f"{kind!r} message declares {len(descriptors)} arrays but has "
            f"{len(frames) - 1} array frames"
        )
    arrays: dict[str, np.ndarray] = {}
    for i, d in enumerate(descriptors):
        name, dtype, shape = _check_descriptor(i, d)
        if name in arrays:
            raise WireError(f"array name {name!r} appears twice")
        buf = _buffer(frames[i + 1], i + 1)
        expected = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
        if len(buf) != expected:
            raise WireError(
                f"array {name!r}: shape {list(shape)} of {dtype} needs {expected} bytes, "
                f"frame has {len(buf)}"
            )
        arrays[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return Message(kind=kind, arrays=arrays, meta=meta)
