"""`wasi:filesystem`: the mounts, served from their `VirtualFS` trees.

Semantics follow wasmtime's host (cap-std) where the guest can tell: descriptors carry
the mount's permissions, `..` never leaves the mount a path starts in, absolute paths
are not permitted. Stricter where the spec asks (9.3): symlinks and hard links cannot be
created (there are none to read). The limits of `/workspace` fail the call that would
break them, with the spec's errno (`engines.vfs`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from engines.components.wasi.abi import Call, implements, u64
from engines.components.wasi.errors import HOST_ERRORS, FsError, WasiErrno, error_code
from engines.components.wasi.host import DESCRIPTOR_READ, DESCRIPTOR_WRITE, MUTATE_DIRECTORY
from engines.components.wasi.resources import Entry
from engines.vfs import Directory, File, Found, Node, NullDevice, VirtualFS, existing, file_kind

SYNC_FLAGS = 4 | 8 | 16
"""file-integrity-sync, data-integrity-sync, requested-write-sync: not supported."""
SYMLINK_FOLLOW = 1
OPEN_CREATE, OPEN_DIRECTORY, OPEN_EXCLUSIVE, OPEN_TRUNCATE = 1, 2, 4, 8
NO_CHANGE, NOW, TIMESTAMP = 0, 1, 2
READ_LIMIT = 1 << 24
"""Bytes one `descriptor.read` returns at most."""
DESCRIPTOR_TYPES = {"character-device": 2, "directory": 3, "regular-file": 6}
"""`descriptor-type` of each `vfs.file_kind`."""

_Value = TypeVar("_Value")


def _type_code(node: Node) -> int:
    return DESCRIPTOR_TYPES[file_kind(node)]


# -- result shapes ----------------------------------------------------------------------


def _result(
    call: Call,
    ret: int,
    error_format: str,
    action: Callable[[], _Value],
    write_ok: Callable[[_Value], None],
) -> None:
    """result<T, error-code>: a host error from `action` is written as err with
    `error_format` (the case, padding to T's alignment, the code); else `write_ok` writes
    ok with what `action` returned (outside the error handling: it is not the guest's error)."""
    try:
        value = action()
    except HOST_ERRORS as error:
        call.memory.pack(error_format, ret, 1, error_code(error))
        return
    write_ok(value)


def _unit(call: Call, ret: int, action: Callable[[], object]) -> None:
    """result<_, error-code>."""
    _result(call, ret, "BB", action, lambda _: call.memory.pack("B", ret, 0))


def _byte(call: Call, ret: int, action: Callable[[], int]) -> None:
    """result<u8-sized value, error-code>."""
    _result(call, ret, "BB", action, lambda value: call.memory.pack("BB", ret, 0, value))


def _handle(call: Call, ret: int, action: Callable[[], int]) -> None:
    """result<own<T>, error-code>."""
    _result(call, ret, "B3xB", action, lambda value: call.memory.pack("B3xI", ret, 0, value))


def _aligned8(call: Call, ret: int, action: Callable[[], Callable[[int], None]]) -> None:
    """result<T, error-code> with T 8-aligned: `action` returns the writer of T."""

    def write_ok(write: Callable[[int], None]) -> None:
        call.memory.pack("B", ret, 0)
        write(ret + 8)

    _result(call, ret, "B7xB", action, write_ok)


def _write_stat(call: Call, ptr: int, fs: VirtualFS, node: Node) -> None:
    """descriptor-stat: type, link count, size, then three option<datetime>."""
    size = len(node.data) if isinstance(node, File) else 0
    links = int(fs.path_of(node) is not None)
    call.memory.pack("B7xQQ", ptr, _type_code(node), links, size)
    for index, nanos in enumerate((node.atime_ns, node.mtime_ns, node.mtime_ns)):
        seconds, rest = divmod(nanos, 1_000_000_000)
        call.memory.pack("B7xQI4x", ptr + 24 + 24 * index, 1, seconds & (2**64 - 1), rest)


def _metadata_hash(node: Node) -> Callable[[Call, int], None]:
    """Two u64s identifying the node (its inode number, hashed)."""
    digest = hashlib.sha256(f"node:{node.ino}".encode()).digest()
    lower, upper = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little")
    return lambda call, ptr: call.memory.pack("QQ", ptr, lower, upper)


# -- descriptors ------------------------------------------------------------------------


def _descriptor(call: Call, handle: int) -> tuple[Entry, Node]:
    entry = call.host.table.get(handle, "descriptor")
    return entry, call.host.node_of(handle, entry)


def _file(call: Call, handle: int) -> File | NullDevice:
    _, node = _descriptor(call, handle)
    if not isinstance(node, File | NullDevice):
        raise FsError(WasiErrno.BADF)
    return node


def _directory(call: Call, handle: int) -> tuple[Entry, Directory]:
    entry, node = _descriptor(call, handle)
    if not isinstance(node, Directory):
        raise FsError(WasiErrno.NOTDIR)
    return entry, node


def _at(call: Call, handle: int, ptr: int, length: int) -> tuple[Entry, VirtualFS, Found]:
    """Resolve a path beneath directory descriptor `handle` (`VirtualFS.resolve`)."""
    path = call.memory.string(ptr, length)
    entry, directory = _directory(call, handle)
    fs = call.host.fs(entry)
    return entry, fs, fs.resolve(directory, path)


def _mutating_at(call: Call, handle: int, ptr: int, length: int) -> tuple[VirtualFS, Found]:
    _, fs, found = _at(call, handle, ptr, length)
    if not fs.writable:
        raise FsError(WasiErrno.NOTPERM)
    return fs, found


def _stream(entry: Entry, kind: str, **fields: Any) -> Entry:
    stream = {"type": kind, "preopen": entry["preopen"], "path": entry["path"], "offset": 0}
    stream.update(fields)
    return stream


@implements("wasi:filesystem/preopens#get-directories", params="i")
def get_directories(call: Call, ret: int) -> None:
    host = call.host
    listed = []
    for index, mount in enumerate(host.mounts):
        entry = {
            "type": "descriptor",
            "preopen": index,
            "path": "",
            "dir": True,
            "flags": DESCRIPTOR_READ | (MUTATE_DIRECTORY if mount.fs.writable else 0),
        }
        listed.append((host.add(entry, mount.fs.root), mount.guest_path))
    base = call.alloc(12 * len(listed), 4) if listed else 0
    for index, (handle, guest_path) in enumerate(listed):
        call.memory.pack("III", base + 12 * index, handle, *call.string_out(guest_path))
    call.memory.pack("II", ret, base, len(listed))


def _file_stream(call: Call, handle: int, ret: int, kind: str, **fields: Any) -> None:
    """result<own<stream>, error-code>: a `kind` stream on file descriptor `handle` (see
    `_stream` for `fields`)."""

    def run() -> int:
        node = _file(call, handle)
        entry = call.host.table.get(handle, "descriptor")
        call.host.check_room()
        return call.host.add(_stream(entry, kind, **fields), node)

    _handle(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.read-via-stream", params="iIi")
def read_via_stream(call: Call, handle: int, offset: int, ret: int) -> None:
    _file_stream(call, handle, ret, "input-stream", source="file", offset=u64(offset))


@implements("wasi:filesystem/types#[method]descriptor.write-via-stream", params="iIi")
def write_via_stream(call: Call, handle: int, offset: int, ret: int) -> None:
    _file_stream(call, handle, ret, "output-stream", sink="file", offset=u64(offset), append=False)


@implements("wasi:filesystem/types#[method]descriptor.append-via-stream", params="ii")
def append_via_stream(call: Call, handle: int, ret: int) -> None:
    _file_stream(call, handle, ret, "output-stream", sink="file", append=True)


@implements("wasi:filesystem/types#[method]descriptor.advise", params="iIIii")
def advise(call: Call, handle: int, offset: int, length: int, advice: int, ret: int) -> None:
    _unit(call, ret, lambda: _file(call, handle))


@implements(
    "wasi:filesystem/types#[method]descriptor.sync",
    "wasi:filesystem/types#[method]descriptor.sync-data",
    params="ii",
)
def sync(call: Call, handle: int, ret: int) -> None:
    _unit(call, ret, lambda: _descriptor(call, handle))


@implements("wasi:filesystem/types#[method]descriptor.get-flags", params="ii")
def get_flags(call: Call, handle: int, ret: int) -> None:
    _byte(call, ret, lambda: int(call.host.table.get(handle, "descriptor")["flags"]))


@implements("wasi:filesystem/types#[method]descriptor.get-type", params="ii")
def get_type(call: Call, handle: int, ret: int) -> None:
    _byte(call, ret, lambda: _type_code(_descriptor(call, handle)[1]))


@implements("wasi:filesystem/types#[method]descriptor.set-size", params="iIi")
def set_size(call: Call, handle: int, size: int, ret: int) -> None:
    def run() -> None:
        entry, node = _descriptor(call, handle)
        if not isinstance(node, File | NullDevice) or not entry["flags"] & DESCRIPTOR_WRITE:
            raise FsError(WasiErrno.BADF)
        if isinstance(node, File):
            call.host.fs(entry).truncate(node, u64(size))

    _unit(call, ret, run)


def _timestamp(current: int, tag: int, seconds: int, nanoseconds: int) -> int:
    if tag == NO_CHANGE:
        return current
    if tag == NOW:
        return time.time_ns()
    return u64(seconds) * 1_000_000_000 + nanoseconds


def _set_times(
    fs: VirtualFS, node: Node, access: tuple[int, int, int], modify: tuple[int, int, int]
) -> None:
    if not fs.writable:
        raise FsError(WasiErrno.NOTPERM)
    node.atime_ns = _timestamp(node.atime_ns, *access)
    node.mtime_ns = _timestamp(node.mtime_ns, *modify)


@implements("wasi:filesystem/types#[method]descriptor.set-times", params="iiIiiIii")
def set_times(
    call: Call,
    handle: int,
    access_tag: int,
    access_seconds: int,
    access_nanos: int,
    modify_tag: int,
    modify_seconds: int,
    modify_nanos: int,
    ret: int,
) -> None:
    def run() -> None:
        entry, node = _descriptor(call, handle)
        access = (access_tag, access_seconds, access_nanos)
        _set_times(call.host.fs(entry), node, access, (modify_tag, modify_seconds, modify_nanos))

    _unit(call, ret, run)


# Same shape as set_times: kept apart, as it sets the times of a path.
@implements("wasi:filesystem/types#[method]descriptor.set-times-at", params="iiiiiIiiIii")
def set_times_at(
    call: Call,
    handle: int,
    path_flags: int,
    ptr: int,
    length: int,
    access_tag: int,
    access_seconds: int,
    access_nanos: int,
    modify_tag: int,
    modify_seconds: int,
    modify_nanos: int,
    ret: int,
) -> None:
    def run() -> None:
        _, fs, found = _at(call, handle, ptr, length)
        access = (access_tag, access_seconds, access_nanos)
        _set_times(fs, existing(found), access, (modify_tag, modify_seconds, modify_nanos))

    _unit(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.read", params="iIIi")
def read(call: Call, handle: int, length: int, offset: int, ret: int) -> None:
    def run() -> bytes:
        entry, node = _descriptor(call, handle)
        if isinstance(node, Directory) or not entry["flags"] & DESCRIPTOR_READ:
            raise FsError(WasiErrno.BADF)
        return call.host.fs(entry).read(node, u64(offset), min(u64(length), READ_LIMIT))

    def write_ok(data: bytes) -> None:
        ptr, size = call.bytes_out(data)
        call.memory.pack("B3xIIB", ret, 0, ptr, size, int(not data))

    _result(call, ret, "B3xB", run, write_ok)


@implements("wasi:filesystem/types#[method]descriptor.write", params="iiiIi")
def write(call: Call, handle: int, ptr: int, length: int, offset: int, ret: int) -> None:
    data = call.memory.read(ptr, length)

    def run() -> Callable[[int], None]:
        entry, node = _descriptor(call, handle)
        if not isinstance(node, File | NullDevice) or not entry["flags"] & DESCRIPTOR_WRITE:
            raise FsError(WasiErrno.BADF)
        written = call.host.fs(entry).write(node, u64(offset), data)
        return lambda at: call.memory.pack("Q", at, written)

    _aligned8(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.read-directory", params="ii")
def read_directory(call: Call, handle: int, ret: int) -> None:
    def run() -> int:
        entry, directory = _directory(call, handle)
        call.host.check_room("directory-entry-stream")
        children = call.host.fs(entry).listing(directory)
        listed = [[_type_code(node), name] for name, node in children]
        stream = {"type": "directory-entry-stream", "entries": listed, "position": 0}
        return call.host.add(stream)

    _handle(call, ret, run)


@implements(
    "wasi:filesystem/types#[method]directory-entry-stream.read-directory-entry", params="ii"
)
def read_directory_entry(call: Call, handle: int, ret: int) -> None:
    stream = call.host.table.get(handle, "directory-entry-stream")
    if stream["position"] >= len(stream["entries"]):
        call.memory.pack("B3xB", ret, 0, 0)  # ok(none)
        return
    type_code, name = stream["entries"][stream["position"]]
    stream["position"] += 1
    call.memory.pack("B3xB3xB3xII", ret, 0, 1, type_code, *call.string_out(name))


def _change_at(
    call: Call,
    handle: int,
    ptr: int,
    length: int,
    ret: int,
    change: Callable[[VirtualFS, Found], object],
) -> None:
    """result<_, error-code> of `change` made to a path beneath writable directory
    descriptor `handle` (see `_mutating_at`)."""
    _unit(call, ret, lambda: change(*_mutating_at(call, handle, ptr, length)))


@implements("wasi:filesystem/types#[method]descriptor.create-directory-at", params="iiii")
def create_directory_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    _change_at(call, handle, ptr, length, ret, lambda fs, found: fs.mkdir(found))


@implements("wasi:filesystem/types#[method]descriptor.stat", params="ii")
def stat_(call: Call, handle: int, ret: int) -> None:
    def run() -> Callable[[int], None]:
        entry, node = _descriptor(call, handle)
        fs = call.host.fs(entry)
        return lambda at: _write_stat(call, at, fs, node)

    _aligned8(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.stat-at", params="iiiii")
def stat_at(call: Call, handle: int, path_flags: int, ptr: int, length: int, ret: int) -> None:
    def run() -> Callable[[int], None]:
        _, fs, found = _at(call, handle, ptr, length)
        node = existing(found)
        return lambda at: _write_stat(call, at, fs, node)

    _aligned8(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.open-at", params="iiiiiii")
def open_at(
    call: Call,
    handle: int,
    path_flags: int,
    ptr: int,
    length: int,
    open_flags: int,
    flags: int,
    ret: int,
) -> None:
    _handle(call, ret, lambda: _open(call, *_at(call, handle, ptr, length), open_flags, flags))


def _open(call: Call, base: Entry, fs: VirtualFS, found: Found, open_flags: int, flags: int) -> int:
    """wasmtime's `open-at`: permissions first, then the node (created or truncated)."""
    call.host.check_room()
    creating = bool(open_flags & (OPEN_CREATE | OPEN_TRUNCATE))
    write = bool(flags & DESCRIPTOR_WRITE) or creating
    # `/dev/null` takes writes on its read-only mount, as preview 1's `path_open` lets it
    # (wasi-libc asks for mutate-directory with every write, which means nothing for it).
    null_device = isinstance(found.node, NullDevice)
    if (write or flags & MUTATE_DIRECTORY) and not call.host.writable(base) and not null_device:
        raise FsError(WasiErrno.NOTPERM)
    if flags & SYNC_FLAGS:
        raise FsError(WasiErrno.UNSUPPORTED)
    wants_dir = bool(open_flags & OPEN_DIRECTORY) or found.must_be_dir
    if open_flags & OPEN_DIRECTORY and open_flags & (OPEN_CREATE | OPEN_EXCLUSIVE | OPEN_TRUNCATE):
        raise FsError(WasiErrno.INVAL)
    read = bool(flags & DESCRIPTOR_READ) or not flags & DESCRIPTOR_WRITE
    node = found.node
    if node is None:
        if not open_flags & OPEN_CREATE:
            raise FsError(WasiErrno.NOENT)
        node = fs.create_file(found)
    elif open_flags & OPEN_CREATE and open_flags & OPEN_EXCLUSIVE:
        raise FsError(WasiErrno.EXIST)
    is_dir = isinstance(node, Directory)
    if wants_dir and not is_dir:
        raise FsError(WasiErrno.NOTDIR)
    if is_dir and open_flags & OPEN_TRUNCATE:
        raise FsError(WasiErrno.ISDIR)
    if isinstance(node, File) and open_flags & OPEN_TRUNCATE:
        fs.truncate(node, 0)
    granted = (DESCRIPTOR_READ if read else 0) | (
        (MUTATE_DIRECTORY if is_dir else DESCRIPTOR_WRITE) if write else 0
    )
    if is_dir and flags & MUTATE_DIRECTORY:
        granted |= MUTATE_DIRECTORY
    entry = {
        "type": "descriptor",
        "preopen": base["preopen"],
        "path": fs.path_of(node) or "",
        "dir": is_dir,
        "flags": granted,
    }
    return call.host.add(entry, node)


@implements("wasi:filesystem/types#[method]descriptor.readlink-at", params="iiii")
def readlink_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    def run() -> str:
        existing(_at(call, handle, ptr, length)[2])
        raise FsError(WasiErrno.INVAL)  # nothing is a symlink

    def write_ok(target: str) -> None:
        call.memory.pack("B3xII", ret, 0, *call.string_out(target))

    _result(call, ret, "B3xB", run, write_ok)


@implements("wasi:filesystem/types#[method]descriptor.remove-directory-at", params="iiii")
def remove_directory_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    _change_at(call, handle, ptr, length, ret, lambda fs, found: fs.rmdir(found))


@implements("wasi:filesystem/types#[method]descriptor.unlink-file-at", params="iiii")
def unlink_file_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    _change_at(call, handle, ptr, length, ret, lambda fs, found: fs.unlink(found))


@implements("wasi:filesystem/types#[method]descriptor.rename-at", params="iiiiiii")
def rename_at(
    call: Call,
    handle: int,
    old_ptr: int,
    old_length: int,
    new_handle: int,
    new_ptr: int,
    new_length: int,
    ret: int,
) -> None:
    def run() -> None:
        fs, old = _mutating_at(call, handle, old_ptr, old_length)
        new_fs, new = _mutating_at(call, new_handle, new_ptr, new_length)
        if new_fs is not fs:
            raise FsError(WasiErrno.CROSS_DEVICE)
        fs.rename(old, new)

    _unit(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.symlink-at", params="iiiiii")
def symlink_at(call: Call, handle: int, *args: int) -> None:
    """Never allowed (spec 9.3)."""
    _unit(call, args[-1], _not_permitted)


@implements("wasi:filesystem/types#[method]descriptor.link-at", params="iiiiiiii")
def link_at(call: Call, handle: int, *args: int) -> None:
    """Never allowed (spec 9.3)."""
    _unit(call, args[-1], _not_permitted)


def _not_permitted() -> None:
    raise FsError(WasiErrno.NOTPERM)


@implements("wasi:filesystem/types#[method]descriptor.is-same-object", params="ii", results="i")
def is_same_object(call: Call, handle: int, other: int) -> int:
    try:
        first = _descriptor(call, handle)[1]
        second = _descriptor(call, other)[1]
    except HOST_ERRORS:
        return 0
    return int(first is second)


@implements("wasi:filesystem/types#[method]descriptor.metadata-hash", params="ii")
def metadata_hash(call: Call, handle: int, ret: int) -> None:
    def run() -> Callable[[int], None]:
        write = _metadata_hash(_descriptor(call, handle)[1])
        return lambda at: write(call, at)

    _aligned8(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.metadata-hash-at", params="iiiii")
def metadata_hash_at(
    call: Call, handle: int, path_flags: int, ptr: int, length: int, ret: int
) -> None:
    def run() -> Callable[[int], None]:
        write = _metadata_hash(existing(_at(call, handle, ptr, length)[2]))
        return lambda at: write(call, at)

    _aligned8(call, ret, run)
