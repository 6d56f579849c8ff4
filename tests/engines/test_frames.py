"""Frames between the host and an engine process: blobs by the thousand, read where the
caller places them, and a restore point read straight into the memory of its snapshot."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import date
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.process import codec
from engines.process.frames import (
    FrameError,
    FrameReader,
    FrameTimeout,
    decode_header,
    encode_frame,
    encode_header,
    write_frame,
)
from engines.snapshot import (
    BLOCK_BYTES,
    PAGE_BYTES,
    BlockMemory,
    SnapshotDelta,
    reserve_memory_file,
)


@pytest.fixture
def channel() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


def _block(index: int) -> bytes:
    return index.to_bytes(4, "big") * (BLOCK_BYTES // 4)


def _send(write_fd: int, header: dict[str, Any], blobs: Sequence[bytes | memoryview]) -> None:
    """Write a frame from another thread: it is larger than the pipe holds."""
    writer = threading.Thread(target=write_frame, args=(write_fd, header, blobs))
    writer.start()
    _writers.append(writer)


_writers: list[threading.Thread] = []


@pytest.fixture(autouse=True)
def _join_writers() -> Iterator[None]:
    yield
    while _writers:
        _writers.pop().join(timeout=10)


def test_thousands_of_blobs_cross_a_pipe_far_smaller_than_the_frame(
    channel: tuple[int, int],
) -> None:
    """More pieces than one `writev` takes (1,024), through a 64 KiB pipe: every byte
    arrives in order, each blob whole."""
    read_fd, write_fd = channel
    blobs = [_block(index) for index in range(3000)]
    _send(write_fd, {"op": "many"}, blobs)
    header, received = FrameReader(read_fd).read(deadline=None)
    assert header["op"] == "many"
    assert [bytes(blob) for blob in received] == blobs


def test_blobs_are_read_where_the_placement_puts_them(channel: tuple[int, int]) -> None:
    read_fd, write_fd = channel
    memory = bytearray(64 * BLOCK_BYTES)
    whole = memoryview(memory)
    slots = [7, 3, 40, 41]
    placed_for: list[dict[str, Any]] = []

    def place(header: dict[str, Any], sizes: list[int]) -> list[memoryview]:
        placed_for.append(header)
        return [whole[slot * BLOCK_BYTES : (slot + 1) * BLOCK_BYTES] for slot in slots]

    blobs = [_block(slot) for slot in slots]
    _send(write_fd, {"op": "placed"}, blobs)
    header, received = FrameReader(read_fd, place=place).read(deadline=None)
    assert placed_for == [header]
    assert all(blob.obj is memory for blob in received)
    for slot in slots:
        assert memory[slot * BLOCK_BYTES : (slot + 1) * BLOCK_BYTES] == _block(slot)
    assert memory[0:BLOCK_BYTES] == bytes(BLOCK_BYTES)  # nothing went anywhere else


def test_a_placement_that_does_not_fit_the_blobs_is_not_used(channel: tuple[int, int]) -> None:
    read_fd, write_fd = channel
    memory = bytearray(BLOCK_BYTES)

    def place(header: dict[str, Any], sizes: list[int]) -> list[memoryview]:
        return [memoryview(memory)]  # one view for two blobs

    _send(write_fd, {}, [b"first", b"second"])
    _, received = FrameReader(read_fd, place=place).read(deadline=None)
    assert [bytes(blob) for blob in received] == [b"first", b"second"]
    assert memory == bytes(BLOCK_BYTES)


def test_a_placed_frame_cut_by_its_deadline_goes_on_where_it_stopped(
    channel: tuple[int, int],
) -> None:
    """The header and part of the blobs arrive, the deadline passes, and the next read
    continues the same frame into the same memory (placed once)."""
    read_fd, write_fd = channel
    memory = bytearray(8 * BLOCK_BYTES)
    calls: list[int] = []

    def place(header: dict[str, Any], sizes: list[int]) -> list[memoryview]:
        calls.append(len(sizes))
        return [
            memoryview(memory)[index * BLOCK_BYTES :][:size] for index, size in enumerate(sizes)
        ]

    blobs = [_block(index) for index in range(8)]
    pieces = b"".join(bytes(piece) for piece in encode_frame({"op": "cut"}, blobs))
    half = len(pieces) // 2 + 123  # inside a blob
    os.write(write_fd, pieces[:half])
    reader = FrameReader(read_fd, place=place)
    with pytest.raises(FrameTimeout):
        reader.read(deadline=time.monotonic() + 0.2)
    os.write(write_fd, pieces[half:])
    header, received = reader.read(deadline=None)
    assert header["op"] == "cut" and calls == [8]
    assert memory == b"".join(blobs)
    assert all(blob.obj is memory for blob in received)


def _restore_point() -> SnapshotDelta:
    indices = [0, 1, 2, 9, 30, 31]
    blocks = {index: memoryview(_block(index)) for index in indices}
    return SnapshotDelta(32 * BLOCK_BYTES, blocks, {"__g0": 5}, {"host": None}, from_image=True)


def test_a_restore_point_is_read_into_its_snapshots_memory_and_not_copied(
    channel: tuple[int, int],
) -> None:
    """Issue 23: the blocks of a restore point go from the pipe straight into the memory
    the snapshot keeps (a window of the process's memory file where there is one), which
    then holds each block at its place and reads as zero elsewhere."""
    read_fd, write_fd = channel
    restore_point = _restore_point()
    header, blobs = codec.restore_to_json(restore_point)
    assert all(blob.nbytes == BLOCK_BYTES for blob in blobs)  # a blob per block, not joined
    _send(write_fd, {"op": "restore", **header}, blobs)
    received_header, received = FrameReader(read_fd, place=codec.place_restore).read(None)
    snapshot = codec.restore_from_json(received_header, received)
    assert snapshot.memory is received[0].obj
    if reserve_memory_file():
        assert isinstance(snapshot.memory, BlockMemory)
    assert snapshot.sparse and snapshot.globals == {"__g0": 5}
    assert snapshot.extra == {"host": None}
    assert snapshot.written is not None
    assert [index for index, flag in enumerate(snapshot.written) if flag] == sorted(
        restore_point.blocks
    )
    for index in range(32):
        expected = _block(index) if index in restore_point.blocks else bytes(BLOCK_BYTES)
        assert snapshot.memory[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES] == expected


def test_a_restore_point_read_into_the_readers_buffer_is_copied_into_a_snapshot() -> None:
    """Without the placement (a reader that has none), the same snapshot, as a copy."""
    restore_point = _restore_point()
    header, blobs = codec.restore_to_json(restore_point)
    received = [memoryview(bytearray(blob)) for blob in blobs]
    snapshot = codec.restore_from_json(header, received)
    assert snapshot.memory is not received[0].obj
    for index, block in restore_point.blocks.items():
        assert snapshot.memory[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES] == bytes(block)


@pytest.mark.parametrize(
    ("runs", "blob_count"),
    [
        ([[30, 3]], 3),  # past the end of memory
        ([[-1, 1]], 1),
        ([[0, 2]], 3),  # more blobs than blocks
        ([[0, 2], [1, 1]], 3),  # a block twice
        ([[0, 0]], 0),
        ("nonsense", 0),
        ([[True, True]], 1),  # JSON's true is not a number here
        ([[1.0, 1]], 1),
        ([["1", "1"]], 1),
        ([[0, 10**12]], 1),  # refused before any block is counted out
    ],
)
def test_a_malformed_restore_point_is_not_placed_and_is_refused(runs: Any, blob_count: int) -> None:
    header = {"op": "restore", "length": 32 * BLOCK_BYTES, "runs": runs}
    header.update(globals={}, extra={})
    sizes = [BLOCK_BYTES] * blob_count
    assert codec.place_restore(header, sizes) is None
    with pytest.raises(ValueError, match="malformed restore point"):
        codec.restore_from_json(header, [memoryview(bytes(size)) for size in sizes])


@pytest.mark.parametrize("length", [20487, 0, -PAGE_BYTES, 2 << 32, float("inf"), "65536", True])
def test_a_restore_point_of_a_memory_no_guest_has_is_refused(length: Any) -> None:
    """A length that is not a whole number of 64 KiB pages of a 32-bit memory (JSON's
    1e400 reads as infinity) is refused, and placing it never raises."""
    header = {"op": "restore", "length": length, "runs": [[0, 1]], "globals": {}, "extra": {}}
    assert codec.place_restore(header, [BLOCK_BYTES]) is None
    with pytest.raises(ValueError, match="malformed restore point"):
        codec.restore_from_json(header, [memoryview(bytes(BLOCK_BYTES))])


def test_a_placement_that_fails_leaves_the_frame_whole(channel: tuple[int, int]) -> None:
    """A placement that raises, or gives views that are not plain writable bytes of each
    blob's size, is not used: the blobs go to the reader's buffer and the next frame
    reads as it should."""
    read_fd, write_fd = channel
    words = memoryview(bytearray(16)).cast("I")  # 4 items, 16 bytes

    def failing(header: dict[str, Any], sizes: list[int]) -> list[memoryview]:
        raise OverflowError("cannot convert float infinity to integer")

    placements = [
        failing,
        lambda header, sizes: [words],
        lambda header, sizes: [memoryview(bytes(4))],  # read-only
    ]
    for place in placements:
        write_frame(write_fd, {"op": "first"}, [b"ABCD"])
        write_frame(write_fd, {"op": "second"}, [b"EFGH"])
        reader = FrameReader(read_fd, place=place)
        header, blobs = reader.read(None)
        assert header["op"] == "first" and [bytes(blob) for blob in blobs] == [b"ABCD"]
        header, blobs = reader.read(None)
        assert header["op"] == "second" and [bytes(blob) for blob in blobs] == [b"EFGH"]
    assert bytes(words) == bytes(16)


def test_only_a_restore_request_is_placed() -> None:
    header, blobs = codec.restore_to_json(_restore_point())
    sizes = [blob.nbytes for blob in blobs]
    assert codec.place_restore({"op": "execute", **header}, sizes) is None
    assert codec.place_restore({"op": "restore", **header}, sizes) is not None


@pytest.mark.parametrize(
    "header",
    [
        {"op": "execute", "code": "'\ud800'", "env": {"K": "\udcff"}},  # lone surrogates
        {"op": "execute", "seq": 1, "fuel": 2**70 + 1, "low": -(2**63) - 1},  # past 64 bits
        {"low": -(2**63) - 1},  # 19 digits that fit no 64-bit integer: orjson, a float
        {"globals": {"f": math.nan, "g": math.inf, "h": -math.inf}},  # orjson: null
        {"ok": True, "nested": [{"text": "é ✓ \x00"}], "n": -(2**63), "none": None},
    ],
    ids=["surrogates", "big-int", "19-digits", "non-finite", "ordinary"],
)
def test_a_header_orjson_refuses_still_crosses_whole(
    channel: tuple[int, int], header: dict[str, Any]
) -> None:
    """Headers are written and read with orjson, which refuses a lone surrogate (code
    and env come from the API's JSON, which allows its escape) and an integer past 64
    bits; those still cross as they did with the standard library."""
    read_fd, write_fd = channel
    write_frame(write_fd, header)
    write_frame(write_fd, {"op": "next"})  # the frame after it is read as itself
    reader = FrameReader(read_fd)
    read, blobs = reader.read(time.monotonic() + 5)
    assert (repr(read), blobs) == (repr(header), [])  # repr: NaN is not equal to itself
    assert reader.read(time.monotonic() + 5) == ({"op": "next"}, [])


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()  # NaN and the infinities too, as the standard library writes them
    | st.text(),  # lone surrogates too
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(header=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5))
def test_headers_read_back_exactly_as_the_standard_library_reads_them(
    header: dict[str, Any],
) -> None:
    """Whatever a header holds, what crosses is what `json` wrote and read before orjson."""
    expected = json.loads(json.dumps(header, separators=(",", ":")))
    assert repr(decode_header(encode_header(header))) == repr(expected)
    # and the standard library's own text reads back the same through `decode_header`
    assert repr(decode_header(json.dumps(header).encode())) == repr(expected)


@pytest.mark.parametrize(
    "text", [b"{nope", b"[" * 100_000 + b"]" * 100_000], ids=["garbage", "nested-too-deep"]
)
def test_a_header_that_is_not_json_is_refused(channel: tuple[int, int], text: bytes) -> None:
    """A process that runs untrusted code may send anything: what is not a JSON header
    is a `FrameError` (the process is then taken for dead), never another exception."""
    read_fd, write_fd = channel
    writer = threading.Thread(target=os.write, args=(write_fd, len(text).to_bytes(4, "big") + text))
    writer.start()
    try:
        with pytest.raises(FrameError, match="not JSON"):
            FrameReader(read_fd).read(time.monotonic() + 5)
    finally:
        writer.join()


class Shade(Enum):
    LIGHT = 1


@pytest.mark.parametrize(
    "value",
    [date(2026, 12, 7), Path("/workspace"), Shade.LIGHT, UUID(int=7)],
    ids=["date", "path", "enum", "uuid"],
)
def test_a_value_is_written_alike_whether_or_not_the_header_holds_a_null(value: object) -> None:
    """orjson writes some values `json` refuses, and a header with a null goes through
    `json`: a date or a path is refused either way; an Enum member or a UUID is written
    by its value either way (never one or the other by what else the header holds)."""
    for header in ({"value": value}, {"value": value, "none": None}):
        if isinstance(value, Shade | UUID):
            written = value.value if isinstance(value, Shade) else str(value)
            assert decode_header(encode_header(header))["value"] == written
        else:
            with pytest.raises(TypeError):
                encode_header(header)
