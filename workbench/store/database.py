"""The local backend's SQLite database: sandboxes, workspace files, contexts, snapshots
and execution history.

Every acknowledged change is one transaction (`Store.transaction()`), so killing the
process at any moment leaves either the state before or after a change, never half of
it. WAL journaling with `synchronous=NORMAL` is durable against a process kill (the
case we test); a power loss may drop the last commits, never corrupt the database.
One process writes it: the data dir's owner (`workbench.backends.owner`), so what it
caches in memory is never stale; others only read (shell completion).

The database and its -wal/-shm files are created 0600 whatever the umask (they hold env
vars and history); execution history keeps the newest `history_limit` entries per context.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import sys
import threading
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from engines.result import well_formed
from engines.snapshot import SnapshotDelta
from workbench.paths import private_directory, private_file

SCHEMA_VERSION = 5
"""3 stores snapshots as content-addressed 4 KiB blocks that differ from the engine's
image (`snapshot_blocks`, shared by every context, and one `snapshot_maps` row per
context) instead of per-context 1 MiB chunks and deltas; a version-1 or version-2 store
is converted in place. 4 adds `checkpoints`, 5 `snapshot_changes` (an older store gains
the empty tables). Older workbenches refuse a newer store: they would restore a context
without its changes."""
DEFAULT_HISTORY_LIMIT = 1000
"""Execution history entries kept per context."""
CHUNK_BYTES = 1 << 20
PAGE_BYTES = 65536
BLOCK_BYTES = 4096

SCHEMA = """
CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    last_used INTEGER NOT NULL,
    env_vars TEXT NOT NULL,
    expires_at INTEGER
);
CREATE TABLE IF NOT EXISTS files (
    sandbox_id TEXT NOT NULL,
    path TEXT NOT NULL,
    data BLOB,                  -- NULL: a directory (so empty directories persist)
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS contexts (
    sandbox_id TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    value TEXT NOT NULL,        -- JSON: binding, language, engine, cwd, envVars, lastUsed, ...
    PRIMARY KEY (sandbox_id, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshot_blocks (
    id INTEGER PRIMARY KEY,     -- from 1; 0 in a map: the engine's image there, not stored
    hash BLOB NOT NULL UNIQUE,  -- BLAKE2b-256 of the block's 4 KiB
    refs INTEGER NOT NULL,      -- entries of snapshot maps naming it
    data BLOB NOT NULL          -- the 4 KiB
);
CREATE TABLE IF NOT EXISTS snapshot_maps (
    sandbox_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    blocks BLOB NOT NULL,       -- per 4 KiB of memory, its block id (uint32, little-endian)
    PRIMARY KEY (sandbox_id, context_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshot_changes (
    seq INTEGER PRIMARY KEY,    -- the order they were stored in
    sandbox_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    length INTEGER NOT NULL,    -- the memory's bytes
    blocks BLOB NOT NULL,       -- the indexes of the blocks it changed (uint32, little-endian)
    data BLOB NOT NULL          -- those blocks, 4 KiB each, in that order
);
CREATE INDEX IF NOT EXISTS snapshot_changes_of_context
    ON snapshot_changes (sandbox_id, context_id);
CREATE TABLE IF NOT EXISTS checkpoints (
    sandbox_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    value TEXT NOT NULL,        -- JSON: the context's snapshot record, executions and cwd
    blocks BLOB NOT NULL,       -- the context's snapshot map when saved (its blocks' refs count it)
    PRIMARY KEY (sandbox_id, context_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history (
    sandbox_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    code TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    result TEXT,                -- ExecutionResult JSON
    PRIMARY KEY (sandbox_id, context_id, seq)
) WITHOUT ROWID;
"""


CONTEXT_TABLES = ("contexts", "history", "checkpoints", "snapshot_changes")
SANDBOX_TABLES = ("sandboxes", "files", *CONTEXT_TABLES)
"""Tables whose rows a deleted sandbox or context takes along (its snapshot map goes
through `Transaction.drop_snapshot`, which releases the blocks it names)."""
DATABASE_PAGE_BYTES = 16384
WAL_CHECKPOINT_PAGES = 256
WAL_KEPT_BYTES = 4 << 20
"""The write-ahead log is checkpointed every 4 MiB and cut back to 4 MiB after a large
transaction (a first snapshot writes tens of MiB through it)."""
FOLD_BYTES = 4 << 20
"""A context's changes not yet in the block store are folded into it in the transaction
that takes them past this (so they stay bounded while runs leave no quiet moment)..."""
FOLD_QUIET_S = 0.5
"""...and by a background thread once the store has had no other write for this long."""
LOOKUP_BATCH = 500
"""Hashes or ids in one `IN (...)` (SQLite allows 999 parameters in older builds)."""
_CHANGED = 0xFFFFFFFF
"""A map entry whose block is in a change not yet folded (for its layout only)."""


@dataclass(frozen=True)
class SnapshotLayout:
    """What a snapshot stores, in spec 7.7's units (`SnapshotInfo` fields): its memory's
    64 KiB pages, the pages holding a stored block, and the 1 MiB chunks holding those."""

    memory_pages: int
    stored_pages: int
    stored_chunks: int

    @classmethod
    def of_map(cls, block_map: array[int]) -> SnapshotLayout:
        """The layout of a block map (id 0: the image's block, not stored). Every run's
        snapshot asks for it: a page's entries are compared whole, in C (0.18-0.23 -> 0.06 ms
        for 40 MiB of memory)."""
        entries = _map_bytes(block_map)
        width = 4 * (PAGE_BYTES // BLOCK_BYTES)  # bytes of map per 64 KiB page
        entries += bytes(-len(entries) % width)  # a part of a page: zeros are no blocks
        empty = bytes(width)
        pages = [entries[start : start + width] != empty for start in range(0, len(entries), width)]
        per_chunk = CHUNK_BYTES // PAGE_BYTES
        return cls(
            len(block_map) * BLOCK_BYTES // PAGE_BYTES,
            sum(pages),
            sum(any(pages[start : start + per_chunk]) for start in range(0, len(pages), per_chunk)),
        )


@dataclass
class StoredSandbox:
    id: str
    created_at: int
    last_used: int
    env_vars: dict[str, str]
    expires_at: int | None


@dataclass
class StoredContext:
    id: str
    created_at: int
    value: dict[str, Any]


@dataclass(frozen=True)
class StoredCheckpoint:
    name: str
    created_at: int
    value: dict[str, Any]
    """The context's snapshot record, executions and cwd when it was saved."""
    bytes: int
    """Memory held apart from the engine's image (its stored 4 KiB blocks)."""


class Transaction:
    """Writes of one change; committed together when the `with` block ends."""

    def __init__(self, connection: sqlite3.Connection, history_limit: int) -> None:
        self._db = connection
        self._history_limit = history_limit
        self.reclaim = False
        """Snapshots were dropped: the file gives back the pages they freed after commit."""

    def put_sandbox(self, sandbox: StoredSandbox) -> None:
        self._db.execute(
            "INSERT INTO sandboxes (id, created_at, last_used, env_vars, expires_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET last_used = excluded.last_used,"
            " env_vars = excluded.env_vars, expires_at = excluded.expires_at",
            (
                sandbox.id,
                sandbox.created_at,
                sandbox.last_used,
                json.dumps(sandbox.env_vars),
                sandbox.expires_at,
            ),
        )

    def delete_sandbox(self, sandbox_id: str) -> None:
        for (context_id,) in self._db.execute(
            "SELECT context_id FROM snapshot_maps WHERE sandbox_id = ? UNION "
            "SELECT context_id FROM checkpoints WHERE sandbox_id = ?",
            (sandbox_id, sandbox_id),
        ).fetchall():
            self.drop_snapshot(sandbox_id, context_id)
            self._drop_checkpoints(sandbox_id, context_id)
        for table in SANDBOX_TABLES:
            column = "id" if table == "sandboxes" else "sandbox_id"
            self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (sandbox_id,))

    def put_file(self, sandbox_id: str, path: str, data: bytes, updated_at: int) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO files (sandbox_id, path, data, updated_at) VALUES (?, ?, ?, ?)",
            (sandbox_id, path, data, updated_at),
        )

    def put_directory(self, sandbox_id: str, path: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO files (sandbox_id, path, data, updated_at) "
            "VALUES (?, ?, NULL, 0)",
            (sandbox_id, path),
        )

    def delete_path(self, sandbox_id: str, path: str) -> None:
        self._db.execute("DELETE FROM files WHERE sandbox_id = ? AND path = ?", (sandbox_id, path))

    def put_context(self, sandbox_id: str, context: StoredContext) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO contexts (sandbox_id, id, created_at, value) "
            "VALUES (?, ?, ?, ?)",
            (sandbox_id, context.id, context.created_at, json.dumps(context.value)),
        )

    def delete_context(self, sandbox_id: str, context_id: str) -> None:
        self.drop_snapshot(sandbox_id, context_id)
        self._drop_checkpoints(sandbox_id, context_id)
        for table in CONTEXT_TABLES:
            column = "id" if table == "contexts" else "context_id"
            self._db.execute(
                f"DELETE FROM {table} WHERE sandbox_id = ? AND {column} = ?",
                (sandbox_id, context_id),
            )

    def put_snapshot(
        self,
        sandbox_id: str,
        context_id: str,
        snapshot: SnapshotDelta,
    ) -> SnapshotLayout:
        """Store a snapshot of linear memory. A snapshot `from_image` replaces the
        context's map of content-addressed 4 KiB blocks (a block it does not give is what
        a fresh instance maps there, the engine's image, and not stored). Another one is
        the blocks a run changed: stored as one row of changes, which is a fraction of the
        work of adding each block to the block store, and folded into the map later (when
        the store is quiet, or here once the context's changes pass `FOLD_BYTES`). The
        reference stores whole 1 MiB chunks per context (spec 7.7); `SnapshotLayout`
        reports what is stored in its terms."""
        count = snapshot.length // BLOCK_BYTES
        for index, block in snapshot.blocks.items():
            if len(block) != BLOCK_BYTES or not 0 <= index < count:
                raise ValueError(f"snapshot block {index} is not 4 KiB of memory")
        key = (sandbox_id, context_id)
        if snapshot.from_image:
            self._discard_changes(sandbox_id, context_id)
            return SnapshotLayout.of_map(self._put_blocks(sandbox_id, context_id, snapshot))
        self._db.execute(
            "INSERT INTO snapshot_changes (sandbox_id, context_id, length, blocks, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                *key,
                snapshot.length,
                _map_bytes(array("I", snapshot.blocks)),
                b"".join(snapshot.blocks.values()),
            ),
        )
        [(pending,)] = self._db.execute(
            "SELECT total(length(data)) FROM snapshot_changes "
            "WHERE sandbox_id = ? AND context_id = ?",
            key,
        ).fetchall()
        if pending > FOLD_BYTES:
            return SnapshotLayout.of_map(self.fold_changes(sandbox_id, context_id))
        block_map = self._snapshot_map(sandbox_id, context_id)
        for length, changed, _ in _changes(self._db, sandbox_id, context_id, with_data=False):
            count = length // BLOCK_BYTES
            del block_map[count:]
            block_map.extend([0] * (count - len(block_map)))
            for index in changed:
                block_map[index] = _CHANGED
        return SnapshotLayout.of_map(block_map)

    def fold_changes(self, sandbox_id: str, context_id: str) -> array[int]:
        """Move the context's stored changes into its map and the block store (the
        newest of each block wins); its map after."""
        changes = _changes(self._db, sandbox_id, context_id, with_data=True)
        if not changes:
            return self._snapshot_map(sandbox_id, context_id)
        latest = cast(dict[int, memoryview], _laid_over({}, changes))  # views of the rows
        self._discard_changes(sandbox_id, context_id)
        shortest = min(length for length, _, _ in changes) // BLOCK_BYTES
        return self._put_blocks(
            sandbox_id, context_id, SnapshotDelta(changes[-1][0], latest, {}, {}), keep=shortest
        )

    def _put_blocks(
        self,
        sandbox_id: str,
        context_id: str,
        snapshot: SnapshotDelta,
        keep: int | None = None,
    ) -> array[int]:
        """Enter the snapshot's blocks into the context's map, each stored once for every
        context that holds it: a snapshot `from_image` replaces the map, another one
        changes the entries it gives. Entries past the end of memory (or past `keep`
        blocks, where memory was that short in between) leave the map. The map after."""
        count = snapshot.length // BLOCK_BYTES
        old = self._snapshot_map(sandbox_id, context_id)
        kept = count if keep is None else min(count, keep)
        new = array("I", bytes(4 * count)) if snapshot.from_image else old[:kept]
        new.extend([0] * (count - len(new)))
        digests = {
            index: hashlib.blake2b(block, digest_size=32).digest()
            for index, block in snapshot.blocks.items()
        }
        ids = self._block_ids(digests, snapshot.blocks)
        change: Counter[int] = Counter()
        if snapshot.from_image:
            change.update(new)  # the given blocks are added below
            change.subtract(old)
        else:
            for index in range(kept, len(old)):
                change[old[index]] -= 1
            for index in digests:
                change[new[index]] -= 1
        for index, digest in digests.items():
            new[index] = ids[digest]
            change[new[index]] += 1
        self._count_references(change)
        self._db.execute(
            "INSERT OR REPLACE INTO snapshot_maps (sandbox_id, context_id, blocks) "
            "VALUES (?, ?, ?)",
            (sandbox_id, context_id, _map_bytes(new)),
        )
        return new

    def copy_context_state(self, sandbox_id: str, origin_id: str, copy_id: str) -> None:
        """Give context `copy_id` (which has neither) the snapshot and the history of
        `origin_id`: the same blocks, each referenced once more, and copies of the rows."""
        blocks = self.fold_changes(sandbox_id, origin_id)
        if blocks:
            self._count_references(Counter(blocks))
            self._db.execute(
                "INSERT INTO snapshot_maps (sandbox_id, context_id, blocks) VALUES (?, ?, ?)",
                (sandbox_id, copy_id, _map_bytes(blocks)),
            )
        self._db.execute(
            "INSERT INTO history (sandbox_id, context_id, seq, code, started_at, result) "
            "SELECT sandbox_id, ?, seq, code, started_at, result FROM history "
            "WHERE sandbox_id = ? AND context_id = ?",
            (copy_id, sandbox_id, origin_id),
        )

    def save_checkpoint(
        self, sandbox_id: str, context_id: str, name: str, created_at: int, value: dict[str, Any]
    ) -> None:
        """Keep the context's current snapshot map under `name` (replacing a checkpoint of
        that name): its blocks are referenced once more, none is copied."""
        self.delete_checkpoint(sandbox_id, context_id, name)
        blocks = self.fold_changes(sandbox_id, context_id)
        self._count_references(Counter(blocks))
        self._db.execute(
            "INSERT INTO checkpoints (sandbox_id, context_id, name, created_at, value, blocks) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (sandbox_id, context_id, name, created_at, json.dumps(value), _map_bytes(blocks)),
        )

    def restore_checkpoint(self, sandbox_id: str, context_id: str, name: str) -> bool:
        """Make the checkpoint's map the context's snapshot map; False when there is no
        checkpoint of that name (nothing changes then)."""
        row = self._db.execute(
            "SELECT blocks FROM checkpoints WHERE sandbox_id = ? AND context_id = ? AND name = ?",
            (sandbox_id, context_id, name),
        ).fetchone()
        if row is None:
            return False
        self._discard_changes(sandbox_id, context_id)
        saved = _map_of(row[0])
        change: Counter[int] = Counter(saved)
        change.subtract(self._snapshot_map(sandbox_id, context_id))
        self._count_references(change)
        self._db.execute(
            "INSERT OR REPLACE INTO snapshot_maps (sandbox_id, context_id, blocks) "
            "VALUES (?, ?, ?)",
            (sandbox_id, context_id, _map_bytes(saved)),
        )
        self.reclaim = True
        return True

    def delete_checkpoint(self, sandbox_id: str, context_id: str, name: str) -> bool:
        """Forget the checkpoint and the blocks nothing else holds; False if there was none."""
        key = (sandbox_id, context_id, name)
        row = self._db.execute(
            "SELECT blocks FROM checkpoints WHERE sandbox_id = ? AND context_id = ? AND name = ?",
            key,
        ).fetchone()
        if row is None:
            return False
        self._db.execute(
            "DELETE FROM checkpoints WHERE sandbox_id = ? AND context_id = ? AND name = ?", key
        )
        self._release(_map_of(row[0]))
        return True

    def _drop_checkpoints(self, sandbox_id: str, context_id: str) -> None:
        for (name,) in self._db.execute(
            "SELECT name FROM checkpoints WHERE sandbox_id = ? AND context_id = ?",
            (sandbox_id, context_id),
        ).fetchall():
            self.delete_checkpoint(sandbox_id, context_id, name)

    def drop_snapshot(self, sandbox_id: str, context_id: str) -> None:
        """Forget the context's snapshot, and the blocks no other snapshot holds."""
        self._discard_changes(sandbox_id, context_id)
        self._release(self._snapshot_map(sandbox_id, context_id))
        self._db.execute(
            "DELETE FROM snapshot_maps WHERE sandbox_id = ? AND context_id = ?",
            (sandbox_id, context_id),
        )

    def _discard_changes(self, sandbox_id: str, context_id: str) -> None:
        self._db.execute(
            "DELETE FROM snapshot_changes WHERE sandbox_id = ? AND context_id = ?",
            (sandbox_id, context_id),
        )

    def _release(self, blocks: array[int]) -> None:
        """A map that named `blocks` is gone: each loses a reference, and those no other
        map names are deleted (the file gives back their pages after commit)."""
        self._count_references(Counter({block: -n for block, n in Counter(blocks).items()}))
        self.reclaim = True

    def _snapshot_map(self, sandbox_id: str, context_id: str) -> array[int]:
        row = self._db.execute(
            "SELECT blocks FROM snapshot_maps WHERE sandbox_id = ? AND context_id = ?",
            (sandbox_id, context_id),
        ).fetchone()
        return _map_of(b"" if row is None else row[0])

    def _block_ids(
        self, digests: dict[int, bytes], blocks: Mapping[int, bytes | memoryview]
    ) -> dict[bytes, int]:
        """The id of each block (by hash), stored now if no snapshot holds it yet."""
        first_index = {digest: index for index, digest in reversed(digests.items())}
        wanted = list(first_index)
        ids: dict[bytes, int] = {}
        for start in range(0, len(wanted), LOOKUP_BATCH):
            batch = wanted[start : start + LOOKUP_BATCH]
            marks = ", ".join("?" * len(batch))
            ids.update(
                self._db.execute(
                    f"SELECT hash, id FROM snapshot_blocks WHERE hash IN ({marks})", batch
                ).fetchall()
            )
        for digest in wanted:
            if digest not in ids:
                cursor = self._db.execute(
                    "INSERT INTO snapshot_blocks (hash, refs, data) VALUES (?, 0, ?)",
                    (digest, bytes(blocks[first_index[digest]])),
                )
                assert cursor.lastrowid is not None
                ids[digest] = cursor.lastrowid
        return ids

    def _count_references(self, change: Counter[int]) -> None:
        """Apply reference count changes; blocks no snapshot names any more are deleted."""
        change.pop(0, None)
        moved = [(delta, block) for block, delta in change.items() if delta]
        self._db.executemany("UPDATE snapshot_blocks SET refs = refs + ? WHERE id = ?", moved)
        released = [block for delta, block in moved if delta < 0]
        for start in range(0, len(released), LOOKUP_BATCH):
            batch = released[start : start + LOOKUP_BATCH]
            marks = ", ".join("?" * len(batch))
            self._db.execute(
                f"DELETE FROM snapshot_blocks WHERE id IN ({marks}) AND refs <= 0", batch
            )

    def add_history(
        self,
        sandbox_id: str,
        context_id: str,
        seq: int,
        code: str,
        started_at: int,
        result: dict[str, Any] | None,
    ) -> None:
        """Record an execution and drop the context's entries older than the newest
        `history_limit` (an index range on the primary key, so it stays cheap)."""
        self._db.execute(
            "INSERT OR REPLACE INTO history (sandbox_id, context_id, seq, code, started_at, result)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                sandbox_id,
                context_id,
                seq,
                well_formed(code),  # SQLite text is UTF-8: a lone surrogate becomes U+FFFD
                started_at,
                None if result is None else json.dumps(result),
            ),
        )
        self._db.execute(
            "DELETE FROM history WHERE sandbox_id = ? AND context_id = ? AND seq <= ?",
            (sandbox_id, context_id, seq - self._history_limit),
        )


def _changes(
    db: sqlite3.Connection, sandbox_id: str, context_id: str, *, with_data: bool
) -> list[tuple[int, array[int], memoryview]]:
    """A context's snapshot changes not yet folded, oldest first: the memory's length, the
    indexes of the blocks and (`with_data`) the blocks."""
    data = "data" if with_data else "x''"
    rows = db.execute(
        f"SELECT length, blocks, {data} FROM snapshot_changes "
        "WHERE sandbox_id = ? AND context_id = ? ORDER BY seq",
        (sandbox_id, context_id),
    ).fetchall()
    return [(length, _map_of(changed), memoryview(held)) for length, changed, held in rows]


def _laid_over(
    blocks: dict[int, bytes | memoryview], changes: list[tuple[int, array[int], memoryview]]
) -> dict[int, bytes | memoryview]:
    """`blocks` by index with `changes` laid over them, oldest first: the newest of each
    block wins, and blocks past a change's memory length go."""
    for length, changed, data in changes:
        count = length // BLOCK_BYTES
        if blocks and max(blocks) >= count:  # memory shrank (never in Wasm)
            blocks = {index: block for index, block in blocks.items() if index < count}
        for position, index in enumerate(changed):
            blocks[index] = data[position * BLOCK_BYTES : (position + 1) * BLOCK_BYTES]
    return blocks


def _map_of(stored: bytes) -> array[int]:
    block_map = array("I", stored)
    if sys.byteorder == "big":
        block_map.byteswap()
    return block_map


def count_stored(block_map: array[int]) -> int:
    """The entries of a map that name a stored block (0: the engine's image there)."""
    return len(block_map) - block_map.count(0)


def _map_bytes(block_map: array[int]) -> bytes:
    if sys.byteorder == "big":
        block_map = array("I", block_map)
        block_map.byteswap()
    return block_map.tobytes()


class Store:
    """One SQLite database file (created with its schema on first use)."""

    def __init__(self, path: Path, *, history_limit: int = DEFAULT_HISTORY_LIMIT) -> None:
        self.path = path
        self.history_limit = history_limit
        private_directory(path.parent)
        private_file(path)
        # SQLite creates -wal and -shm with the database file's mode; ones left by an
        # older version with the default mode are tightened.
        for suffix in ("-wal", "-shm"):
            leftover = path.with_name(path.name + suffix)
            if leftover.exists():
                private_file(leftover)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        self._asked = 0
        """Callers that asked for the lock, the folder excepted (counted before they wait
        for it): how the folder tells quiet."""
        self._waiting = 0
        """Callers waiting for the lock, the folder excepted: it starts no fold while one
        waits (the lock is not fair: it would take it back before they wake)."""
        self._waiting_lock = threading.Lock()
        """Keeps `_waiting` exact: a lost count would stop the folder for good."""
        self._folder: threading.Thread | None = None
        self._closing = threading.Event()
        with self._lock:
            self._db.execute("PRAGMA busy_timeout=10000")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, 2, 3, 4, SCHEMA_VERSION):  # 1 to 4: converted in place
                raise RuntimeError(
                    f"{path} has schema version {version}; this workbench understands "
                    f"{SCHEMA_VERSION}. Use another --data-dir or upgrade sandbox-workbench."
                )
            if version == 0:  # new, set before anything (the WAL switch too) writes a page:
                # the file gives back freed pages (`incremental_vacuum`), and 16 KiB pages
                # hold a few snapshot blocks each, where 4 KiB ones would spill
                self._db.execute(f"PRAGMA page_size={DATABASE_PAGE_BYTES}")
                self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=OFF")
            self._db.executescript(SCHEMA)
            if version in (1, 2):
                self._convert_snapshots()
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            if version in (1, 2):  # both take effect on an existing file only with a VACUUM
                self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
                self._db.execute("PRAGMA journal_mode=DELETE")  # the page size changes so
                self._db.execute(f"PRAGMA page_size={DATABASE_PAGE_BYTES}")
                self._db.execute("VACUUM")
                self._db.execute("PRAGMA journal_mode=WAL")
            if self._db.execute("SELECT 1 FROM snapshot_changes LIMIT 1").fetchone():
                self._start_folding()  # left by the last process

    def _convert_snapshots(self) -> None:
        """A version-1 or -2 store's snapshots (per-context 1 MiB chunks, then 4 KiB
        deltas) become maps of blocks, in one transaction."""
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master")}
        if "snapshot_chunks" not in tables:
            return
        with self.transaction() as tx:
            for sandbox_id, context_id, value in self._db.execute(
                "SELECT sandbox_id, id, value FROM contexts"
            ).fetchall():
                snapshot = json.loads(value).get("snapshot")
                if isinstance(snapshot, dict) and isinstance(snapshot.get("memoryPages"), int):
                    memory = self._old_snapshot_memory(
                        sandbox_id, context_id, snapshot["memoryPages"] * PAGE_BYTES, tables
                    )
                    view = memoryview(memory)
                    blocks = {
                        index: view[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES]
                        for index in range(len(memory) // BLOCK_BYTES)
                    }  # all of them: which equal the image is not known here
                    whole = SnapshotDelta(len(memory), blocks, {}, {}, from_image=True)
                    tx.put_snapshot(sandbox_id, context_id, whole)
            self._db.execute("DROP TABLE snapshot_chunks")
            if "snapshot_deltas" in tables:
                self._db.execute("DROP TABLE snapshot_deltas")

    def _old_snapshot_memory(
        self, sandbox_id: str, context_id: str, size: int, tables: set[str]
    ) -> bytearray:
        memory = bytearray(size)
        for chunk, data in self._db.execute(
            "SELECT chunk, data FROM snapshot_chunks WHERE sandbox_id = ? AND context_id = ?",
            (sandbox_id, context_id),
        ).fetchall():
            start = chunk * CHUNK_BYTES
            end = min(start + CHUNK_BYTES, size)
            memory[start:end] = data[: max(0, end - start)]
        if "snapshot_deltas" not in tables:
            return memory
        for runs, data in self._db.execute(
            "SELECT runs, data FROM snapshot_deltas WHERE sandbox_id = ? AND context_id = ? "
            "ORDER BY seq",
            (sandbox_id, context_id),
        ).fetchall():
            offset = 0
            for first, count in json.loads(runs):
                start, length = first * BLOCK_BYTES, count * BLOCK_BYTES
                end = min(start + length, size)
                if end > start:
                    memory[start:end] = data[offset : offset + end - start]
                offset += length
        return memory

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """All writes in the block commit together, or none do."""
        with self._locked():
            with self._transaction() as transaction:
                yield transaction
            # Every write: the store's upkeep runs once it is quiet (any write may have
            # freed pages: a file deleted or replaced, history trimmed, a sandbox gone).
            self._start_folding()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock, for any caller but the folder."""
        self._asked += 1  # may lose a count to a race, never all of them: it still moves
        # Only `with` statements: a KeyboardInterrupt between a bare acquire and its `try`
        # kept the lock for good (`close` then hung), or left `_waiting` counted.
        counted = False
        try:
            with self._waiting_lock:
                self._waiting += 1
                counted = True
            with self._lock:
                with self._waiting_lock:
                    self._waiting -= 1
                    counted = False
                yield
        finally:
            if counted:
                with self._waiting_lock:
                    self._waiting -= 1

    @contextmanager
    def _transaction(self) -> Iterator[Transaction]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                transaction = Transaction(self._db, self.history_limit)
                yield transaction
                self._db.execute("COMMIT")
            except BaseException:
                # A failed COMMIT may leave the transaction open (SQLITE_BUSY) or have
                # rolled it back already (I/O error, disk full).
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            if transaction.reclaim:
                self._reclaim()

    def _start_folding(self) -> None:
        """Start the thread that, once the store is quiet, folds snapshot changes and
        gives free pages back (unless it runs already). Called with the lock held."""
        if self._folder is None and not self._closing.is_set():
            folder = threading.Thread(
                target=self._fold_when_quiet, name="store-folder", daemon=True
            )
            try:
                folder.start()
            except RuntimeError:  # no thread to be had: the write stands, the next one retries
                return
            self._folder = folder  # kept once started: `close` joins it

    def _fold_when_quiet(self) -> None:
        """Fold each context's snapshot changes into the block store, a context per
        transaction, while no other write came for `FOLD_QUIET_S` (the lock is free
        between contexts, and no fold starts while a request waits: it waits for one at
        most); then give the file's free pages back, if any (a deleted file or sandbox, a
        replaced row), and checkpoint the write-ahead log (a run's commit would otherwise
        pay for that now and then), and end when nothing is left to fold."""
        seen = -1
        try:
            while not self._closing.wait(FOLD_QUIET_S):
                while not self._closing.is_set():
                    with self._lock:
                        if self._waiting or self._asked != seen:  # used or waited for
                            seen = self._asked
                            break
                        key = self._db.execute(
                            "SELECT sandbox_id, context_id FROM snapshot_changes LIMIT 1"
                        ).fetchone()
                        if key is None:
                            self._folder = None
                            if self._db.execute("PRAGMA freelist_count").fetchone()[0]:
                                self._reclaim()  # gives the free pages back, then the log
                            else:
                                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                            return
                        with self._transaction() as transaction:
                            transaction.fold_changes(*key)
        except sqlite3.Error:
            pass  # a failing store: the changes stay stored, and the next write retries
        finally:
            with self._lock:
                if self._folder is threading.current_thread():
                    self._folder = None

    def fold_changes(self) -> None:
        """Fold every context's snapshot changes into the block store now."""
        with self._locked():
            keys = self._db.execute(
                "SELECT DISTINCT sandbox_id, context_id FROM snapshot_changes"
            ).fetchall()
            for key in keys:
                with self._transaction() as transaction:
                    transaction.fold_changes(*key)

    def _reclaim(self) -> None:
        """Give the pages of dropped snapshots back to the file system: the free pages
        (a store of version 3 made here; a converted one after its VACUUM), then the
        write-ahead log they passed through. Best effort: a reader in the way (shell
        completion) only defers it."""
        with contextlib.suppress(sqlite3.OperationalError):
            self._db.executescript("PRAGMA incremental_vacuum;")  # run to completion
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def sandbox(self, sandbox_id: str) -> StoredSandbox | None:
        with self._locked():
            row = self._db.execute(
                "SELECT id, created_at, last_used, env_vars, expires_at FROM sandboxes "
                "WHERE id = ?",
                (sandbox_id,),
            ).fetchone()
        if row is None:
            return None
        return StoredSandbox(row[0], row[1], row[2], json.loads(row[3]), row[4])

    def sandboxes(self) -> list[StoredSandbox]:
        with self._locked():
            rows = self._db.execute(
                "SELECT id, created_at, last_used, env_vars, expires_at FROM sandboxes "
                "ORDER BY created_at, id"
            ).fetchall()
        return [StoredSandbox(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    def files(self, sandbox_id: str) -> list[tuple[str, bytes | None, int]]:
        """(path, data or None for a directory, updated_at), parents before children."""
        with self._locked():
            rows = self._db.execute(
                "SELECT path, data, updated_at FROM files WHERE sandbox_id = ? ORDER BY path",
                (sandbox_id,),
            ).fetchall()
        return [(path, data, updated_at) for path, data, updated_at in rows]

    def contexts(self, sandbox_id: str) -> list[StoredContext]:
        with self._locked():
            rows = self._db.execute(
                "SELECT id, created_at, value FROM contexts WHERE sandbox_id = ? "
                "ORDER BY created_at, id",
                (sandbox_id,),
            ).fetchall()
        return [StoredContext(r[0], r[1], json.loads(r[2])) for r in rows]

    def snapshot_blocks(self, sandbox_id: str, context_id: str) -> dict[int, bytes | memoryview]:
        """The blocks a context's snapshot stores, by index (the others are its engine's
        image), its changes not yet folded included; blocks that several entries of the
        map name are one object."""
        with self._locked():
            row = self._db.execute(
                "SELECT blocks FROM snapshot_maps WHERE sandbox_id = ? AND context_id = ?",
                (sandbox_id, context_id),
            ).fetchone()
            places: dict[int, list[int]] = {}
            for index, block in enumerate(_map_of(b"" if row is None else row[0])):
                if block:
                    places.setdefault(block, []).append(index)
            wanted = list(places)
            found: dict[int, bytes | memoryview] = {}
            for start in range(0, len(wanted), LOOKUP_BATCH):
                batch = wanted[start : start + LOOKUP_BATCH]
                marks = ", ".join("?" * len(batch))
                for block, data in self._db.execute(
                    f"SELECT id, data FROM snapshot_blocks WHERE id IN ({marks})", batch
                ):
                    for index in places[block]:
                        found[index] = data
            changes = _changes(self._db, sandbox_id, context_id, with_data=True)
        return _laid_over(found, changes)

    def checkpoint_bytes(self, sandbox_id: str) -> int:
        """The memory every checkpoint of the sandbox holds apart from the engine's image,
        summed (a block two of them hold counts twice)."""
        with self._locked():
            rows = self._db.execute(
                "SELECT blocks FROM checkpoints WHERE sandbox_id = ?", (sandbox_id,)
            ).fetchall()
        return sum(BLOCK_BYTES * count_stored(_map_of(blocks)) for (blocks,) in rows)

    def checkpoints(self, sandbox_id: str, context_id: str) -> list[StoredCheckpoint]:
        """The context's checkpoints, oldest first."""
        with self._locked():
            rows = self._db.execute(
                "SELECT name, created_at, value, blocks FROM checkpoints "
                "WHERE sandbox_id = ? AND context_id = ? ORDER BY created_at, name",
                (sandbox_id, context_id),
            ).fetchall()
        return [
            StoredCheckpoint(
                name, created_at, json.loads(value), BLOCK_BYTES * count_stored(_map_of(blocks))
            )
            for name, created_at, value, blocks in rows
        ]

    def history(
        self, sandbox_id: str, context_id: str, *, limit: int | None = None
    ) -> list[tuple[int, str, int, dict[str, Any] | None]]:
        """(seq, code, started_at, result JSON) oldest first, the newest `limit` entries
        (default: all that are kept)."""
        limit = self.history_limit if limit is None else limit
        with self._locked():
            rows = self._db.execute(
                "SELECT seq, code, started_at, result FROM history "
                "WHERE sandbox_id = ? AND context_id = ? ORDER BY seq DESC LIMIT ?",
                (sandbox_id, context_id, limit),
            ).fetchall()
        return [
            (seq, code, started_at, None if result is None else json.loads(result))
            for seq, code, started_at, result in reversed(rows)
        ]

    def close(self) -> None:
        """Stop folding (changes not folded stay stored) and close the database."""
        self._closing.set()
        with self._lock:  # a folder is made and started under it: never one not started
            folder = self._folder
        if folder is not None:
            folder.join()
        with self._locked():
            self._db.close()
