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
from dataclasses import dataclass
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


@dataclass
class _Payload:
    """The blobs of the frame being read: filled in place, kept across a timeout."""

    header: dict[str, Any]
    sizes: list[int]
    data: bytearray
    filled: int = 0


class FrameReader:
    """Reads frames from a file descriptor, optionally with a deadline.

    Blobs are read straight into one buffer per frame (no growing buffer, one copy out of
    the kernel), which matters for snapshots of tens of MiB."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
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

    def _header(self, deadline: float | None) -> _Payload:
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
        del self._buffer[: _LENGTH_BYTES + length]
        payload = _Payload(header, sizes, bytearray(sum(sizes)))
        buffered = min(len(self._buffer), len(payload.data))  # read along with the header
        payload.data[:buffered] = self._buffer[:buffered]
        del self._buffer[:buffered]
        payload.filled = buffered
        return payload

    def read(self, deadline: float | None = None) -> tuple[dict[str, Any], list[memoryview]]:
        """The next frame's header and blobs (views of one buffer).

        Raises `FrameTimeout` at the deadline (the partial frame stays buffered, so a
        later call continues it), `EOFError` when the peer closed, `FrameError` on
        garbage.
        """
        if self._payload is None:
            self._payload = self._header(deadline)
        payload = self._payload
        with memoryview(payload.data) as view:
            while payload.filled < len(payload.data):
                self._wait(deadline)
                count = os.readv(self.fd, [view[payload.filled :]])
                if not count:
                    raise EOFError("the peer closed the channel")
                payload.filled += count
        self._payload = None
        blobs = []
        offset = 0
        whole = memoryview(payload.data)
        for size in payload.sizes:
            blobs.append(whole[offset : offset + size])
            offset += size
        return payload.header, blobs
