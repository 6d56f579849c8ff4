"""WASI preview 1 files for core-module guests (Perl, Ruby), served from `VirtualFS` trees.

wasmtime's own WASI stays linked for what touches no file (arguments, the empty
environment, clocks, randomness, `poll_oneoff` for Ruby's sleep, `proc_exit`); every call
that takes a descriptor or a path is shadowed here (`define`), and wasmtime gets no
preopen, so no guest call can reach a host file. Descriptors 0-2 are stdio as wasmtime
shows them (unknown type, no seek; writes to 1 and 2 go to the session's capture, the
first non-empty buffer per call in 4 KiB pieces as wasmtime's custom outputs do, which
the spec's output-write limit counts); the mounts are preopened from 3 on, in order.

The descriptor table is plain data for a snapshot (`state`, `load`): wasi-libc keeps the
numbers of its preopens in linear memory, and a guest may hold a file open across runs.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import wasmtime

from engines.components.wasi.abi import MemoryUser, functype, u64
from engines.host import host_func
from engines.vfs import (
    Directory,
    File,
    Found,
    Mount,
    Node,
    NullDevice,
    VfsError,
    VirtualFS,
    existing,
    file_kind,
)

MODULE = "wasi_snapshot_preview1"
ERRNO = {
    "E2BIG": 1,
    "EACCES": 2,
    "EBADF": 8,
    "EBUSY": 10,
    "EEXIST": 20,
    "EFAULT": 21,
    "EFBIG": 22,
    "EILSEQ": 25,
    "EINVAL": 28,
    "EIO": 29,
    "EMFILE": 33,
    "EISDIR": 31,
    "ENAMETOOLONG": 37,
    "ENOENT": 44,
    "ENOSPC": 51,
    "ENOTDIR": 54,
    "ENOTEMPTY": 55,
    "ENOTSUP": 58,
    "EOVERFLOW": 61,
    "EPERM": 63,
    "ESPIPE": 70,
    "EXDEV": 75,
}
"""Preview 1 errno numbers of the POSIX names `VirtualFS` raises (and a few of ours)."""

UNKNOWN = 0
FILETYPES = {"character-device": 2, "directory": 3, "regular-file": 4}
"""Preview 1 `filetype` of each `vfs.file_kind`."""
CREAT, OPEN_DIRECTORY, EXCL, TRUNC = 1, 2, 4, 8
APPEND, DSYNC, NONBLOCK, RSYNC, SYNC = 1, 2, 4, 8, 16
ATIM, ATIM_NOW, MTIM, MTIM_NOW = 1, 2, 4, 8
WHENCE_SET, WHENCE_CUR, WHENCE_END = 0, 1, 2
FD_DATASYNC, FD_READ, FD_WRITE = 1 << 0, 1 << 1, 1 << 6
FD_ALLOCATE, FD_READDIR, FD_FILESTAT_SET_SIZE = 1 << 8, 1 << 14, 1 << 22
FILE_RIGHTS = sum(1 << bit for bit in (*range(9), 21, 22, 23, 27))
"""fd_datasync … fd_allocate, fd_filestat_get/set_size/set_times, poll_fd_readwrite."""
DIRECTORY_RIGHTS = sum(1 << bit for bit in (3, 4, 7, *range(9, 22), 23, 24, 25, 26))
"""fd_fdstat_set_flags, fd_sync, fd_advise, path_*, fd_readdir, fd_filestat_get/set_times
(as wasmtime grants a preopened directory)."""
READ_RIGHTS = FD_READ | FD_READDIR
WRITE_RIGHTS = FD_DATASYNC | FD_WRITE | FD_ALLOCATE | FD_FILESTAT_SET_SIZE
MAX_OFFSET = (1 << 63) - 1
MAX_DESCRIPTORS = 1024
"""Open descriptors a guest may hold at once (stdio and the preopens included): EMFILE
beyond, as a process's usual limit."""
STDIO_PIECE = 4096
"""Bytes per capture call, as wasmtime's custom stdout/stderr deliver them."""
DETACHED = "\0"
"""The path a snapshot records for a file that was removed while open (never found)."""
_DIRENT = struct.Struct("<QQIB3x")
_FILESTAT = struct.Struct("<QQB7xQQQQQ")


@dataclass
class Descriptor:
    """One open descriptor: stdio (no node), a preopen or a file or directory below one."""

    kind: str
    """"stdin", "stdout", "stderr", "directory" or "file"."""
    mount: int = -1
    node: Node | None = None
    rights: int = 0
    inheriting: int = 0
    flags: int = 0
    offset: int = 0
    preopen: bool = False


class Preview1Host(MemoryUser):
    """The descriptor table and file calls of one guest (the store's data)."""

    def __init__(
        self,
        mounts: Sequence[Mount],
        stdout: Callable[[bytes], None],
        stderr: Callable[[bytes], None],
    ) -> None:
        self.mounts = list(mounts)
        self._outputs = {1: stdout, 2: stderr}
        self.fds: dict[int, Descriptor] = {}
        self._open_defaults()

    def _open_defaults(self) -> None:
        self.fds = {
            0: Descriptor("stdin", rights=FD_READ, inheriting=FD_READ),
            1: Descriptor("stdout", rights=FD_WRITE, inheriting=FD_WRITE),
            2: Descriptor("stderr", rights=FD_WRITE, inheriting=FD_WRITE),
        }
        for index, mount in enumerate(self.mounts):
            self.fds[3 + index] = Descriptor(
                "directory",
                index,
                mount.fs.root,
                DIRECTORY_RIGHTS,
                DIRECTORY_RIGHTS | FILE_RIGHTS,
                preopen=True,
            )

    def close(self) -> None:
        """Close every descriptor (a file unlinked while open frees its bytes)."""
        for fd in list(self.fds):
            self._close(fd)

    def define(
        self, linker: wasmtime.Linker, module: wasmtime.Module, store: wasmtime.Store
    ) -> None:
        """Shadow (after `linker.define_wasi()`) every preview 1 import of `module` that
        takes a descriptor or a path."""
        linker.allow_shadowing = True
        for item in module.imports:
            entry = _CALLS.get(item.name or "") if item.module == MODULE else None
            if entry is None:
                continue
            params, method = entry
            func = host_func(store, functype(params, "i"), self._bind(method))
            linker.define(store, MODULE, item.name or "", func)

    def _bind(self, method: Callable[..., int]) -> Callable[..., int]:
        def call(*args: int) -> int:
            memory = self.memory
            memory.pin()  # no call here runs guest code: the memory cannot grow meanwhile
            try:
                return method(self, *args)
            except VfsError as error:
                return ERRNO.get(error.errno, ERRNO["EIO"])
            except UnicodeDecodeError:
                return ERRNO["EILSEQ"]
            finally:
                memory.unpin()

        return call

    # -- snapshots -------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The descriptor table as plain JSON (files by path)."""
        table = {}
        for fd, descriptor in self.fds.items():
            path = ""
            if descriptor.node is not None:
                found = self.mounts[descriptor.mount].fs.path_of(descriptor.node)
                path = DETACHED if found is None else found
            table[str(fd)] = {
                "kind": descriptor.kind,
                "mount": descriptor.mount,
                "path": path,
                "rights": descriptor.rights,
                "inheriting": descriptor.inheriting,
                "flags": descriptor.flags,
                "offset": descriptor.offset,
                "preopen": descriptor.preopen,
            }
        return {"fds": table}

    def load(self, state: object) -> None:
        """Take back what `state` returned (None: a snapshot from before this host kept
        its table, which held only stdio and the preopens). A file that is gone since
        stays a descriptor whose every use is EBADF."""
        self.close()
        self._open_defaults()
        if state is None:
            return
        if not isinstance(state, dict) or not isinstance(state.get("fds"), dict):
            raise ValueError("malformed preview 1 host state")
        self.fds = {}
        for key, raw in state["fds"].items():
            descriptor = _descriptor_from(raw, len(self.mounts))
            if descriptor.mount >= 0:
                fs = self.mounts[descriptor.mount].fs
                path = str(raw["path"])
                try:
                    descriptor.node = fs.root if path == "" else fs.lookup(fs.root, path)
                except VfsError:
                    descriptor.node = None
                if descriptor.node is not None:
                    fs.retain(descriptor.node)
            self.fds[int(key)] = descriptor

    # -- helpers ---------------------------------------------------------------------------
    def _get(self, fd: int) -> Descriptor:
        descriptor = self.fds.get(fd)
        if descriptor is None:
            raise VfsError("EBADF")
        if descriptor.kind in ("directory", "file") and descriptor.node is None:
            raise VfsError("EBADF")
        return descriptor

    def _directory(self, fd: int) -> tuple[Descriptor, Directory]:
        descriptor = self._get(fd)
        if not isinstance(descriptor.node, Directory):
            raise VfsError("ENOTDIR")
        return descriptor, descriptor.node

    def _file(self, fd: int, right: int) -> tuple[Descriptor, File | NullDevice]:
        descriptor = self._get(fd)
        if isinstance(descriptor.node, Directory):
            raise VfsError("EISDIR")
        if not isinstance(descriptor.node, File | NullDevice) or not descriptor.rights & right:
            raise VfsError("EBADF")
        return descriptor, descriptor.node

    def _path(self, ptr: int, length: int) -> str:
        return self.memory.read(ptr, length).decode("utf-8")

    def _at(self, fd: int, ptr: int, length: int) -> tuple[Descriptor, Found]:
        descriptor, directory = self._directory(fd)
        fs = self.mounts[descriptor.mount].fs
        return descriptor, fs.resolve(directory, self._path(ptr, length))

    def _fs(self, descriptor: Descriptor) -> VirtualFS:
        return self.mounts[descriptor.mount].fs

    def _iovecs(self, ptr: int, count: int) -> list[tuple[int, int]]:
        raw = self.memory.read(ptr, 8 * count)
        return [struct.unpack_from("<II", raw, 8 * index) for index in range(count)]

    def _scatter(self, ptr: int, count: int, data: memoryview) -> int:
        done = 0
        for base, size in self._iovecs(ptr, count):
            piece = data[done : done + size]
            self.memory.write(base, piece)
            done += len(piece)
            if len(piece) < size:
                break
        return done

    def _close(self, fd: int) -> None:
        descriptor = self.fds.pop(fd)
        if descriptor.node is not None:
            self._fs(descriptor).release(descriptor.node)

    def _new_fd(self, descriptor: Descriptor) -> int:
        if len(self.fds) >= MAX_DESCRIPTORS:
            raise VfsError("EMFILE")
        fd = 3
        while fd in self.fds:
            fd += 1
        self.fds[fd] = descriptor
        return fd

    def _filestat(self, ptr: int, descriptor: Descriptor, node: Node | None) -> None:
        if node is None:  # stdio: wasmtime reports all zeroes
            self.memory.write(ptr, bytes(_FILESTAT.size))
            return
        size = len(node.data) if isinstance(node, File) else 0
        linked = int(self._fs(descriptor).path_of(node) is not None)
        self.memory.write(
            ptr,
            _FILESTAT.pack(
                descriptor.mount + 1,
                node.ino,
                _filetype(node),
                linked,
                size,
                node.atime_ns,
                node.mtime_ns,
                node.mtime_ns,
            ),
        )

    # -- descriptors -----------------------------------------------------------------------
    def fd_close(self, fd: int) -> int:
        self._get(fd)
        self._close(fd)
        return 0

    def fd_renumber(self, fd: int, to: int) -> int:
        self._get(fd)
        self._get(to)
        if fd != to:
            self._close(to)
            self.fds[to] = self.fds.pop(fd)
        return 0

    def fd_fdstat_get(self, fd: int, ptr: int) -> int:
        descriptor = self._get(fd)
        kind = UNKNOWN if descriptor.node is None else _filetype(descriptor.node)
        self.memory.write(
            ptr,
            struct.pack(
                "<BxH4xQQ", kind, descriptor.flags, descriptor.rights, descriptor.inheriting
            ),
        )
        return 0

    def fd_fdstat_set_flags(self, fd: int, flags: int) -> int:
        descriptor = self._get(fd)
        if descriptor.node is None or flags & (DSYNC | RSYNC | SYNC):
            return ERRNO["ENOTSUP"] if descriptor.node is not None else ERRNO["EBADF"]
        descriptor.flags = flags & (APPEND | NONBLOCK)
        return 0

    def fd_fdstat_set_rights(self, fd: int, rights: int, inheriting: int) -> int:
        self._get(fd)
        return ERRNO["ENOTSUP"]

    def fd_prestat_get(self, fd: int, ptr: int) -> int:
        descriptor = self.fds.get(fd)
        if descriptor is None or not descriptor.preopen:
            return ERRNO["EBADF"]
        name = self.mounts[descriptor.mount].guest_path.encode()
        self.memory.write(ptr, struct.pack("<B3xI", 0, len(name)))
        return 0

    def fd_prestat_dir_name(self, fd: int, ptr: int, length: int) -> int:
        descriptor = self.fds.get(fd)
        if descriptor is None or not descriptor.preopen:
            return ERRNO["EBADF"]
        name = self.mounts[descriptor.mount].guest_path.encode()
        if length < len(name):
            return ERRNO["ENAMETOOLONG"]
        self.memory.write(ptr, name)
        return 0

    def fd_filestat_get(self, fd: int, ptr: int) -> int:
        descriptor = self._get(fd)
        self._filestat(ptr, descriptor, descriptor.node)
        return 0

    def fd_filestat_set_size(self, fd: int, size: int) -> int:
        descriptor, file = self._file(fd, FD_FILESTAT_SET_SIZE | FD_WRITE)
        if isinstance(file, File):
            self._fs(descriptor).truncate(file, u64(size))
        return 0

    def fd_filestat_set_times(self, fd: int, atime: int, mtime: int, flags: int) -> int:
        descriptor = self._get(fd)
        if descriptor.node is None:
            return ERRNO["EBADF"]
        _set_times(self._fs(descriptor), descriptor.node, atime, mtime, flags)
        return 0

    def fd_sync(self, fd: int) -> int:
        self._get(fd)
        return 0

    def fd_advise(self, fd: int, offset: int, length: int, advice: int) -> int:
        self._file(fd, FILE_RIGHTS)
        return 0

    def fd_allocate(self, fd: int, offset: int, length: int) -> int:
        self._file(fd, FILE_RIGHTS)
        return ERRNO["ENOTSUP"]

    def fd_seek(self, fd: int, offset: int, whence: int, ptr: int) -> int:
        descriptor = self._get(fd)
        if descriptor.node is None:
            return ERRNO["ESPIPE"]
        if isinstance(descriptor.node, Directory):
            return ERRNO["EBADF"]
        size = len(descriptor.node.data) if isinstance(descriptor.node, File) else 0
        bases = {WHENCE_SET: 0, WHENCE_CUR: descriptor.offset, WHENCE_END: size}
        if whence not in bases:
            return ERRNO["EINVAL"]
        position = bases[whence] + offset
        if not 0 <= position <= MAX_OFFSET:
            return ERRNO["EINVAL"]
        descriptor.offset = position
        self.memory.pack("Q", ptr, position)
        return 0

    def fd_tell(self, fd: int, ptr: int) -> int:
        descriptor = self._get(fd)
        if descriptor.node is None:
            return ERRNO["ESPIPE"]
        self.memory.pack("Q", ptr, descriptor.offset)
        return 0

    def fd_read(self, fd: int, iovecs: int, count: int, ptr: int) -> int:
        if fd == 0 and self.fds.get(0, Descriptor("")).kind == "stdin":
            self.memory.pack("I", ptr, 0)
            return 0
        descriptor, file = self._file(fd, FD_READ)
        done = self._read_into(descriptor, file, iovecs, count, descriptor.offset)
        descriptor.offset += done
        self.memory.pack("I", ptr, done)
        return 0

    def fd_pread(self, fd: int, iovecs: int, count: int, offset: int, ptr: int) -> int:
        descriptor, file = self._file(fd, FD_READ)
        self.memory.pack("I", ptr, self._read_into(descriptor, file, iovecs, count, u64(offset)))
        return 0

    def _read_into(
        self, descriptor: Descriptor, file: Node, iovecs: int, count: int, offset: int
    ) -> int:
        """Bytes of `file` from `offset` copied straight into the guest's buffers."""
        wanted = sum(size for _, size in self._iovecs(iovecs, count))
        with self._fs(descriptor).view(file, offset, wanted) as data:
            return self._scatter(iovecs, count, data)

    def fd_write(self, fd: int, iovecs: int, count: int, ptr: int) -> int:
        output = self._outputs.get(fd)
        if output is not None and self._get(fd).kind in ("stdout", "stderr"):
            data = next(
                (
                    self.memory.read(base, size)
                    for base, size in self._iovecs(iovecs, count)
                    if size
                ),
                b"",
            )
            for start in range(0, len(data), STDIO_PIECE):
                output(data[start : start + STDIO_PIECE])
            self.memory.pack("I", ptr, len(data))
            return 0
        descriptor, file = self._file(fd, FD_WRITE)
        offset = descriptor.offset
        if descriptor.flags & APPEND and isinstance(file, File):
            offset = len(file.data)
        written = self._write_from(descriptor, file, iovecs, count, offset)
        descriptor.offset = offset + written
        self.memory.pack("I", ptr, written)
        return 0

    def fd_pwrite(self, fd: int, iovecs: int, count: int, offset: int, ptr: int) -> int:
        descriptor, file = self._file(fd, FD_WRITE)
        written = self._write_from(descriptor, file, iovecs, count, u64(offset))
        self.memory.pack("I", ptr, written)
        return 0

    def _write_from(
        self, descriptor: Descriptor, file: File | NullDevice, iovecs: int, count: int, offset: int
    ) -> int:
        """Write the guest's buffers at `offset`: checked against the limits before a byte
        is read (buffers may all point at the same memory: their sum is not bounded by
        the guest's memory)."""
        buffers = self._iovecs(iovecs, count)
        length = sum(size for _, size in buffers)
        fs = self._fs(descriptor)
        fs.check_write(file, offset, length)
        if isinstance(file, NullDevice):
            return length
        data = b"".join(self.memory.read(base, size) for base, size in buffers)
        return fs.write(file, offset, data)

    def fd_readdir(self, fd: int, buf: int, length: int, cookie: int, ptr: int) -> int:
        descriptor, directory = self._directory(fd)
        if not descriptor.rights & FD_READDIR:
            return ERRNO["EBADF"]
        parent = directory.parent or directory
        listing: list[tuple[str, Node]] = [(".", directory), ("..", parent)]
        listing.extend(self._fs(descriptor).listing(directory))
        out = bytearray()
        for index in range(u64(cookie), len(listing)):
            if len(out) >= length:
                break
            name, node = listing[index]
            encoded = name.encode()
            out += _DIRENT.pack(index + 1, node.ino, len(encoded), _filetype(node)) + encoded
        out = out[:length]
        self.memory.write(buf, bytes(out))
        self.memory.pack("I", ptr, len(out))
        return 0

    # -- paths -----------------------------------------------------------------------------
    def path_open(
        self,
        fd: int,
        lookup_flags: int,
        ptr: int,
        length: int,
        open_flags: int,
        rights: int,
        inheriting: int,
        fd_flags: int,
        result: int,
    ) -> int:
        base, found = self._at(fd, ptr, length)
        fs = self._fs(base)
        if fd_flags & (DSYNC | RSYNC | SYNC):
            return ERRNO["ENOTSUP"]
        if len(self.fds) >= MAX_DESCRIPTORS:
            return ERRNO["EMFILE"]
        rights, inheriting = u64(rights) & base.inheriting, u64(inheriting) & base.inheriting
        write = bool(rights & WRITE_RIGHTS)
        node = found.node
        if node is None:
            if not open_flags & CREAT:
                raise VfsError("ENOENT")
            if open_flags & OPEN_DIRECTORY or found.must_be_dir:
                raise VfsError("EISDIR" if found.must_be_dir else "ENOENT")
            node = fs.create_file(found)
        elif open_flags & CREAT and open_flags & EXCL:
            raise VfsError("EEXIST")
        if isinstance(node, Directory):
            if write or open_flags & TRUNC:
                raise VfsError("EISDIR")
            kind = "directory"
        else:
            if open_flags & OPEN_DIRECTORY or found.must_be_dir:
                raise VfsError("ENOTDIR")
            if (
                (write or open_flags & TRUNC)
                and not fs.writable
                and not isinstance(node, NullDevice)
            ):
                raise VfsError("EPERM")
            if open_flags & TRUNC and isinstance(node, File):
                fs.truncate(node, 0)
            kind = "file"
        fs.retain(node)
        descriptor = Descriptor(
            kind, base.mount, node, rights, inheriting, fd_flags & (APPEND | NONBLOCK)
        )
        self.memory.pack("I", result, self._new_fd(descriptor))
        return 0

    def path_create_directory(self, fd: int, ptr: int, length: int) -> int:
        base, found = self._at(fd, ptr, length)
        self._fs(base).mkdir(found)
        return 0

    def path_remove_directory(self, fd: int, ptr: int, length: int) -> int:
        base, found = self._at(fd, ptr, length)
        self._fs(base).rmdir(found)
        return 0

    def path_unlink_file(self, fd: int, ptr: int, length: int) -> int:
        base, found = self._at(fd, ptr, length)
        self._fs(base).unlink(found)
        return 0

    def path_rename(
        self, fd: int, ptr: int, length: int, new_fd: int, new_ptr: int, new_length: int
    ) -> int:
        base, source = self._at(fd, ptr, length)
        target_base, target = self._at(new_fd, new_ptr, new_length)
        if target_base.mount != base.mount:
            return ERRNO["EXDEV"]
        self._fs(base).rename(source, target)
        return 0

    def path_filestat_get(self, fd: int, flags: int, ptr: int, length: int, result: int) -> int:
        base, found = self._at(fd, ptr, length)
        self._filestat(result, base, existing(found))
        return 0

    def path_filestat_set_times(
        self, fd: int, flags: int, ptr: int, length: int, atime: int, mtime: int, fst: int
    ) -> int:
        base, found = self._at(fd, ptr, length)
        _set_times(self._fs(base), existing(found), atime, mtime, fst)
        return 0

    def path_readlink(
        self, fd: int, ptr: int, length: int, buf: int, buf_length: int, result: int
    ) -> int:
        existing(self._at(fd, ptr, length)[1])
        raise VfsError("EINVAL")  # nothing is a symlink

    def path_link(self, *args: int) -> int:
        """Never allowed (spec 9.3)."""
        return ERRNO["EPERM"]

    def path_symlink(self, *args: int) -> int:
        """Never allowed (spec 9.3)."""
        return ERRNO["EPERM"]


def _filetype(node: Node) -> int:
    return FILETYPES[file_kind(node)]


def _set_times(fs: VirtualFS, node: Node, atime: int, mtime: int, flags: int) -> None:
    if not fs.writable:
        raise VfsError("EPERM")
    if (flags & ATIM and flags & ATIM_NOW) or (flags & MTIM and flags & MTIM_NOW):
        raise VfsError("EINVAL")
    now = time.time_ns()
    if flags & ATIM_NOW:
        node.atime_ns = now
    elif flags & ATIM:
        node.atime_ns = u64(atime)
    if flags & MTIM_NOW:
        node.mtime_ns = now
    elif flags & MTIM:
        node.mtime_ns = u64(mtime)


def _descriptor_from(raw: object, mounts: int) -> Descriptor:
    """A descriptor of a snapshot's table, checked (ValueError when malformed)."""
    if not isinstance(raw, dict):
        raise ValueError("malformed preview 1 descriptor")
    kind, mount = raw.get("kind"), raw.get("mount")
    if kind not in ("stdin", "stdout", "stderr", "directory", "file"):
        raise ValueError("unknown preview 1 descriptor kind")
    if (
        not isinstance(mount, int)
        or not -1 <= mount < mounts
        or (mount < 0) != (kind in ("stdin", "stdout", "stderr"))
    ):
        raise ValueError("preview 1 descriptor on an unknown mount")
    numbers = [raw.get(name) for name in ("rights", "inheriting", "flags", "offset")]
    if not all(isinstance(value, int) and value >= 0 for value in numbers):
        raise ValueError("malformed preview 1 descriptor")
    if not isinstance(raw.get("path"), str) or not isinstance(raw.get("preopen"), bool):
        raise ValueError("malformed preview 1 descriptor")
    rights, inheriting, flags, offset = (int(value) for value in numbers)  # type: ignore[arg-type]
    return Descriptor(str(kind), mount, None, rights, inheriting, flags, offset, raw["preopen"])


_CALLS: dict[str, tuple[str, Callable[..., int]]] = {
    "fd_advise": ("iIIi", Preview1Host.fd_advise),
    "fd_allocate": ("iII", Preview1Host.fd_allocate),
    "fd_close": ("i", Preview1Host.fd_close),
    "fd_datasync": ("i", Preview1Host.fd_sync),
    "fd_fdstat_get": ("ii", Preview1Host.fd_fdstat_get),
    "fd_fdstat_set_flags": ("ii", Preview1Host.fd_fdstat_set_flags),
    "fd_fdstat_set_rights": ("iII", Preview1Host.fd_fdstat_set_rights),
    "fd_filestat_get": ("ii", Preview1Host.fd_filestat_get),
    "fd_filestat_set_size": ("iI", Preview1Host.fd_filestat_set_size),
    "fd_filestat_set_times": ("iIIi", Preview1Host.fd_filestat_set_times),
    "fd_pread": ("iiiIi", Preview1Host.fd_pread),
    "fd_prestat_get": ("ii", Preview1Host.fd_prestat_get),
    "fd_prestat_dir_name": ("iii", Preview1Host.fd_prestat_dir_name),
    "fd_pwrite": ("iiiIi", Preview1Host.fd_pwrite),
    "fd_read": ("iiii", Preview1Host.fd_read),
    "fd_readdir": ("iiiIi", Preview1Host.fd_readdir),
    "fd_renumber": ("ii", Preview1Host.fd_renumber),
    "fd_seek": ("iIii", Preview1Host.fd_seek),
    "fd_sync": ("i", Preview1Host.fd_sync),
    "fd_tell": ("ii", Preview1Host.fd_tell),
    "fd_write": ("iiii", Preview1Host.fd_write),
    "path_create_directory": ("iii", Preview1Host.path_create_directory),
    "path_filestat_get": ("iiiii", Preview1Host.path_filestat_get),
    "path_filestat_set_times": ("iiiiIIi", Preview1Host.path_filestat_set_times),
    "path_link": ("iiiiiii", Preview1Host.path_link),
    "path_open": ("iiiiiIIii", Preview1Host.path_open),
    "path_readlink": ("iiiiii", Preview1Host.path_readlink),
    "path_remove_directory": ("iii", Preview1Host.path_remove_directory),
    "path_rename": ("iiiiii", Preview1Host.path_rename),
    "path_symlink": ("iiiii", Preview1Host.path_symlink),
    "path_unlink_file": ("iii", Preview1Host.path_unlink_file),
}
"""The shadowed imports: their core parameter letters (`abi.functype`) and handlers."""
