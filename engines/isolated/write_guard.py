"""Holds the workspace limits *during* a run: bytes and entries a guest puts on the host.

The engine process keeps an exact, continuously updated account of the `/workspace`
directory (every regular file's size, every entry) and interrupts the running execution
as soon as the account passes the limits plus a small margin, instead of finding out
after the run. On Linux the account follows inotify events (a write is seen within
microseconds); elsewhere it rescans the directory every few milliseconds while a run is
armed. The per-file bound is held by the kernel (`RLIMIT_FSIZE`, set by the worker).
A WASI host of our own (the components') also asks the guard before every change
(`may_write`), which makes the bound exact there: one write past the limits at most.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import stat
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

BYTES_MARGIN = 1 << 20
"""Bytes past the total limit tolerated before interrupting (one maximum-size file)."""
ENTRIES_MARGIN = 64
POLL_SECONDS = 0.005
"""Rescan interval where inotify is not available."""

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_IGNORED = 0x8000
_IN_ISDIR = 0x40000000
_IN_Q_OVERFLOW = 0x4000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_WATCH_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_EVENT = struct.Struct("iIII")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = (ctypes.c_int,)
        libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        libc.inotify_rm_watch.argtypes = (ctypes.c_int, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None


class WorkspaceAccount:
    """Sizes of the regular files and the entries under `root`, kept exact."""

    def __init__(self, root: Path) -> None:
        self.root = os.fsencode(root)
        self.files: dict[bytes, int] = {}
        """Path below root -> size, for regular files."""
        self.others: set[bytes] = set()
        """Directories and anything else below root (entries too)."""
        self.total_bytes = 0

    @property
    def entries(self) -> int:
        return len(self.files) + len(self.others)

    def forget(self, relative: bytes) -> None:
        """Drop `relative` and everything below it."""
        size = self.files.pop(relative, None)
        if size is not None:
            self.total_bytes -= size
        if relative in self.others:
            self.others.discard(relative)
            prefix = relative + b"/"
            for path in [path for path in self.files if path.startswith(prefix)]:
                self.total_bytes -= self.files.pop(path)
            self.others -= {path for path in self.others if path.startswith(prefix)}

    def observe(self, relative: bytes) -> bool:
        """Re-read one entry's state; True when it is a directory (to be watched)."""
        self.forget_file_only(relative)
        try:
            status = os.lstat(self.root + b"/" + relative)
        except OSError:
            self.forget(relative)
            return False
        if stat.S_ISREG(status.st_mode):
            self.others.discard(relative)
            self.files[relative] = status.st_size
            self.total_bytes += status.st_size
            return False
        self.others.add(relative)
        return stat.S_ISDIR(status.st_mode)

    def forget_file_only(self, relative: bytes) -> None:
        size = self.files.pop(relative, None)
        if size is not None:
            self.total_bytes -= size

    def scan(self, relative: bytes = b"") -> list[bytes]:
        """Account for the subtree at `relative` (b"" = root); its directories, root
        first, for the caller to watch."""
        directories = [relative]
        stack = [relative]
        while stack:
            current = stack.pop()
            host = self.root + (b"/" + current if current else b"")
            try:
                names = os.listdir(host)
            except OSError:
                continue
            for name in names:
                child = current + b"/" + name if current else name
                if self.observe(child):
                    directories.append(child)
                    stack.append(child)
        return directories


class WriteGuard:
    """Interrupts a run whose workspace passes `max_bytes` or `max_entries` (+ margins).

    `on_exceeded(message)` is called at most once per armed run, from the guard's thread.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        max_entries: int,
        on_exceeded: Callable[[str], None],
    ) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._on_exceeded = on_exceeded
        self._account = WorkspaceAccount(root)
        self._lock = threading.Lock()
        self._armed = False
        self._fired = False
        self._libc = _libc()
        self._fd = -1
        self._watches: dict[int, bytes] = {}
        self._closed = threading.Event()
        self._started = False

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self) -> None:
        """Attach to the directory (which exists once the first run materialized it)."""
        self._started = True
        if self._libc is not None:
            fd = int(self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
            if fd >= 0:
                self._fd = fd
        with self._lock:
            self._rescan()
        threading.Thread(target=self._run, name="write-guard", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def arm(self) -> None:
        """Bring the account up to date (the host just rewrote the directory) and watch
        the run that starts now."""
        if not self._started:
            self._start()
        with self._lock:
            self._fired = False
            self._drain()
            self._armed = True
            self._check()

    def may_write(self) -> bool:
        """The write gate of a WASI host of our own, asked before each change: brings the
        account up to date and checks it, so a run stops within one write of its limits
        however fast it writes. False once the armed run has passed them."""
        with self._lock:
            if not self._armed:
                return True
            if self._fd >= 0:  # without inotify the guard's thread rescans
                self._drain()
            self._check()
            return not self._fired

    def disarm(self) -> None:
        with self._lock:
            self._armed = False

    @property
    def total_bytes(self) -> int:
        return self._account.total_bytes

    @property
    def entries(self) -> int:
        return self._account.entries

    # -- accounting ----------------------------------------------------------------------
    def _watch(self, relative: bytes) -> None:
        if self._fd < 0 or self._libc is None:
            return
        path = self._account.root + (b"/" + relative if relative else b"")
        wd = int(self._libc.inotify_add_watch(self._fd, path, _WATCH_MASK))
        if wd >= 0:
            self._watches[wd] = relative

    def _rescan(self) -> None:
        if self._fd >= 0 and self._libc is not None:
            for wd in list(self._watches):
                self._libc.inotify_rm_watch(self._fd, wd)
        self._watches.clear()
        self._account = WorkspaceAccount(Path(os.fsdecode(self._account.root)))
        for directory in self._account.scan():
            self._watch(directory)

    def _drain(self) -> None:
        """Apply every queued event (non-blocking), checking the bounds after each batch:
        a guest that creates entries as fast as they are read never drains the queue."""
        if self._fd < 0:
            self._rescan()
            return
        while not self._fired:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            self._apply(data)
            self._check()

    def _apply(self, data: bytes) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                self._rescan()
                continue
            if mask & _IN_IGNORED:
                self._watches.pop(wd, None)
                continue
            parent = self._watches.get(wd)
            if parent is None or not name:
                continue
            relative = parent + b"/" + name if parent else name
            if mask & (_IN_DELETE | _IN_MOVED_FROM):
                self._account.forget(relative)
                prefix = relative + b"/"
                for stale in [
                    w for w, p in self._watches.items() if p == relative or p.startswith(prefix)
                ]:
                    del self._watches[stale]
            elif mask & (_IN_CREATE | _IN_MOVED_TO) and mask & _IN_ISDIR:
                self._account.forget(relative)
                for directory in self._account.scan(relative):
                    self._watch(directory)
                if relative not in self._account.others:
                    self._account.observe(relative)
            else:
                self._account.observe(relative)

    def _check(self) -> None:
        if not self._armed or self._fired:
            return
        account = self._account
        if account.total_bytes > self.max_bytes + BYTES_MARGIN:
            message = f"more than {self.max_bytes} bytes written"
        elif account.entries > self.max_entries + ENTRIES_MARGIN:
            message = f"more than {self.max_entries} entries created"
        else:
            return
        self._fired = True
        self._on_exceeded(
            f"Workspace limit exceeded during the run: {message}; "
            "the run's file changes were discarded"
        )

    def _run(self) -> None:
        while not self._closed.is_set():
            if self._fd >= 0:
                try:
                    ready, _, _ = select.select([self._fd], [], [], 0.5)
                except (OSError, ValueError):
                    return
                if not ready:
                    continue
            else:
                self._closed.wait(POLL_SECONDS)
                if not self._armed:
                    continue
            with self._lock:
                if self._closed.is_set():
                    return
                self._drain()
                self._check()
