"""Context memory snapshots of one sandbox (spec 7.6-7.7): restored from the store, and
written behind the executions.

The engine process takes a snapshot after each successful run; the context is then
"dirty" until what changed reaches SQLite (the changed 4 KiB blocks as a delta, now and
then the changed 1 MiB chunks instead), which happens right after the answer
(in turn with the sandbox's requests; at once, too, when its session is evicted or
closed), so writing stays off the execution path and a crash loses at most that run.
"""

from __future__ import annotations

import asyncio
import threading

from engines.isolated import IsolatedSession
from engines.snapshot import PAGE_BYTES, MemorySnapshot
from workbench.backends.local.context_row import ContextRow
from workbench.backends.local.sandbox_state import SandboxState
from workbench.backends.local.settings import LocalResources
from workbench.store.database import BLOCK_BYTES, CHUNK_BYTES, SnapshotLayout

MAX_DELTA_BYTES = 8 << 20
"""Deltas of one context kept before its changed chunks are rewritten instead (which
replaces them): bounds what a restore reads on top of the chunks."""


class SnapshotWriter:
    """The dirty contexts of one sandbox and the timer that writes their snapshots."""

    def __init__(self, state: SandboxState, resources: LocalResources, *, queue: asyncio.Lock):
        self._state = state
        self._store = resources.store
        self._runtimes = resources.runtimes
        self._sessions = resources.sessions
        self._clock = resources.clock
        self._settings = resources.settings
        self._queue = queue
        """The sandbox's request queue: a flush waits its turn like a request."""
        self._dirty: set[str] = set()
        """Contexts whose live state is newer than their stored snapshot."""
        self._writing = threading.Lock()
        """Held while a snapshot is written: a close waits for a write under way (a flush
        thread) instead of closing the store under it."""
        self._flush_timer: asyncio.TimerHandle | None = None

    def restore_point(self, row: ContextRow) -> MemorySnapshot | None:
        """The stored snapshot to start the context's engine from, if it has a usable one."""
        snapshot = row.snapshot
        runtime = self._runtimes[row.binding]
        if snapshot is None or not runtime.spec.snapshots:
            return None
        if snapshot.get("build") != runtime.build_sha256():
            row.snapshot = None  # spec 7.6: a snapshot of another engine build is dropped
            return None
        memory, outdated_chunks = self._store.snapshot_memory(
            self._state.id, row.id, int(snapshot["memoryPages"])
        )
        restored = MemorySnapshot(memory, dict(snapshot["globals"]), dict(snapshot["extra"]))
        restored.dirty_chunks = outdated_chunks  # the next chunk rewrite includes them
        return restored

    def mark_dirty(self, context_id: str) -> None:
        self._dirty.add(context_id)

    def is_dirty(self, context_id: str) -> bool:
        return context_id in self._dirty

    def forget(self, context_id: str) -> None:
        self._dirty.discard(context_id)

    def forget_all(self) -> None:
        self._dirty.clear()

    def schedule_flush(self) -> None:
        """Persist dirty snapshots after the answer (`snapshot_delay_seconds`), so taking
        and writing a snapshot (milliseconds) stays off the execution path."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        loop = asyncio.get_running_loop()
        self._flush_timer = loop.call_later(
            self._settings.snapshot_delay_seconds, lambda: loop.create_task(self.flush())
        )

    def stop_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None

    async def flush(self) -> None:
        """Write the snapshots of contexts that ran since their last snapshot."""
        async with self._queue:
            await asyncio.to_thread(self.flush_now)

    def flush_now(self) -> None:
        for context_id in list(self._dirty):
            session = self._sessions.get((self._state.id, context_id))
            if session is not None:
                self.persist(context_id, session)
            self._dirty.discard(context_id)

    def persist(self, context_id: str, session: IsolatedSession) -> None:
        """Store the context's latest snapshot: the 4 KiB blocks the runs since the last
        store changed, appended as a delta; now and then (or when there is no stored base
        to add to) the 1 MiB chunks that changed instead, which replace the deltas."""
        with self._writing:
            self._persist(context_id, session)

    def _persist(self, context_id: str, session: IsolatedSession) -> None:
        row = self._state.contexts.get(context_id)
        if row is None or context_id not in self._dirty:
            return
        self._dirty.discard(context_id)
        snapshot = session.restore_point
        if snapshot is None:
            return
        runtime = self._runtimes[row.binding]
        build = runtime.build_sha256()
        base = row.snapshot
        delta_bytes = len(snapshot.unstored_blocks) * BLOCK_BYTES
        as_delta = (
            base is not None
            and base.get("build") == build
            and len(snapshot.memory) >= int(base["memoryPages"]) * PAGE_BYTES
            and int(base.get("deltaBytes", 0)) + delta_bytes <= MAX_DELTA_BYTES
        )
        layout = SnapshotLayout.of(snapshot.memory)
        previous = row.snapshot
        try:
            with self._store.transaction() as tx:
                if as_delta:
                    assert base is not None
                    deltas = int(base.get("deltaBytes", 0)) + tx.add_snapshot_delta(
                        self._state.id, row.id, snapshot.memory, snapshot.unstored_blocks
                    )
                else:
                    tx.put_snapshot(self._state.id, row.id, snapshot.memory, snapshot.dirty_chunks)
                    deltas = 0
                row.snapshot = {
                    "build": build,
                    "memoryPages": layout.memory_pages,
                    "pages": layout.nonzero_pages,
                    "bytes": layout.nonzero_pages * PAGE_BYTES,
                    "storedBytes": layout.stored_chunks * CHUNK_BYTES,  # as spec 7.7 counts
                    "deltaBytes": deltas,
                    "takenAt": self._clock.now_ms(),
                    "stale": False,
                    "globals": snapshot.globals,
                    "extra": snapshot.extra,
                }
                tx.put_context(self._state.id, row.to_stored())
        except BaseException:
            row.snapshot = previous  # memory follows the commit
            raise
        # Committed: what is stored now covers these (a failed commit keeps them).
        snapshot.unstored_blocks.clear()
        if not as_delta:
            snapshot.dirty_chunks.clear()
