"""Wire format: exact round trips, strict rejection of malformed input, bounded decoding."""

from __future__ import annotations

import multiprocessing
import tracemalloc

import msgpack
import numpy as np
import pytest

from hns_train.agents.chunks import Chunk
from hns_train.distributed import wire
from hns_train.distributed.wire import WireError, decode, encode

SHAPES = [(), (0,), (7,), (3, 4), (2, 0, 3), (1, 1, 1, 2)]


def _random(dtype: np.dtype, shape, rng) -> np.ndarray:
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.normal(size=shape).astype(dtype)


def _header(frames) -> dict:
    return msgpack.unpackb(bytes(frames[0]), raw=False)


def _pack(header) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def _as_bytes(frames) -> list[bytes]:
    """What a receiver gets: plain bytes per frame."""
    return [f if isinstance(f, bytes) else f.tobytes() for f in frames]


@pytest.mark.parametrize("dtype", list(wire.ALLOWED_DTYPES.values()), ids=str)
def test_every_allowed_dtype_round_trips_in_every_shape(dtype):
    rng = np.random.default_rng(0)
    arrays = {f"a{i}": _random(dtype, shape, rng) for i, shape in enumerate(SHAPES)}
    msg = decode(_as_bytes(encode("test", arrays)))
    assert msg.kind == "test"
    assert list(msg.arrays) == list(arrays)
    for name, sent in arrays.items():
        got = msg.arrays[name]
        assert got.dtype == dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)


def test_meta_round_trip_and_numpy_scalars_become_numbers():
    meta = {
        "version": 12,
        "nested": {"loss": 0.25, "names": ["a", "b"], "none": None, "flag": True},
        "blob": b"\x00\x01",
        "big": 2**62,
        "np_float": np.float32(1.5),
        "np_int": np.int64(-3),
        "tuple": (1, 2),
    }
    got = decode(encode("stats", meta=meta)).meta
    assert got["nested"] == meta["nested"] and got["blob"] == b"\x00\x01" and got["big"] == 2**62
    assert got["np_float"] == 1.5 and type(got["np_float"]) is float
    assert got["np_int"] == -3 and type(got["np_int"]) is int
    assert got["tuple"] == [1, 2]  # msgpack has no tuple


def test_non_contiguous_and_big_endian_arrays_arrive_as_little_endian_c_order():
    base = np.arange(24, dtype=">i4").reshape(4, 6)
    view = base[:, ::2].T  # neither contiguous nor native order
    got = decode(_as_bytes(encode("x", {"v": view}))).arrays["v"]
    assert got.dtype == np.dtype("<i4")
    np.testing.assert_array_equal(got, view)


def test_decoded_arrays_are_read_only_views_of_the_frames():
    frames = _as_bytes(encode("x", {"v": np.arange(5.0)}))
    view = decode(frames).arrays["v"]
    assert not view.flags.writeable and view.base is not None  # a view of the received bytes


def test_chunk_arrays_travel_unchanged():
    rng = np.random.default_rng(1)
    T, B, H = 4, 3, 8
    chunk = Chunk(
        obs={
            "agent_qpos": rng.normal(size=(T, B, 6)).astype(np.float32),
            "mask_box_obs": rng.random((T, B, 2)) < 0.5,
        },
        actions=rng.integers(0, 11, (T, B, 5)),
        logp=rng.normal(size=(T, B)).astype(np.float32),
        values=rng.normal(size=(T, B)).astype(np.float32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        episode_start=np.zeros((T, B), bool),
        truncated=np.zeros((T, B), bool),
        truncated_value=np.zeros((T, B), np.float32),
        bootstrap_value=rng.normal(size=B).astype(np.float32),
        lstm_state=rng.normal(size=(1, B, 4, H)).astype(np.float32),
        policy_version=np.full(B, 7, np.int64),
    )
    msg = decode(_as_bytes(encode("chunk", chunk.to_arrays(), {"actor": "a0"})))
    back = Chunk.from_arrays(msg.arrays).validate()
    for name, value in chunk.to_arrays().items():
        got = back.to_arrays()[name]
        assert got.dtype == value.dtype
        np.testing.assert_array_equal(got, value)


@pytest.mark.parametrize(
    "arrays, meta, needle",
    [
        ({"o": np.array([None, 1], dtype=object)}, None, "dtype object"),
        ({"c": np.zeros(2, np.complex64)}, None, "complex64"),
        ({"s": np.array(["ab"])}, None, "<U2"),
        ({"r": np.zeros(2, dtype=[("x", "f4")])}, None, "cannot travel"),
        ({"t": np.zeros(2, "M8[s]")}, None, "datetime64"),
        (None, {1: "int key"}, "would not decode"),
        (None, {"a": np.zeros(3)}, "belong in `arrays`"),
        (None, {"f": object()}, "not msgpack-able"),
        ({"": np.zeros(1)}, None, "array name"),
    ],
)
def test_encode_refuses_what_cannot_travel(arrays, meta, needle):
    with pytest.raises(WireError, match=needle):
        encode("x", arrays, meta)


def test_encode_refuses_bad_kind():
    for kind in ("", 3, "k" * 65):
        with pytest.raises(WireError, match="kind"):
            encode(kind)


def _valid() -> list[bytes]:
    return _as_bytes(
        encode(
            "chunk",
            {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.ones(4, bool)},
            {"v": 1},
        )
    )


def _with_header(frames, **changes) -> list[bytes]:
    header = _header(frames)
    header.update(changes)
    return [_pack(header), *frames[1:]]


def _with_descriptor(frames, index, **changes) -> list[bytes]:
    header = _header(frames)
    header["arrays"][index].update(changes)
    return [_pack(header), *frames[1:]]


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda f: [], "empty message"),
        (lambda f: f[0], "sequence of frames"),
        (lambda f: [b"\xc1" + f[0][1:], *f[1:]], "not valid msgpack"),
        (lambda f: [_pack([1, 2]), *f[1:]], "must be a map"),
        (lambda f: _with_header(f, magic="hnz"), "wrong magic"),
        (lambda f: _with_header(f, version=2), "version 2 not supported"),
        (lambda f: _with_header(f, version="1"), "version '1' not supported"),
        (lambda f: _with_header(f, extra=1), "header keys"),
        (lambda f: _with_header(f, kind=""), "kind"),
        (lambda f: _with_header(f, meta=[1]), "meta must be a map"),
        (lambda f: _with_header(f, arrays={}), "arrays must be a list"),
        (lambda f: f[:-1], "declares 2 arrays but has 1"),
        (lambda f: [*f, b""], "declares 2 arrays but has 3"),
        (lambda f: _with_descriptor(f, 0, dtype="|O"), "dtype '|O' is not allowed"),
        (lambda f: _with_descriptor(f, 0, dtype=">f4"), "is not allowed"),
        (lambda f: _with_descriptor(f, 0, dtype="<c8"), "is not allowed"),
        (lambda f: _with_descriptor(f, 0, shape=[2, 4]), "needs 32 bytes, frame has 24"),
        (lambda f: _with_descriptor(f, 0, shape=[2**40, 2**40]), "frame has 24"),
        (lambda f: _with_descriptor(f, 0, shape=[2**41]), "needs ints in 0"),
        (lambda f: _with_descriptor(f, 0, shape=[-1, 6]), "needs ints in 0"),
        (lambda f: _with_descriptor(f, 0, shape=[True, 6]), "needs ints"),
        (lambda f: _with_descriptor(f, 0, shape=[1] * 33), "at most 32"),
        (lambda f: _with_descriptor(f, 0, shape="6"), "shape must be a list"),
        (lambda f: _with_descriptor(f, 1, name="x"), "appears twice"),
        (lambda f: _with_descriptor(f, 1, size=3), "descriptor 1"),
        (lambda f: [f[0], f[1][:-1], f[2]], "frame has 23"),
        (lambda f: [f[0], object(), f[2]], "not a buffer"),
        (
            lambda f: [_pack({**_header(f), "meta": msgpack.ExtType(5, b"x")}), *f[1:]],
            "extension type 5",
        ),
        (lambda f: [b"\x00" * (wire.MAX_HEADER_BYTES + 1), *f[1:]], "header is"),
    ],
)
def test_decode_names_the_problem(make, needle):
    with pytest.raises(WireError, match=needle):
        decode(make(_valid()))


def test_empty_arrays_with_huge_dims_are_rejected_without_allocating():
    frames = _with_descriptor(_valid(), 0, shape=[0] + [2**40] * 31)
    frames[1] = b""
    with pytest.raises(WireError):
        decode(frames)


def _mutations(rng: np.random.Generator, frames: list[bytes]):
    """Yield (label, frames, must_fail) variants of a valid message."""
    head = frames[0]
    for _ in range(200):
        yield (
            "random",
            [rng.bytes(int(rng.integers(0, 300))) for _ in range(rng.integers(1, 4))],
            True,
        )
    for cut in range(len(head)):
        yield "truncated header", [head[:cut], *frames[1:]], True
    for _ in range(600):
        flipped = bytearray(head)
        for pos in rng.integers(0, len(head), size=rng.integers(1, 4)):
            flipped[pos] ^= int(rng.integers(1, 256))
        # a flip inside a meta string may still be a valid message: only "no other exception"
        yield "flipped header", [bytes(flipped), *frames[1:]], False
    for _ in range(100):
        body = [f[: int(rng.integers(0, len(f)))] if len(f) else b"x" for f in frames[1:]]
        yield "truncated arrays", [head, *body], True
        yield "extra frames", [*frames, *[b"\x00" * 4] * int(rng.integers(1, 5))], True
        yield "missing frames", frames[: int(rng.integers(1, len(frames)))], True
    for dims in ([2**40] * 2, [2**39, 2**39, 2**39], [0, 2**40] * 16, [2**40]):
        header = _header(frames)
        header["arrays"][0]["shape"] = dims
        yield "huge shape", [_pack(header), *frames[1:]], True


def _fuzz(out) -> None:
    """The fuzz loop, run in a process of its own: tracemalloc counts the allocations of every
    thread, and threads that earlier tests leave in the test process allocate on their own."""
    rng = np.random.default_rng(2024)
    problems = []
    tracemalloc.start()
    try:
        counts = {"rejected": 0, "accepted": 0}
        for label, frames, must_fail in _mutations(rng, _valid()):
            try:
                msg = decode(frames)
            except WireError as exc:
                if not str(exc):
                    problems.append(f"{label}: WireError without a message")
                counts["rejected"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - what the test is about
                problems.append(f"{label}: {type(exc).__name__}: {exc}")
                continue
            if must_fail:
                problems.append(f"{label} decoded: {msg}")
            counts["accepted"] += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out.send((counts, peak, problems))


def test_fuzzed_messages_raise_only_wire_error_with_bounded_memory():
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_fuzz, args=(send,))
    process.start()
    assert receive.poll(300), "the fuzz process sent nothing"
    counts, peak, problems = receive.recv()
    process.join(30)
    assert problems == []
    assert counts["rejected"] > 1000
    assert peak < 4 << 20, f"decoding garbage peaked at {peak} bytes"
