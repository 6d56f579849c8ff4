"""A run's snapshot is stored as one row of the blocks it changed, folded into the
content-addressed block store later (issue 22: the run's transaction no longer hashes and
indexes every block). Every reader and every operation on a context's snapshot sees the
changes not yet folded."""

from __future__ import annotations

import random
import signal
import sqlite3
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import workbench.store.database as database
from engines.snapshot import SnapshotDelta
from workbench.store import Store
from workbench.store.database import BLOCK_BYTES, CHUNK_BYTES, PAGE_BYTES

MEMORY = 4 * PAGE_BYTES
"""Four 64 KiB pages: 64 blocks."""


def block(byte: int) -> memoryview:
    return memoryview(bytes([byte]) * BLOCK_BYTES)


def change(*blocks: tuple[int, int], length: int = MEMORY) -> SnapshotDelta:
    """A run's snapshot: these (index, byte) blocks changed."""
    return SnapshotDelta(length, {index: block(byte) for index, byte in blocks}, {})


def counts(path: Path) -> tuple[int, int]:
    """Blocks in the block store, rows of changes not yet folded."""
    with sqlite3.connect(path) as other:
        [(stored,)] = other.execute("SELECT count(*) FROM snapshot_blocks").fetchall()
        [(changes,)] = other.execute("SELECT count(*) FROM snapshot_changes").fetchall()
    other.close()
    return int(stored), int(changes)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A store whose context `c` has a first snapshot (block 0); closed after the test."""
    store = Store(tmp_path / "db.sqlite3")
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", SnapshotDelta(MEMORY, {0: block(1)}, {}, from_image=True))
    yield store
    store.close()


def test_a_run_s_blocks_are_one_row_that_every_reader_sees(tmp_path: Path, store: Store) -> None:
    with store.transaction() as tx:
        layout = tx.put_snapshot("s", "c", change((1, 2), (20, 3)))
    assert counts(tmp_path / "db.sqlite3") == (1, 1)  # block 1 stored, one row of changes
    # pages 0 and 1 hold stored or changed blocks, of the memory's four
    assert (layout.memory_pages, layout.stored_pages, layout.stored_chunks) == (4, 2, 1)
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((1, 4), (2, 5)))  # the newest block 1 wins
    assert store.snapshot_blocks("s", "c") == {
        0: block(1),
        1: block(4),
        2: block(5),
        20: block(3),
    }


def test_changes_are_folded_when_the_store_is_quiet(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folded once no write came for a while: the same blocks, from the block store, with
    one stored copy of a block two entries hold; the changes' rows are gone."""
    monkeypatch.setattr(database, "FOLD_QUIET_S", 0.05)
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((1, 2), (2, 2)))
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((2, 3), (3, 1)))
    before = store.snapshot_blocks("s", "c")
    deadline = time.monotonic() + 10
    while counts(tmp_path / "db.sqlite3")[1] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert counts(tmp_path / "db.sqlite3") == (3, 0)  # blocks 1, 2 and 3, once each
    assert store.snapshot_blocks("s", "c") == before
    assert before == {0: block(1), 1: block(2), 2: block(3), 3: block(1)}


def test_a_store_that_is_never_quiet_folds_past_the_bound(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes stay bounded while runs leave no quiet moment: the transaction that takes a
    context's changes past `FOLD_BYTES` folds them."""
    monkeypatch.setattr(database, "FOLD_BYTES", 3 * BLOCK_BYTES)
    monkeypatch.setattr(database, "FOLD_QUIET_S", 60.0)
    for byte in (2, 3):
        with store.transaction() as tx:
            tx.put_snapshot("s", "c", change((byte, byte)))
    assert counts(tmp_path / "db.sqlite3") == (1, 2)
    with store.transaction() as tx:
        layout = tx.put_snapshot("s", "c", change((4, 4), (5, 5)))  # 4 blocks now
    assert counts(tmp_path / "db.sqlite3") == (5, 0)
    assert layout.stored_pages == 1
    assert set(store.snapshot_blocks("s", "c")) == {0, 2, 3, 4, 5}


def test_checkpoints_copies_and_deletes_see_the_changes(tmp_path: Path, store: Store) -> None:
    """A checkpoint and a copy take the context's changes along; restoring a checkpoint
    and deleting the context drop them (and free every block)."""
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((1, 2)))
        tx.save_checkpoint("s", "c", "one", 1, {"executions": 1})
        tx.copy_context_state("s", "c", "copy")
        tx.put_snapshot("s", "c", change((1, 9), (2, 9)))
    assert store.snapshot_blocks("s", "copy") == {0: block(1), 1: block(2)}
    with store.transaction() as tx:
        assert tx.restore_checkpoint("s", "c", "one")
    assert store.snapshot_blocks("s", "c") == {0: block(1), 1: block(2)}
    assert counts(tmp_path / "db.sqlite3") == (2, 0)  # block 9 was never stored
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((3, 7)))
        tx.put_snapshot("s", "copy", change((3, 8)))
    with store.transaction() as tx:
        tx.delete_context("s", "c")
        tx.delete_context("s", "copy")
    assert counts(tmp_path / "db.sqlite3") == (0, 0)


def test_a_new_snapshot_replaces_the_changes(tmp_path: Path, store: Store) -> None:
    """A snapshot `from_image` (a context that could not restore its last one) is all
    there is of the context's memory: changes from before it are dropped."""
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((1, 2)))
        tx.put_snapshot("s", "c", SnapshotDelta(MEMORY, {5: block(5)}, {}, from_image=True))
    assert store.snapshot_blocks("s", "c") == {5: block(5)}
    assert counts(tmp_path / "db.sqlite3") == (1, 0)


def test_changes_outlive_the_process_and_are_folded_by_the_next(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committed changes are the snapshot: closing the store (or killing its process)
    keeps them, and the next owner reads them and folds them once quiet."""
    monkeypatch.setattr(database, "FOLD_QUIET_S", 60.0)
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((1, 2)))
    store.close()
    assert counts(tmp_path / "db.sqlite3") == (1, 1)
    monkeypatch.setattr(database, "FOLD_QUIET_S", 0.05)
    reopened = Store(tmp_path / "db.sqlite3")
    try:
        assert reopened.snapshot_blocks("s", "c") == {0: block(1), 1: block(2)}
        deadline = time.monotonic() + 10
        while counts(tmp_path / "db.sqlite3")[1] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert counts(tmp_path / "db.sqlite3") == (2, 0)
    finally:
        reopened.close()


def test_a_change_past_the_end_of_memory_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="not 4 KiB of memory"), store.transaction() as tx:
        tx.put_snapshot("s", "c", change((64, 1)))
    assert store.snapshot_blocks("s", "c") == {0: block(1)}


def test_a_fold_after_memory_was_shorter_keeps_nothing_past_that(
    tmp_path: Path, store: Store
) -> None:
    """Rows in which memory shrank and grew again fold to what readers saw: the entries
    past the shorter length are the image's (found by an attack on this change)."""
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", SnapshotDelta(MEMORY, {40: block(4)}, {}, from_image=True))
        tx.put_snapshot("s", "c", change(length=2 * PAGE_BYTES))
        tx.put_snapshot("s", "c", change((1, 2)))
    before = store.snapshot_blocks("s", "c")
    store.fold_changes()
    assert store.snapshot_blocks("s", "c") == before == {1: block(2)}
    assert counts(tmp_path / "db.sqlite3") == (1, 0)


class _SlowToWake:
    """The store's lock, taken by one thread only 0.12 s after it asks (outside a hold
    of its own): that thread as a loaded machine schedules it, late."""

    def __init__(self, lock: Any, thread: int) -> None:
        self._lock, self._thread = lock, thread
        self._depth = threading.local()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        depth = getattr(self._depth, "value", 0)
        if threading.get_ident() == self._thread and depth == 0:
            time.sleep(0.12)
        taken = bool(self._lock.acquire(blocking, timeout))
        self._depth.value = depth + taken
        return taken

    def release(self) -> None:
        self._lock.release()
        self._depth.value -= 1

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


def test_a_request_waits_for_one_fold_at_most(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder lets a request that waits for the store go first: it starts no fold
    while one waits (found by an attack: the lock is not fair, so a request waited through
    dozens of folds; then in a loaded run of the suite, 5.5 s: the folder gave way once,
    and a request not yet scheduled by then waited through every other fold)."""
    folding = threading.Event()
    folds: list[str] = []
    fold = database.Transaction.fold_changes

    def slow_fold(transaction: database.Transaction, sandbox_id: str, context_id: str) -> Any:
        folds.append(context_id)
        folding.set()
        time.sleep(0.05)
        return fold(transaction, sandbox_id, context_id)

    monkeypatch.setattr(database.Transaction, "fold_changes", slow_fold)
    monkeypatch.setattr(database, "FOLD_QUIET_S", 0.001)
    with store.transaction() as tx:
        for context in range(30):  # a second and a half of folding
            tx.put_snapshot("s", f"c{context}", change((1, context)))
    assert folding.wait(10)
    monkeypatch.setattr(store, "_lock", _SlowToWake(store._lock, threading.get_ident()))
    folded_before = len(folds)
    assert store.snapshot_blocks("s", "c0") == {1: block(0)}
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((2, 2)))
    # None started while a request waited (one may start between the two requests).
    assert len(folds) - folded_before <= 1, folds


class _Interrupted(Exception):
    pass


def test_an_interrupt_while_a_request_takes_the_lock_leaves_it_free(
    tmp_path: Path, store: Store
) -> None:
    """A KeyboardInterrupt (here, another exception from a signal handler) may come
    between any two steps of a request taking the store's lock: it never leaves the lock
    held (a later `close` hung on the folder) nor the request counted as waiting (the
    folder would never fold again). A bare `acquire` before its `try` leaked it within
    50 interrupts."""
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", change((1, 1)))

    armed = False

    def interrupt(signum: int, frame: object) -> None:
        # Raises once per arming: a timer that fired as it was disarmed may be handled
        # at the next `setitimer`, leaving the timer armed there to fire after the `try`.
        nonlocal armed
        if armed:
            armed = False
            raise _Interrupted

    chosen = random.Random(7)
    timeout_timer = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, if armed
    previous = signal.signal(signal.SIGALRM, interrupt)
    interrupts = 0
    try:
        deadline = time.monotonic() + 2
        while interrupts < 2000 and time.monotonic() < deadline:
            interrupted = False
            try:
                armed = True
                signal.setitimer(signal.ITIMER_REAL, chosen.uniform(0.000005, 0.0002))
                store.sandbox("s")
                signal.setitimer(signal.ITIMER_REAL, 0)
                armed = False
            except _Interrupted:
                interrupted = True
            if interrupted:  # looked at once the interrupt's traceback is gone
                interrupts += 1
                owned = store._lock._is_owned()  # type: ignore[attr-defined]
                while store._lock._is_owned():  # type: ignore[attr-defined]
                    store._lock.release()  # or closing the store would hang
                assert not owned, f"the lock kept after {interrupts} interrupts"
                assert store._waiting == 0, f"counted as waiting after {interrupts}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if timeout_timer[0]:
            signal.setitimer(signal.ITIMER_REAL, *timeout_timer)
    assert interrupts > 100


def test_closing_while_a_write_starts_the_folder_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store closed by one thread while a write on another is starting the folder
    closes cleanly (found in the suite: `close` joined the thread between its creation
    and its start, and raised "cannot join thread before it is started")."""
    store = Store(tmp_path / "db.sqlite3")
    starting = threading.Event()
    start = threading.Thread.start

    def slow_start(thread: threading.Thread) -> None:
        if thread.name == "store-folder":
            starting.set()
            time.sleep(0.3)  # `close` runs in this gap
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)

    def write() -> None:
        with store.transaction() as tx:
            tx.put_snapshot("s", "c", SnapshotDelta(MEMORY, {0: block(1)}, {}, from_image=True))

    writer = threading.Thread(target=write)
    start(writer)
    assert starting.wait(10)
    store.close()  # raised RuntimeError
    writer.join(10)
    assert not writer.is_alive()


def test_a_folder_thread_that_cannot_start_fails_neither_the_write_nor_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of threads, the write that would start the folder stands (it committed), and
    `close` still closes (found by a review: the write raised, and `close` joined the
    thread that never started)."""
    store = Store(tmp_path / "db.sqlite3")
    start = threading.Thread.start

    def failing_start(thread: threading.Thread) -> None:
        if thread.name == "store-folder":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", failing_start)
    with store.transaction() as tx:
        tx.put_snapshot("s", "c", SnapshotDelta(MEMORY, {0: block(1)}, {}, from_image=True))
    monkeypatch.undo()
    assert store.snapshot_blocks("s", "c") == {0: block(1)}
    store.close()


def test_a_layout_counts_the_pages_and_chunks_that_hold_a_stored_block() -> None:
    """Spec 7.7's units, from a block map (0: the image's block): checked against a count
    block by block, for maps of every shape (a chunk cut short by the end of memory, a
    map that ends inside a page, blocks at both ends)."""
    generator = random.Random(7)
    for _ in range(300):
        count = generator.randint(1, 4000)
        block_map = array("I", bytes(4 * count))
        for index in generator.sample(range(count), generator.randint(0, min(count, 600))):
            block_map[index] = generator.randint(1, 2**32 - 1)
        if generator.random() < 0.3:
            block_map[0] = block_map[-1] = 1
        per_page, per_chunk = PAGE_BYTES // BLOCK_BYTES, CHUNK_BYTES // BLOCK_BYTES
        held = [index for index, block_id in enumerate(block_map) if block_id]
        layout = database.SnapshotLayout.of_map(block_map)
        assert (layout.memory_pages, layout.stored_pages, layout.stored_chunks) == (
            count * BLOCK_BYTES // PAGE_BYTES,
            len({index // per_page for index in held}),
            len({index // per_chunk for index in held}),
        )
