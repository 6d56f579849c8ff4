"""Frames between the host and an engine process: a JSON header plus raw byte blobs.

Wire format: a 4-byte big-endian header length, the UTF-8 JSON header (an object whose
optional `blobs` lists the byte length of each blob), then the blobs back to back. JSON
keeps the format inspectable and safe to parse from a process that runs untrusted code
(no pickle); blobs carry memory snapshots without base64.

Headers go through orjson: at a REPL's pace, with the caches gone cold between runs, the
standard library's `json` took about 80 µs per header each way (four per execution,
most of what the engine process added to a call); orjson takes 25-40 µs.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any
from uuid import UUID

import orjson

MAX_HEADER_BYTES = 64 << 20
MAX_BLOB_BYTES = 1 << 32
_LENGTH_BYTES = 4
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_ONLY_JSON_TYPES = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
_IOV_MAX = 1024
"""Pieces per `writev` call (Linux's IOV_MAX)."""
_PIECES_PER_READ = 256
"""Placed blobs per `readv` call: a widened pipe holds 1 MiB, 256 blocks of 4 KiB (each
call builds its list of views, so more would only cost)."""

Placement = Callable[[dict[str, Any], list[int]], list[memoryview] | None]
"""Where a frame's blobs are read to: given its header and blob sizes, one writable view
of the caller's memory per blob, of its size; None for a buffer of the reader's."""


class FrameError(Exception):
    """The peer sent something that is not a frame (or closed mid-frame)."""


class FrameTimeout(Exception):
    """No complete frame arrived before the deadline."""


def encode_frame(
    header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] = ()
) -> list[bytes | bytearray | memoryview]:
    """The pieces of one frame, ready to be written in order."""
    if blobs:
        header = {**header, "blobs": [len(blob) for blob in blobs]}
    encoded = encode_header(header)
    return [len(encoded).to_bytes(_LENGTH_BYTES, "big") + encoded, *blobs]


def encode_header(header: dict[str, Any]) -> bytes:
    """`header` as compact JSON, exactly as the standard library would write it. orjson
    refuses a lone surrogate and an integer past 64 bits, and writes a NaN or infinity
    as null: any `null` in its output (rare in headers) and every refusal go through the
    standard library instead. Told to, orjson also refuses subclasses, dataclasses and
    dates, as `json` does; it writes an Enum member or a UUID by its value, and so does
    the standard library's pass here (whether or not the header holds a null)."""
    try:
        encoded = orjson.dumps(header, option=_ONLY_JSON_TYPES)
        if b"null" not in encoded:
            return encoded
    except TypeError:
        pass
    return json.dumps(header, separators=(",", ":"), default=_as_orjson_writes).encode()


def _as_orjson_writes(value: object) -> object:
    """What orjson writes for the types it takes and `json` does not (see `encode_header`)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def decode_header(data: bytes) -> Any:
    """The JSON value `data` holds (ValueError if none), exactly as the standard library
    reads it. orjson refuses a lone surrogate's escape and NaN, and reads an integer past
    64 bits as a float: what it refuses, and anything with a run of 19 digits (the
    shortest integer that may not fit), goes through the standard library instead."""
    if _LONG_DIGITS.search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def write_frame(
    fd: int,
    header: dict[str, Any],
    blobs: Sequence[bytes | bytearray | memoryview] = (),
    deadline: float | None = None,
) -> None:
    """Write one whole frame to `fd`, its pieces gathered a thousand to a call (a restore
    point is thousands of 4 KiB blocks, sent without joining them). On a non-blocking
    `fd`, `FrameTimeout` if the reader has not taken it all by `deadline` (None: wait)."""
    pieces = [memoryview(piece).cast("B") for piece in encode_frame(header, blobs)]
    first = 0
    while first < len(pieces):
        try:
            written = os.writev(fd, pieces[first : first + _IOV_MAX])
        except BlockingIOError:
            _wait_writable(fd, deadline)
            continue
        while first < len(pieces) and written >= len(pieces[first]):
            written -= len(pieces[first])
            first += 1
        if written:
            pieces[first] = pieces[first][written:]


def _wait_writable(fd: int, deadline: float | None) -> None:
    """Wait until the pipe `fd` takes more (or its reader is gone: the next write says
    so); `FrameTimeout` at `deadline`."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise FrameTimeout("the reader took nothing more before the deadline")
        if poller.poll(None if left is None else max(1, int(left * 1000))):
            return


@dataclass
class _Payload:
    """The blobs of the frame being read: filled in place, kept across a timeout."""

    header: dict[str, Any]
    blobs: list[memoryview]
    buffer: memoryview | None
    """The reader's own buffer that holds the blobs back to back (None: they are placed)."""
    next: int = 0
    """The first blob not yet full."""
    filled: int = 0
    """Bytes of that blob read so far."""
    received: int = 0
    """Bytes of all blobs read so far."""

    def receive(self, data: memoryview) -> int:
        """Copy what fits of `data` into the blobs; how many bytes that took."""
        taken = 0
        while taken < len(data) and self.next < len(self.blobs):
            blob = self.blobs[self.next]
            count = min(len(blob) - self.filled, len(data) - taken)
            blob[self.filled : self.filled + count] = data[taken : taken + count]
            taken += count
            self.advance(count)
        return taken

    def advance(self, count: int) -> None:
        """Count `count` more bytes as read into the blobs, from the first not full (and
        skip blobs of no bytes)."""
        self.received += count
        self.filled += count
        while self.next < len(self.blobs) and self.filled >= len(self.blobs[self.next]):
            self.filled -= len(self.blobs[self.next])
            self.next += 1

    def empty_space(self) -> list[memoryview]:
        """Where the next bytes go: the rest of the reader's buffer, or the rest of the
        first placed blob not full and those after it, as many as a pipe's capacity fills."""
        if self.buffer is not None:
            return [self.buffer[self.received :]]
        rest = self.blobs[self.next : self.next + _PIECES_PER_READ]
        return [rest[0][self.filled :], *rest[1:]]


class FrameReader:
    """Reads frames from a file descriptor, optionally with a deadline.

    Blobs are read straight into one buffer per frame (no growing buffer, one copy out of
    the kernel), which matters for snapshots of tens of MiB; or, where `place` says so,
    straight into the caller's memory (a restore point into the snapshot's own)."""

    def __init__(self, fd: int, place: Placement | None = None) -> None:
        self.fd = fd
        self._place = place
        self._buffer = bytearray()
        self._payload: _Payload | None = None

    def _wait(self, deadline: float | None) -> None:
        if deadline is None:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FrameTimeout()
        ready, _, _ = select.select([self.fd], [], [], remaining)
        if not ready:
            raise FrameTimeout()

    def _fill(self, wanted: int, deadline: float | None) -> None:
        while len(self._buffer) < wanted:
            self._wait(deadline)
            chunk = os.read(self.fd, max(wanted - len(self._buffer), 1 << 16))
            if not chunk:
                raise EOFError("the peer closed the channel")
            self._buffer += chunk

    def _placement(self, header: dict[str, Any], sizes: list[int]) -> list[memoryview] | None:
        """The caller's views for the blobs, if it gives some that fit them exactly
        (writable bytes, one per blob, of its size); anything else, a failure of the
        placement included, leaves the blobs to the reader's buffer and the frame whole."""
        if self._place is None:
            return None
        try:
            placed = self._place(header, sizes)
        except Exception:  # a placement's failure must not cost the frame
            return None
        if placed is None or len(placed) != len(sizes):
            return None
        for view, size in zip(placed, sizes, strict=True):
            if view.nbytes != size or view.format != "B" or view.readonly:
                return None
            if not view.c_contiguous:
                return None
        return placed

    def _header(self, deadline: float | None) -> _Payload:
        self._fill(_LENGTH_BYTES, deadline)
        length = int.from_bytes(self._buffer[:_LENGTH_BYTES], "big")
        if length > MAX_HEADER_BYTES:
            raise FrameError(f"frame header of {length} bytes")
        self._fill(_LENGTH_BYTES + length, deadline)
        try:
            header = decode_header(bytes(self._buffer[_LENGTH_BYTES : _LENGTH_BYTES + length]))
        except (ValueError, RecursionError) as error:  # nested past the parser's depth
            raise FrameError(f"frame header is not JSON: {error}") from None
        if not isinstance(header, dict):
            raise FrameError("frame header is not an object")
        sizes = header.get("blobs", [])
        if not isinstance(sizes, list) or not all(
            isinstance(size, int) and 0 <= size <= MAX_BLOB_BYTES for size in sizes
        ):
            raise FrameError("bad blob sizes")
        del self._buffer[: _LENGTH_BYTES + length]
        if not sizes:  # most frames: nothing to place or read after the header
            return _Payload(header, [], None)
        placed = self._placement(header, sizes)
        buffer = None
        if placed is None:
            buffer = memoryview(bytearray(sum(sizes)))
            ends = list(itertools.accumulate(sizes))
            placed = [buffer[end - size : end] for size, end in zip(sizes, ends, strict=True)]
        payload = _Payload(header, placed, buffer)
        payload.advance(0)  # past blobs of no bytes
        with memoryview(self._buffer) as buffered:  # read along with the header
            taken = payload.receive(buffered)
        del self._buffer[:taken]
        return payload

    def read(self, deadline: float | None = None) -> tuple[dict[str, Any], list[memoryview]]:
        """The next frame's header and blobs (views of one buffer, or those `place` gave).

        Raises `FrameTimeout` at the deadline (the partial frame stays buffered, so a
        later call continues it), `EOFError` when the peer closed, `FrameError` on
        garbage.
        """
        if self._payload is None:
            self._payload = self._header(deadline)
        payload = self._payload
        while payload.next < len(payload.blobs):
            self._wait(deadline)
            count = os.readv(self.fd, payload.empty_space())
            if not count:
                raise EOFError("the peer closed the channel")
            payload.advance(count)
        self._payload = None
        return payload.header, payload.blobs
