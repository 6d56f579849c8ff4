"""`wasi:filesystem`: the mounts, confined to their host directories.

Semantics follow wasmtime's host (cap-std) where the guest can tell: descriptors carry
the mount's permissions, `..` or a symlink never leaves the descriptor a path starts
from, absolute paths are not permitted. Stricter where the spec asks (9.3): symlinks
and hard links cannot be created, and a link whose target is absolute is not read.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable
from typing import Any, TypeVar

from engines.decomposed.wasi.abi import Call, implements, u64
from engines.decomposed.wasi.confine import Resolved, resolve
from engines.decomposed.wasi.errors import HOST_ERRORS, FsError, WasiErrno, error_code
from engines.decomposed.wasi.host import (
    DESCRIPTOR_READ,
    DESCRIPTOR_WRITE,
    MUTATE_DIRECTORY,
    OPEN_FLAGS,
)
from engines.decomposed.wasi.resources import Entry

SYNC_FLAGS = 4 | 8 | 16
"""file-integrity-sync, data-integrity-sync, requested-write-sync: not supported."""
SYMLINK_FOLLOW = 1
OPEN_CREATE, OPEN_DIRECTORY, OPEN_EXCLUSIVE, OPEN_TRUNCATE = 1, 2, 4, 8
NO_CHANGE, NOW, TIMESTAMP = 0, 1, 2
READ_LIMIT = 1 << 24
"""Bytes one `descriptor.read` returns at most."""
FILE_MODE = 0o666
"""Mode of created files (less the umask), as wasmtime creates them."""
DESCRIPTOR_TYPES = {
    stat.S_IFBLK: 1,
    stat.S_IFCHR: 2,
    stat.S_IFDIR: 3,
    stat.S_IFIFO: 4,
    stat.S_IFLNK: 5,
    stat.S_IFREG: 6,
    stat.S_IFSOCK: 7,
}
"""`descriptor-type` of each file type (block-device to socket); any other is 0, unknown."""

_Value = TypeVar("_Value")


def _type_code(mode: int) -> int:
    """`descriptor-type` of a file mode."""
    return DESCRIPTOR_TYPES.get(stat.S_IFMT(mode), 0)


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


def _write_stat(call: Call, ptr: int, status: os.stat_result) -> None:
    """descriptor-stat: type, link count, size, then three option<datetime>."""
    call.memory.pack("B7xQQ", ptr, _type_code(status.st_mode), status.st_nlink, status.st_size)
    for index, nanos in enumerate((status.st_atime_ns, status.st_mtime_ns, status.st_ctime_ns)):
        seconds, rest = divmod(nanos, 1_000_000_000)
        call.memory.pack("B7xQI4x", ptr + 24 + 24 * index, 1, seconds & (2**64 - 1), rest)


def _metadata_hash(status: os.stat_result) -> Callable[[Call, int], None]:
    """Two u64s identifying the file (device and inode, hashed: host details stay out)."""
    digest = hashlib.sha256(f"{status.st_dev}:{status.st_ino}".encode()).digest()
    lower, upper = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little")
    return lambda call, ptr: call.memory.pack("QQ", ptr, lower, upper)


# -- descriptors ------------------------------------------------------------------------


def _descriptor(call: Call, handle: int) -> tuple[Entry, int]:
    entry = call.host.table.get(handle, "descriptor")
    return entry, call.host.descriptor_of(handle, entry)


def _file(call: Call, handle: int) -> int:
    entry, descriptor = _descriptor(call, handle)
    if entry["dir"]:
        raise FsError(WasiErrno.BADF)
    return descriptor


def _directory(call: Call, handle: int) -> tuple[Entry, int]:
    entry, descriptor = _descriptor(call, handle)
    if not entry["dir"]:
        raise FsError(WasiErrno.NOTDIR)
    return entry, descriptor


def _names(entry: Entry) -> list[str]:
    return [part for part in entry["path"].split("/") if part]


def _at(call: Call, handle: int, ptr: int, length: int, follow: bool) -> tuple[Entry, Resolved]:
    """Resolve a path beneath directory descriptor `handle` (see `confine.resolve`)."""
    path = call.memory.string(ptr, length)
    entry, descriptor = _directory(call, handle)
    return entry, resolve(descriptor, _names(entry), path, follow=follow)


def _mutating_at(call: Call, handle: int, ptr: int, length: int) -> tuple[Entry, Resolved]:
    entry, found = _at(call, handle, ptr, length, False)
    if not call.host.writable(entry):
        found.close()
        raise FsError(WasiErrno.NOTPERM)
    return entry, found


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
            "flags": DESCRIPTOR_READ | (MUTATE_DIRECTORY if mount.writable else 0),
        }
        listed.append((host.add(entry, os.dup(host.root(index))), mount.guest_path))
    base = call.alloc(12 * len(listed), 4) if listed else 0
    for index, (handle, guest_path) in enumerate(listed):
        call.memory.pack("III", base + 12 * index, handle, *call.string_out(guest_path))
    call.memory.pack("II", ret, base, len(listed))


def _file_stream(call: Call, handle: int, ret: int, kind: str, **fields: Any) -> None:
    """result<own<stream>, error-code>: a `kind` stream on file descriptor `handle`, with
    a descriptor of its own (see `_stream` for `fields`)."""

    def run() -> int:
        descriptor = _file(call, handle)
        entry = call.host.table.get(handle, "descriptor")
        return call.host.add(_stream(entry, kind, **fields), os.dup(descriptor))

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
    _unit(call, ret, lambda: os.fsync(_descriptor(call, handle)[1]))


@implements("wasi:filesystem/types#[method]descriptor.get-flags", params="ii")
def get_flags(call: Call, handle: int, ret: int) -> None:
    _byte(call, ret, lambda: int(call.host.table.get(handle, "descriptor")["flags"]))


@implements("wasi:filesystem/types#[method]descriptor.get-type", params="ii")
def get_type(call: Call, handle: int, ret: int) -> None:
    _byte(call, ret, lambda: _type_code(os.fstat(_descriptor(call, handle)[1]).st_mode))


@implements("wasi:filesystem/types#[method]descriptor.set-size", params="iIi")
def set_size(call: Call, handle: int, size: int, ret: int) -> None:
    call.host.before_change()
    _unit(call, ret, lambda: os.ftruncate(_file(call, handle), u64(size)))


def _timestamp(current: int, tag: int, seconds: int, nanoseconds: int) -> int:
    if tag == NO_CHANGE:
        return current
    if tag == NOW:
        return time.time_ns()
    return u64(seconds) * 1_000_000_000 + nanoseconds


def _times(
    status: os.stat_result, access: tuple[int, int, int], modify: tuple[int, int, int]
) -> tuple[int, int]:
    return _timestamp(status.st_atime_ns, *access), _timestamp(status.st_mtime_ns, *modify)


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
        entry, descriptor = _descriptor(call, handle)
        if not call.host.writable(entry):
            raise FsError(WasiErrno.NOTPERM)
        status = os.fstat(descriptor)
        times = _times(
            status,
            (access_tag, access_seconds, access_nanos),
            (modify_tag, modify_seconds, modify_nanos),
        )
        os.utime(descriptor, ns=times)

    _unit(call, ret, run)


# Same shape as set_times: kept apart, as it sets a path's times (not following links).
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
        entry, found = _at(call, handle, ptr, length, bool(path_flags & SYMLINK_FOLLOW))
        try:
            if not call.host.writable(entry):
                raise FsError(WasiErrno.NOTPERM)
            status = os.stat(found.name, dir_fd=found.parent, follow_symlinks=False)
            times = _times(
                status,
                (access_tag, access_seconds, access_nanos),
                (modify_tag, modify_seconds, modify_nanos),
            )
            os.utime(found.name, ns=times, dir_fd=found.parent, follow_symlinks=False)
        finally:
            found.close()

    _unit(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.read", params="iIIi")
def read(call: Call, handle: int, length: int, offset: int, ret: int) -> None:
    def run() -> bytes:
        return os.pread(_file(call, handle), min(u64(length), READ_LIMIT), u64(offset))

    def write_ok(data: bytes) -> None:
        ptr, size = call.bytes_out(data)
        call.memory.pack("B3xIIB", ret, 0, ptr, size, int(not data))

    _result(call, ret, "B3xB", run, write_ok)


@implements("wasi:filesystem/types#[method]descriptor.write", params="iiiIi")
def write(call: Call, handle: int, ptr: int, length: int, offset: int, ret: int) -> None:
    data = call.memory.read(ptr, length)
    call.host.before_change()

    def run() -> Callable[[int], None]:
        written = os.pwrite(_file(call, handle), data, u64(offset))
        return lambda at: call.memory.pack("Q", at, written)

    _aligned8(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.read-directory", params="ii")
def read_directory(call: Call, handle: int, ret: int) -> None:
    def run() -> int:
        _, descriptor = _directory(call, handle)
        # A descriptor of its own: listing moves the directory's offset.
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=descriptor)
        try:
            with os.scandir(listing) as entries:  # in the directory's own order, as wasmtime
                listed = [
                    [_type_code(item.stat(follow_symlinks=False).st_mode), item.name]
                    for item in entries
                ]
        finally:
            os.close(listing)
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
    call: Call, handle: int, ptr: int, length: int, ret: int, change: Callable[[Resolved], object]
) -> None:
    """result<_, error-code> of `change` made to a path beneath writable directory
    descriptor `handle` (see `_mutating_at`)."""

    def run() -> None:
        _, found = _mutating_at(call, handle, ptr, length)
        try:
            call.host.before_change()
            change(found)
        finally:
            found.close()

    _unit(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.create-directory-at", params="iiii")
def create_directory_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    _change_at(
        call, handle, ptr, length, ret, lambda found: os.mkdir(found.name, dir_fd=found.parent)
    )


@implements("wasi:filesystem/types#[method]descriptor.stat", params="ii")
def stat_(call: Call, handle: int, ret: int) -> None:
    def run() -> Callable[[int], None]:
        status = os.fstat(_descriptor(call, handle)[1])
        return lambda at: _write_stat(call, at, status)

    _aligned8(call, ret, run)


def _stat_at(call: Call, handle: int, path_flags: int, ptr: int, length: int) -> os.stat_result:
    _, found = _at(call, handle, ptr, length, bool(path_flags & SYMLINK_FOLLOW))
    try:
        status = os.stat(found.name, dir_fd=found.parent, follow_symlinks=False)
    finally:
        found.close()
    if found.must_be_dir and not stat.S_ISDIR(status.st_mode):
        raise FsError(WasiErrno.NOTDIR)
    return status


@implements("wasi:filesystem/types#[method]descriptor.stat-at", params="iiiii")
def stat_at(call: Call, handle: int, path_flags: int, ptr: int, length: int, ret: int) -> None:
    def run() -> Callable[[int], None]:
        status = _stat_at(call, handle, path_flags, ptr, length)
        return lambda at: _write_stat(call, at, status)

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
    def run() -> int:
        entry, found = _at(call, handle, ptr, length, bool(path_flags & SYMLINK_FOLLOW))
        try:
            return _open(call, entry, found, open_flags, flags)
        finally:
            found.close()

    _handle(call, ret, run)


def _open(call: Call, base: Entry, found: Resolved, open_flags: int, flags: int) -> int:
    """wasmtime's `open-at`: permissions first, then one `openat` with O_NOFOLLOW."""
    creating = bool(open_flags & (OPEN_CREATE | OPEN_TRUNCATE))
    write = bool(flags & DESCRIPTOR_WRITE) or creating
    if (write or flags & MUTATE_DIRECTORY) and not call.host.writable(base):
        raise FsError(WasiErrno.NOTPERM)
    if flags & SYNC_FLAGS:
        raise FsError(WasiErrno.UNSUPPORTED)
    wants_dir = bool(open_flags & OPEN_DIRECTORY) or found.must_be_dir
    if open_flags & OPEN_DIRECTORY and open_flags & (OPEN_CREATE | OPEN_EXCLUSIVE | OPEN_TRUNCATE):
        raise FsError(WasiErrno.INVAL)
    read = bool(flags & DESCRIPTOR_READ) or not flags & DESCRIPTOR_WRITE
    access = os.O_RDWR if read and write else os.O_WRONLY if write else os.O_RDONLY
    mode = access | OPEN_FLAGS
    if open_flags & OPEN_CREATE:
        mode |= os.O_CREAT | (os.O_EXCL if open_flags & OPEN_EXCLUSIVE else 0)
    if open_flags & OPEN_TRUNCATE:
        mode |= os.O_TRUNC
    if wants_dir:
        mode |= os.O_DIRECTORY
    if write:
        call.host.before_change()
    try:
        descriptor = os.open(found.name, mode, FILE_MODE, dir_fd=found.parent)
    except IsADirectoryError:  # a directory asked for with write access: open it as one
        directory_mode = os.O_RDONLY | os.O_DIRECTORY | OPEN_FLAGS
        descriptor = os.open(found.name, directory_mode, dir_fd=found.parent)
    try:
        is_dir = stat.S_ISDIR(os.fstat(descriptor).st_mode)
        if wants_dir and not is_dir:
            raise FsError(WasiErrno.NOTDIR)
    except BaseException:
        os.close(descriptor)
        raise
    granted = (DESCRIPTOR_READ if read else 0) | (
        (MUTATE_DIRECTORY if is_dir else DESCRIPTOR_WRITE) if write else 0
    )
    if is_dir and flags & MUTATE_DIRECTORY:
        granted |= MUTATE_DIRECTORY
    entry = {
        "type": "descriptor",
        "preopen": base["preopen"],
        "path": found.path,
        "dir": is_dir,
        "flags": granted,
    }
    return call.host.add(entry, descriptor)


@implements("wasi:filesystem/types#[method]descriptor.readlink-at", params="iiii")
def readlink_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    def run() -> str:
        _, found = _at(call, handle, ptr, length, False)
        try:
            target = os.readlink(found.name, dir_fd=found.parent)
        finally:
            found.close()
        if target.startswith("/"):
            raise FsError(WasiErrno.NOTPERM)  # would name a host path
        return target

    def write_ok(target: str) -> None:
        call.memory.pack("B3xII", ret, 0, *call.string_out(target))

    _result(call, ret, "B3xB", run, write_ok)


@implements("wasi:filesystem/types#[method]descriptor.remove-directory-at", params="iiii")
def remove_directory_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    _change_at(
        call, handle, ptr, length, ret, lambda found: os.rmdir(found.name, dir_fd=found.parent)
    )


@implements("wasi:filesystem/types#[method]descriptor.unlink-file-at", params="iiii")
def unlink_file_at(call: Call, handle: int, ptr: int, length: int, ret: int) -> None:
    def unlink(found: Resolved) -> None:
        if found.must_be_dir:
            raise FsError(WasiErrno.NOTDIR)
        os.unlink(found.name, dir_fd=found.parent)

    _change_at(call, handle, ptr, length, ret, unlink)


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
        _, old = _mutating_at(call, handle, old_ptr, old_length)
        try:
            _, new = _mutating_at(call, new_handle, new_ptr, new_length)
            try:
                os.rename(old.name, new.name, src_dir_fd=old.parent, dst_dir_fd=new.parent)
            finally:
                new.close()
        finally:
            old.close()

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
        first = os.fstat(_descriptor(call, handle)[1])
        second = os.fstat(_descriptor(call, other)[1])
    except HOST_ERRORS:
        return 0
    return int((first.st_dev, first.st_ino) == (second.st_dev, second.st_ino))


@implements("wasi:filesystem/types#[method]descriptor.metadata-hash", params="ii")
def metadata_hash(call: Call, handle: int, ret: int) -> None:
    def run() -> Callable[[int], None]:
        write = _metadata_hash(os.fstat(_descriptor(call, handle)[1]))
        return lambda at: write(call, at)

    _aligned8(call, ret, run)


@implements("wasi:filesystem/types#[method]descriptor.metadata-hash-at", params="iiiii")
def metadata_hash_at(
    call: Call, handle: int, path_flags: int, ptr: int, length: int, ret: int
) -> None:
    def run() -> Callable[[int], None]:
        write = _metadata_hash(_stat_at(call, handle, path_flags, ptr, length))
        return lambda at: write(call, at)

    _aligned8(call, ret, run)
