"""Frames between the host and an engine process: a JSON header plus raw byte blobs.

Wire format: a 4-byte big-endian header length, the UTF-8 JSON header (an object whose
optional `blobs` lists the byte length of each blob), then the blobs back to back. JSON
keeps the format inspectable and safe to parse from a process that runs untrusted code
(no pickle); blobs carry memory snapshots without base64.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Sequence
from typing import Any

MAX_HEADER_BYTES = 64 << 20
MAX_BLOB_BYTES = 1 << 32
_LENGTH_BYTES = 4


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
    encoded = json.dumps(header, separators=(",", ":")).encode()
    return [len(encoded).to_bytes(_LENGTH_BYTES, "big") + encoded, *blobs]


def write_frame(
    fd: int, header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] = ()
) -> None:
    """Write one whole frame to `fd` (blocking)."""
    for piece in encode_frame(header, blobs):
        view = memoryview(piece).cast("B")
        while view:
            written = os.write(fd, view)
            view = view[written:]


class FrameReader:
    """Reads frames from a file descriptor, optionally with a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def _fill(self, wanted: int, deadline: float | None) -> None:
        while len(self._buffer) < wanted:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FrameTimeout()
                ready, _, _ = select.select([self.fd], [], [], remaining)
                if not ready:
                    raise FrameTimeout()
            chunk = os.read(self.fd, max(wanted - len(self._buffer), 1 << 16))
            if not chunk:
                raise EOFError("the peer closed the channel")
            self._buffer += chunk

    def _take(self, size: int) -> bytes:
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def read(self, deadline: float | None = None) -> tuple[dict[str, Any], list[bytes]]:
        """The next frame's header and blobs.

        Raises `FrameTimeout` at the deadline (the partial frame stays buffered, so a
        later call continues it), `EOFError` when the peer closed, `FrameError` on
        garbage.
        """
        self._fill(_LENGTH_BYTES, deadline)
        length = int.from_bytes(self._buffer[:_LENGTH_BYTES], "big")
        if length > MAX_HEADER_BYTES:
            raise FrameError(f"frame header of {length} bytes")
        self._fill(_LENGTH_BYTES + length, deadline)
        try:
            header = json.loads(bytes(self._buffer[_LENGTH_BYTES : _LENGTH_BYTES + length]))
        except ValueError as error:
            raise FrameError(f"frame header is not JSON: {error}") from None
        if not isinstance(header, dict):
            raise FrameError("frame header is not an object")
        sizes = header.get("blobs", [])
        if not isinstance(sizes, list) or not all(
            isinstance(size, int) and 0 <= size <= MAX_BLOB_BYTES for size in sizes
        ):
            raise FrameError("bad blob sizes")
        self._fill(_LENGTH_BYTES + length + sum(sizes), deadline)
        del self._buffer[: _LENGTH_BYTES + length]
        return header, [self._take(size) for size in sizes]
