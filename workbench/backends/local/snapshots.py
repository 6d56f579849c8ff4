"""Context memory snapshots of one sandbox (spec 7.6-7.7): restored from the store, and
stored with the run that made them.

After each successful run the engine process takes a snapshot of what the run changed,
and the run's transaction stores it with the context row and the history entry: the
4 KiB blocks the run changed enter the context's map of content-addressed blocks (for a
new snapshot, the blocks that differ from the engine's image, which a restore writes into
a fresh instance, as the reference restores its changed pages). So an answered run is
a stored one: the next request sees its snapshot and a killed daemon loses no
acknowledged state, as with the reference, which snapshots before it answers.
"""

from __future__ import annotations

import time

from engines.process import GuestSession
from engines.snapshot import PAGE_BYTES, SnapshotDelta
from workbench.backends.local.context_row import ContextRow
from workbench.backends.local.sandbox_state import SandboxState
from workbench.backends.local.settings import LocalResources
from workbench.store.database import BLOCK_BYTES, CHUNK_BYTES, Transaction


class TakenSnapshot:
    """A snapshot the engine process took after a run, on its way into the run's
    transaction: the blocks changed since the last one stored; `elapsed_ms` counts taking
    it and adding it to the transaction."""

    def __init__(self, session: GuestSession, delta: SnapshotDelta, elapsed_ms: float):
        self.session = session
        self.delta = delta
        self.elapsed_ms = elapsed_ms
        self.chunks_written: int | None = None
        """1 MiB chunks the reference would write for it (set once stored)."""

    def committed(self) -> None:
        """The store holds these blocks now; a failed commit keeps them for the next
        snapshot, which adds its own."""
        if self.session.unstored is self.delta:
            self.session.unstored = None


class ContextSnapshots:
    """Restore points from the store, and snapshots into a run's transaction."""

    def __init__(self, state: SandboxState, resources: LocalResources):
        self._state = state
        self._store = resources.store
        self._runtimes = resources.runtimes
        self._clock = resources.clock

    def restore_point(self, row: ContextRow, build: str) -> SnapshotDelta | None:
        """The stored snapshot to start the context's engine from, if it has one usable by
        `build` (the identity of the engine build that restores it): its blocks that differ
        from the engine's image."""
        snapshot = row.snapshot
        runtime = self._runtimes[row.binding]
        if snapshot is None or not runtime.language_engine.snapshots:
            return None
        if snapshot.get("build") != build:
            row.snapshot = None  # spec 7.6: a snapshot of another engine build is dropped
            return None
        blocks = self._store.snapshot_blocks(self._state.id, row.id)
        return SnapshotDelta(
            int(snapshot["memoryPages"]) * PAGE_BYTES,
            {index: memoryview(block) for index, block in blocks.items()},
            dict(snapshot["globals"]),
            dict(snapshot["extra"]),
            from_image=True,
        )

    @staticmethod
    def take(session: GuestSession) -> TakenSnapshot | None:
        """The snapshot of the state the last run left (spec 7.7), or None when the
        engine process could not give one (it is gone)."""
        started = time.perf_counter()
        session.take_snapshot()
        session.collect_snapshot()
        delta = session.unstored
        if delta is None or not session.alive:
            return None
        return TakenSnapshot(session, delta, (time.perf_counter() - started) * 1000)

    def store(self, tx: Transaction, row: ContextRow, taken: TakenSnapshot) -> None:
        """Add the snapshot to `tx` and make it the row's record (the caller restores the
        record if the commit fails): the 4 KiB blocks changed since the last one stored,
        or for a new snapshot those that differ from the engine's image."""
        started = time.perf_counter()
        delta = taken.delta
        layout = tx.put_snapshot(self._state.id, row.id, delta)
        row.snapshot = {
            "build": taken.session.build_identity,  # the build it runs, not the newest
            "memoryPages": layout.memory_pages,
            "pages": layout.stored_pages,
            "bytes": layout.stored_pages * PAGE_BYTES,
            "storedBytes": layout.stored_chunks * CHUNK_BYTES,  # as spec 7.7 counts
            "takenAt": self._clock.now_ms(),
            "stale": False,
            "globals": delta.globals,
            "extra": delta.extra,
            "run": row.executions,  # the run and cwd this memory is of (for checkpoints)
            "cwd": row.cwd,
        }
        # As spec 7.7 counts what a snapshot writes: a first one every chunk it holds, a
        # later one every chunk holding a changed block.
        taken.chunks_written = (
            layout.stored_chunks
            if delta.from_image
            else len({index * BLOCK_BYTES // CHUNK_BYTES for index in delta.blocks})
        )
        taken.elapsed_ms += (time.perf_counter() - started) * 1000
