"""The state of one guest's WASI 0.2 host: its resources, mounts, output, clock and wake-up.

Hostile by default: the guest sees only its mounts (`VirtualFS` trees in memory, never a
host file), an empty environment, no sockets or name lookup, and its output goes to the
session's capture. A blocking wait (sleep, poll) ends when `wake` is set: the session sets
it together with the epoch when an execution is cancelled or reaches its deadline, so the
guest returns from the host and traps at its next epoch check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import wasmtime

from engines.components.wasi.abi import GuestTrap, MemoryUser
from engines.components.wasi.errors import FsError, WasiErrno
from engines.components.wasi.resources import Entry, ResourceTable
from engines.vfs import Mount, Node, VfsError, VirtualFS

DESCRIPTOR_READ, DESCRIPTOR_WRITE, MUTATE_DIRECTORY = 1, 2, 32
MAX_WAIT_SECONDS = 3600.0
"""A wait longer than this is done in pieces (threading's timeout has a maximum)."""
DETACHED = "\0"
"""The path a snapshot records for a file that was removed while open (never found)."""
MAX_OPEN_NODES = 1024
"""Descriptors and file streams a guest may hold at once (`quota` beyond: WASI has no
EMFILE, and `insufficient-memory` would be Python's MemoryError): each costs host memory
and a path in every snapshot."""
MAX_RESOURCES = 65_536
"""Handles of any kind (pollables, errors, streams) a guest may hold at once."""
MAX_LISTINGS = 16
"""Directory listings a guest may hold at once (each copies up to 4,096 names; `quota`
beyond)."""


class WasiHost(MemoryUser):
    """Everything behind one guest's WASI imports (see `engines.components.wasi`)."""

    def __init__(
        self,
        *,
        mounts: Sequence[Mount],
        stdout: Callable[[bytes], None],
        stderr: Callable[[bytes], None],
        argv: Sequence[str] = (),
        wake: threading.Event | None = None,
    ) -> None:
        self.mounts = list(mounts)
        self.stdout, self.stderr = stdout, stderr
        self.argv = list(argv)
        self.wake = wake or threading.Event()
        self.table = ResourceTable()
        self._nodes: dict[int, Node] = {}
        """Handle -> the node it has open (not part of a snapshot: found again by path)."""
        self._clock_offset = 0
        self._clock_last = 0
        self.store: wasmtime.Store | None = None

    def attach(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        """Bind the host to the guest's store and the memory its lowerings use."""
        self.store = store
        super().attach(store, memory)

    def close(self) -> None:
        """Close every handle on a node (a file unlinked while open frees its bytes)."""
        for handle, node in list(self._nodes.items()):
            self.fs(self.table.entries[handle]).release(node)
        self._nodes.clear()

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
        """The host's part of a snapshot (plain JSON; open nodes by their path now)."""
        for handle, node in self._nodes.items():
            entry = self.table.entries[handle]
            path = self.fs(entry).path_of(node)
            entry["path"] = DETACHED if path is None else path
        return {"table": self.table.state(), "clock": self.monotonic()}

    def load(self, state: object) -> None:
        """Take back `state` (after JSON): each handle finds its node again by the path it
        had when the snapshot was taken (now, before the guest runs); one whose file is
        gone is a bad descriptor from then on."""
        if not isinstance(state, dict) or set(state) != {"table", "clock"}:
            raise ValueError("malformed WASI host state")
        clock = state["clock"]
        if not isinstance(clock, int) or isinstance(clock, bool) or clock < 0:
            raise ValueError("malformed WASI host clock")
        self.close()
        self.table.load(state["table"])
        self._clock_offset = max(0, clock - time.monotonic_ns())
        self._clock_last = clock
        for handle, entry in self.table.entries.items():
            if entry.get("preopen", -1) >= 0 and "path" in entry:
                self._find_again(handle, entry)

    # -- resources on nodes ---------------------------------------------------------------
    def add(self, entry: Entry, node: Node | None = None) -> int:
        """A new handle for `entry` (holding `node` open, if given); a guest holding
        `MAX_RESOURCES` handles traps instead."""
        if len(self.table.entries) >= MAX_RESOURCES:
            raise GuestTrap("the guest holds too many host resources")
        handle = self.table.add(entry)
        if node is not None:
            self.fs(entry).retain(node)
            self._nodes[handle] = node
        return handle

    def drop(self, handle: int, kind: str) -> None:
        entry = self.table.drop(handle, kind)
        node = self._nodes.pop(handle, None)
        if node is not None:
            self.fs(entry).release(node)

    def fs(self, entry: Entry) -> VirtualFS:
        """The tree an entry's node lives in (EBADF for an unknown mount)."""
        preopen = entry["preopen"]
        if not 0 <= preopen < len(self.mounts):
            raise FsError(WasiErrno.BADF)
        return self.mounts[preopen].fs

    def node_of(self, handle: int, entry: Entry) -> Node:
        """The node behind a handle (EBADF for one whose file was gone at a restore)."""
        node = self._nodes.get(handle)
        if node is None:
            raise FsError(WasiErrno.BADF)
        return node

    def _find_again(self, handle: int, entry: Entry) -> None:
        try:
            fs = self.fs(entry)
            node = fs.root if entry["path"] == "" else fs.lookup(fs.root, entry["path"])
        except (VfsError, FsError):
            entry["path"] = DETACHED
            return
        fs.retain(node)
        self._nodes[handle] = node

    def check_room(self, kind: str = "descriptor") -> None:
        """Refuse a new open descriptor or stream (`quota`) past the caps."""
        if kind == "directory-entry-stream":
            listings = sum(entry["type"] == kind for entry in self.table.entries.values())
            if listings >= MAX_LISTINGS:
                raise FsError(WasiErrno.QUOTA)
        elif len(self._nodes) >= MAX_OPEN_NODES:
            raise FsError(WasiErrno.QUOTA)

    def writable(self, entry: Entry) -> bool:
        """Whether the mount an entry lives on may be changed."""
        return self.fs(entry).writable
