"""The state of one guest's WASI 0.2 host: its resources, mounts, output, clock and wake-up.

Hostile by default: the guest sees only its mounts (confined by `confine.resolve`), an
empty environment, no sockets or name lookup, and its output goes to the session's
capture. A blocking wait (sleep, poll) ends when `wake` is set: the session sets it
together with the epoch when an execution is cancelled or reaches its deadline, so the
guest returns from the host and traps at its next epoch check.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime

from engines.decomposed.wasi.abi import GuestMemory, GuestTrap
from engines.decomposed.wasi.confine import resolve
from engines.decomposed.wasi.errors import HOST_ERRORS, FsError, WasiErrno
from engines.decomposed.wasi.resources import Entry, ResourceTable

OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
"""Every file the guest opens: never through a symlink, never blocking on a FIFO."""
DESCRIPTOR_READ, DESCRIPTOR_WRITE, MUTATE_DIRECTORY = 1, 2, 32
MAX_WAIT_SECONDS = 3600.0
"""A wait longer than this is done in pieces (threading's timeout has a maximum)."""


@dataclass(frozen=True)
class Mount:
    """A host directory the guest sees at `guest_path` (a preopen)."""

    host_dir: Path
    guest_path: str
    writable: bool


def _close_all(descriptors: dict[int, int], roots: list[int]) -> None:
    for descriptor in [*descriptors.values(), *roots]:
        with contextlib.suppress(OSError):
            os.close(descriptor)
    descriptors.clear()
    roots.clear()


class WasiHost:
    """Everything behind one guest's WASI imports (see `engines.decomposed.wasi`)."""

    def __init__(
        self,
        *,
        mounts: Sequence[Mount],
        stdout: Callable[[bytes], None],
        stderr: Callable[[bytes], None],
        argv: Sequence[str] = (),
        wake: threading.Event | None = None,
        write_gate: Callable[[], bool] | None = None,
    ) -> None:
        self.mounts = list(mounts)
        self.stdout, self.stderr = stdout, stderr
        self.argv = list(argv)
        self.wake = wake or threading.Event()
        self.write_gate = write_gate
        """Asked before the guest changes the file system; False stops the run (the
        engine process's workspace guard, `engines.isolated.write_guard`)."""
        self.table = ResourceTable()
        self._descriptors: dict[int, int] = {}
        """Handle -> open host file descriptor (not part of a snapshot)."""
        self._roots: list[int] = []
        self._finalizer = weakref.finalize(self, _close_all, self._descriptors, self._roots)
        for mount in self.mounts:
            try:
                root = os.open(mount.host_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as error:  # as wasmtime's WASI reports a preopen it cannot open
                message = f"cannot open the directory for {mount.guest_path}: {error.strerror}"
                raise wasmtime.WasmtimeError(message) from None
            self._roots.append(root)
        self._clock_offset = 0
        self._clock_last = 0
        self.store: wasmtime.Store | None = None
        self._memory: GuestMemory | None = None

    def attach(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        """Bind the host to the guest's store and the memory its lowerings use."""
        self.store = store
        self._memory = GuestMemory(store, memory)

    @property
    def memory(self) -> GuestMemory:
        if self._memory is None:
            raise GuestTrap("the WASI host is not attached to a guest")
        return self._memory

    def close(self) -> None:
        """Close every host file descriptor now (also done when the host is collected)."""
        self._finalizer()

    # -- clock and waits ------------------------------------------------------------------
    def monotonic(self) -> int:
        """Nanoseconds that never go backwards, also across a restore in another process."""
        now = time.monotonic_ns() + self._clock_offset
        if now < self._clock_last:
            now = self._clock_last
        self._clock_last = now
        return now

    def wait(self, deadlines: list[int | None]) -> list[int]:
        """Block until some of the pollables with these deadlines are ready (None: always
        ready); returns their indices. Wakes early, answering the first, when `wake` is
        set: the interrupted guest traps at its next epoch check."""
        while True:
            now = self.monotonic()
            ready = [i for i, when in enumerate(deadlines) if when is None or when <= now]
            if ready:
                return ready
            if self.wake.is_set():
                return [0]
            soonest = min(when for when in deadlines if when is not None)
            self.wake.wait(min((soonest - now) / 1e9, MAX_WAIT_SECONDS))

    # -- snapshots -----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The host's part of a snapshot (plain JSON)."""
        return {"table": self.table.state(), "clock": self.monotonic()}

    def load(self, state: object) -> None:
        """Take back `state` (after JSON): its handles reopen their files when next used."""
        if not isinstance(state, dict) or set(state) != {"table", "clock"}:
            raise ValueError("malformed WASI host state")
        clock = state["clock"]
        if not isinstance(clock, int) or isinstance(clock, bool) or clock < 0:
            raise ValueError("malformed WASI host clock")
        self.table.load(state["table"])
        for descriptor in self._descriptors.values():
            os.close(descriptor)
        self._descriptors.clear()
        self._clock_offset = max(0, clock - time.monotonic_ns())
        self._clock_last = clock

    # -- resources with host files ---------------------------------------------------------
    def add(self, entry: Entry, descriptor: int | None = None) -> int:
        """A new handle for `entry` (owning `descriptor`, if given)."""
        handle = self.table.add(entry)
        if descriptor is not None:
            self._descriptors[handle] = descriptor
        return handle

    def drop(self, handle: int, kind: str) -> None:
        self.table.drop(handle, kind)
        descriptor = self._descriptors.pop(handle, None)
        if descriptor is not None:
            os.close(descriptor)

    def descriptor_of(self, handle: int, entry: Entry) -> int:
        """The host file descriptor behind a handle (reopened from its path after a
        restore; a file that is gone since makes it a bad descriptor)."""
        descriptor = self._descriptors.get(handle)
        if descriptor is None:
            descriptor = self._reopen(entry)
            self._descriptors[handle] = descriptor
        return descriptor

    def before_change(self) -> None:
        """Called before every write, creation or removal: once the write gate says no,
        the run stops here, within one write of its limits however fast it writes."""
        if self.write_gate is not None and not self.write_gate():
            raise GuestTrap("interrupted: workspace limit exceeded", wasmtime.TrapCode.INTERRUPT)

    def writable(self, entry: Entry) -> bool:
        """Whether the mount an entry lives on may be changed."""
        return self.mounts[entry["preopen"]].writable

    def root(self, index: int) -> int:
        return self._roots[index]

    def _reopen(self, entry: Entry) -> int:
        preopen = entry["preopen"]
        if not 0 <= preopen < len(self._roots):
            raise FsError(WasiErrno.BADF)
        if entry["type"] == "descriptor" and entry["dir"]:
            flags = os.O_RDONLY | os.O_DIRECTORY
        elif entry["type"] == "descriptor":
            read = bool(entry["flags"] & DESCRIPTOR_READ)
            write = bool(entry["flags"] & DESCRIPTOR_WRITE)
            flags = os.O_RDWR if read and write else os.O_WRONLY if write else os.O_RDONLY
        else:
            flags = os.O_RDONLY if entry["type"] == "input-stream" else os.O_WRONLY
        if entry["path"] == "":
            if not flags & os.O_DIRECTORY:
                raise FsError(WasiErrno.BADF)
            return os.dup(self._roots[preopen])
        try:
            found = resolve(self._roots[preopen], [], entry["path"], follow=False)
        except HOST_ERRORS:
            raise FsError(WasiErrno.BADF) from None
        try:
            return os.open(found.name, flags | OPEN_FLAGS, dir_fd=found.parent)
        except OSError:
            raise FsError(WasiErrno.BADF) from None
        finally:
            found.close()
