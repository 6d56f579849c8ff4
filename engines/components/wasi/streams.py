"""`wasi:io`: pollables, errors and streams (stdio and files).

Output to stdout/stderr goes to the session's capture, one write per call as with
wasmtime's custom outputs (whose write budget, 8 KiB, is kept: it shapes how many
writes a guest makes, which the spec's output limits count).
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from typing import TypeVar

from engines.components.wasi.abi import Call, GuestTrap, implements, u64
from engines.components.wasi.errors import HOST_ERRORS, error_code
from engines.components.wasi.resources import Entry
from engines.vfs import File, NullDevice, VfsError

STDIO_WRITE_BUDGET = 8192
FILE_WRITE_BUDGET = 1 << 20
READ_LIMIT = 1 << 20
"""Bytes one stream read returns at most."""
STREAM_CLOSED = 1
"""`stream-error::closed` (case 0 is `last-operation-failed(error)`)."""

_Value = TypeVar("_Value")


def _pollable(call: Call) -> int:
    return call.host.add({"type": "pollable", "deadline": None})


@implements("wasi:io/poll#[method]pollable.ready", params="i", results="i")
def pollable_ready(call: Call, handle: int) -> int:
    deadline = call.host.table.get(handle, "pollable")["deadline"]
    return int(deadline is None or deadline <= call.host.monotonic())


@implements("wasi:io/poll#[method]pollable.block", params="i")
def pollable_block(call: Call, handle: int) -> None:
    call.host.wait([call.host.table.get(handle, "pollable")["deadline"]])


@implements("wasi:io/poll#poll", params="iii")
def poll(call: Call, ptr: int, length: int, ret: int) -> None:
    if length == 0:
        raise GuestTrap("poll of an empty list")
    handles = struct.unpack(f"<{length}I", call.memory.read(ptr, 4 * length))
    ready = call.host.wait([call.host.table.get(h, "pollable")["deadline"] for h in handles])
    base = call.alloc(4 * len(ready), 4)
    call.memory.write(base, struct.pack(f"<{len(ready)}I", *ready))
    call.memory.pack("II", ret, base, len(ready))


@implements("wasi:io/error#[method]error.to-debug-string", params="ii")
def error_to_debug_string(call: Call, handle: int, ret: int) -> None:
    message = call.host.table.get(handle, "error")["message"]
    call.memory.pack("II", ret, *call.string_out(message))


@implements("wasi:filesystem/types#filesystem-error-code", params="ii")
def filesystem_error_code(call: Call, handle: int, ret: int) -> None:
    code = call.host.table.get(handle, "error")["code"]
    if code is None:
        call.memory.pack("B", ret, 0)
    else:
        call.memory.pack("BB", ret, 1, code)


def _failed(call: Call, error: BaseException) -> int:
    """An `error` resource for a failed stream operation."""
    code = error_code(error)
    if isinstance(error, VfsError):
        message = os.strerror(getattr(errno, error.errno, 0) or errno.EIO)
    elif isinstance(error, OSError) and error.errno:
        message = os.strerror(error.errno)
    else:
        message = code.name
    return call.host.add({"type": "error", "message": message, "code": int(code)})


def _stream_result(
    call: Call,
    ret: int,
    align: int,
    action: Callable[[], _Value | None],
    write_ok: Callable[[_Value], None],
) -> None:
    """result<T, stream-error> with T `align`-aligned: a host error from `action` is
    written as last-operation-failed, None as closed, anything else by `write_ok`."""
    try:
        value = action()
    except HOST_ERRORS as error:
        call.memory.pack(f"B{align - 1}xB3xI", ret, 1, 0, _failed(call, error))
        return
    if value is None:
        call.memory.pack(f"B{align - 1}xB", ret, 1, STREAM_CLOSED)
    else:
        write_ok(value)


# -- input streams ----------------------------------------------------------------------


def _read(call: Call, handle: int, length: int) -> bytes | None:
    """Up to `length` bytes from the stream (None: the stream is closed)."""
    stream = call.host.table.get(handle, "input-stream")
    if stream["source"] != "file":
        return None  # stdin is empty
    wanted = min(u64(length), READ_LIMIT)
    data = call.host.fs(stream).read(call.host.node_of(handle, stream), stream["offset"], wanted)
    if not data and wanted:
        return None
    stream["offset"] += len(data)
    return data


@implements(
    "wasi:io/streams#[method]input-stream.read",
    "wasi:io/streams#[method]input-stream.blocking-read",
    params="iIi",
)
def input_read(call: Call, handle: int, length: int, ret: int) -> None:
    def write_ok(data: bytes) -> None:
        call.memory.pack("B3xII", ret, 0, *call.bytes_out(data))

    _stream_result(call, ret, 4, lambda: _read(call, handle, length), write_ok)


@implements(
    "wasi:io/streams#[method]input-stream.skip",
    "wasi:io/streams#[method]input-stream.blocking-skip",
    params="iIi",
)
def input_skip(call: Call, handle: int, length: int, ret: int) -> None:
    stream = call.host.table.get(handle, "input-stream")
    wanted = u64(length)

    def skip() -> int | None:
        if stream["source"] != "file":
            skipped = 0
        else:
            node = call.host.node_of(handle, stream)
            size = len(node.data) if isinstance(node, File) else 0
            skipped = min(wanted, max(size - stream["offset"], 0))
            stream["offset"] += skipped
        return None if not skipped and wanted else skipped

    _stream_result(call, ret, 8, skip, lambda skipped: call.memory.pack("B7xQ", ret, 0, skipped))


@implements(
    "wasi:io/streams#[method]input-stream.subscribe",
    "wasi:io/streams#[method]output-stream.subscribe",
    params="i",
    results="i",
)
def stream_subscribe(call: Call, handle: int) -> int:
    if call.host.table.kind_of(handle) not in ("input-stream", "output-stream"):
        raise GuestTrap(f"handle {handle} is not a live stream")
    return _pollable(call)


# -- output streams ---------------------------------------------------------------------


def _write(call: Call, handle: int, data: bytes) -> None:
    stream = call.host.table.get(handle, "output-stream")
    sink = stream["sink"]
    if sink == "stdout":
        call.host.stdout(data)
    elif sink == "stderr":
        call.host.stderr(data)
    else:
        node = call.host.node_of(handle, stream)
        if not isinstance(node, File | NullDevice):
            raise VfsError("EBADF")
        offset = len(node.data) if stream["append"] and isinstance(node, File) else stream["offset"]
        written = call.host.fs(stream).write(node, offset, data)
        if not stream["append"]:
            stream["offset"] += written


def _write_result(call: Call, handle: int, data: bytes, ret: int) -> None:
    try:
        _write(call, handle, data)
    except HOST_ERRORS as error:
        call.memory.pack("B3xB3xI", ret, 1, 0, _failed(call, error))
        return
    call.memory.pack("B", ret, 0)


@implements("wasi:io/streams#[method]output-stream.check-write", params="ii")
def check_write(call: Call, handle: int, ret: int) -> None:
    stream = call.host.table.get(handle, "output-stream")
    call.memory.pack("B7xQ", ret, 0, _write_permit(call, stream))


def _write_permit(call: Call, stream: Entry) -> int:
    """What one write to the stream may hold. A file's: one byte more than a file may
    hold, so that a guest's write() is written whole or refused (EFBIG), never cut short
    (a 2 MiB `os.write` wrote 1 MiB and said so)."""
    if stream["sink"] == "file":
        return int(call.host.fs(stream).limits.file_bytes) + 1
    return STDIO_WRITE_BUDGET


@implements(
    "wasi:io/streams#[method]output-stream.write",
    "wasi:io/streams#[method]output-stream.blocking-write-and-flush",
    params="iiii",
)
def output_write(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    _write_result(call, handle, call.memory.read(ptr, length), ret)


@implements(
    "wasi:io/streams#[method]output-stream.write-zeroes",
    "wasi:io/streams#[method]output-stream.blocking-write-zeroes-and-flush",
    params="iIi",
)
def output_write_zeroes(call: Call, handle: int, length: int, ret: int) -> None:
    count = u64(length)
    if count > _write_permit(call, call.host.table.get(handle, "output-stream")):
        raise GuestTrap("write-zeroes beyond the stream's write permit")
    _write_result(call, handle, bytes(count), ret)


@implements(
    "wasi:io/streams#[method]output-stream.flush",
    "wasi:io/streams#[method]output-stream.blocking-flush",
    params="ii",
)
def output_flush(call: Call, handle: int, ret: int) -> None:
    call.host.table.get(handle, "output-stream")
    call.memory.pack("B", ret, 0)


@implements(
    "wasi:io/streams#[method]output-stream.splice",
    "wasi:io/streams#[method]output-stream.blocking-splice",
    params="iiIi",
)
def output_splice(call: Call, handle: int, source: int, length: int, ret: int) -> None:
    call.host.table.get(handle, "output-stream")

    def splice() -> int | None:
        data = _read(call, source, min(u64(length), FILE_WRITE_BUDGET))
        if data is None:
            return None
        _write(call, handle, data)
        return len(data)

    _stream_result(call, ret, 8, splice, lambda spliced: call.memory.pack("B7xQ", ret, 0, spliced))
