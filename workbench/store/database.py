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

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.result import well_formed
from engines.snapshot import nonzero_pages
from workbench.paths import private_directory, private_file

SCHEMA_VERSION = 2
"""2 added `snapshot_deltas` (a version-1 store is upgraded in place; a version-1
workbench refuses a version-2 store, whose snapshots it would read without their deltas)."""
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
CREATE TABLE IF NOT EXISTS snapshot_chunks (
    sandbox_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (sandbox_id, context_id, chunk)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshot_deltas (
    sandbox_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    runs TEXT NOT NULL,         -- JSON [[first 4 KiB block, count], ...], data in that order
    data BLOB NOT NULL,
    PRIMARY KEY (sandbox_id, context_id, seq)
);
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


CONTEXT_TABLES = ("contexts", "snapshot_chunks", "snapshot_deltas", "history")
SANDBOX_TABLES = ("sandboxes", "files", *CONTEXT_TABLES)


@dataclass(frozen=True)
class SnapshotLayout:
    """Which parts of a snapshot's memory hold data (spec 7.7 `SnapshotInfo` fields)."""

    memory_pages: int
    nonzero_pages: int
    zero_chunks: frozenset[int]
    chunk_count: int

    @property
    def stored_chunks(self) -> int:
        return self.chunk_count - len(self.zero_chunks)

    @classmethod
    def of(cls, memory: bytes | bytearray) -> SnapshotLayout:
        nonzero = nonzero_pages(memory)
        pages = len(nonzero)
        per_chunk = CHUNK_BYTES // PAGE_BYTES
        chunk_count = (pages + per_chunk - 1) // per_chunk
        zero_chunks = frozenset(
            chunk
            for chunk in range(chunk_count)
            if not any(nonzero[chunk * per_chunk : (chunk + 1) * per_chunk])
        )
        return cls(pages, sum(nonzero), zero_chunks, chunk_count)


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


class Transaction:
    """Writes of one change; committed together when the `with` block ends."""

    def __init__(self, connection: sqlite3.Connection, history_limit: int) -> None:
        self._db = connection
        self._history_limit = history_limit

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
        memory: bytes | bytearray,
        changed_chunks: Iterable[int],
    ) -> SnapshotLayout:
        """Store linear memory in 1 MiB chunks (spec 7.7): rewrite the chunks that changed
        since the last store, drop all-zero ones and any past the end of memory, and the
        deltas (the chunks now hold what they said)."""
        self._db.execute(
            "DELETE FROM snapshot_deltas WHERE sandbox_id = ? AND context_id = ?",
            (sandbox_id, context_id),
        )
        layout = SnapshotLayout.of(memory)
        view = memoryview(memory)
        for chunk in sorted(changed_chunks):
            if chunk >= layout.chunk_count:
                continue
            if chunk in layout.zero_chunks:
                self._db.execute(
                    "DELETE FROM snapshot_chunks WHERE sandbox_id = ? AND context_id = ? "
                    "AND chunk = ?",
                    (sandbox_id, context_id, chunk),
                )
                continue
            data = bytes(view[chunk * CHUNK_BYTES : (chunk + 1) * CHUNK_BYTES])
            self._db.execute(
                "INSERT OR REPLACE INTO snapshot_chunks (sandbox_id, context_id, chunk, data) "
                "VALUES (?, ?, ?, ?)",
                (sandbox_id, context_id, chunk, data.ljust(CHUNK_BYTES, b"\0")),
            )
        self._db.execute(
            "DELETE FROM snapshot_chunks WHERE sandbox_id = ? AND context_id = ? AND chunk >= ?",
            (sandbox_id, context_id, layout.chunk_count),
        )
        return layout

    def add_snapshot_delta(
        self,
        sandbox_id: str,
        context_id: str,
        memory: bytes | bytearray,
        blocks: Iterable[int],
    ) -> int:
        """Append the 4 KiB `blocks` of `memory` that changed since the snapshot was last
        stored (a run changes a few hundred KiB spread over many chunks); the bytes
        written."""
        runs: list[list[int]] = []
        for block in sorted(blocks):
            if runs and runs[-1][0] + runs[-1][1] == block:
                runs[-1][1] += 1
            else:
                runs.append([block, 1])
        view = memoryview(memory)
        data = b"".join(
            bytes(view[first * BLOCK_BYTES : (first + count) * BLOCK_BYTES])
            for first, count in runs
        )
        self._db.execute(
            "INSERT INTO snapshot_deltas (sandbox_id, context_id, seq, runs, data) VALUES "
            "(?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM snapshot_deltas "
            "WHERE sandbox_id = ? AND context_id = ?), ?, ?)",
            (sandbox_id, context_id, sandbox_id, context_id, json.dumps(runs), data),
        )
        return len(data)

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
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.execute("PRAGMA foreign_keys=OFF")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, SCHEMA_VERSION):  # 1: upgraded by adding a table
                raise RuntimeError(
                    f"{path} has schema version {version}; this workbench understands "
                    f"{SCHEMA_VERSION}. Use another --data-dir or upgrade sandbox-workbench."
                )
            self._db.executescript(SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """All writes in the block commit together, or none do."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield Transaction(self._db, self.history_limit)
                self._db.execute("COMMIT")
            except BaseException:
                # A failed COMMIT may leave the transaction open (SQLITE_BUSY) or have
                # rolled it back already (I/O error, disk full).
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def sandbox(self, sandbox_id: str) -> StoredSandbox | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, created_at, last_used, env_vars, expires_at FROM sandboxes "
                "WHERE id = ?",
                (sandbox_id,),
            ).fetchone()
        if row is None:
            return None
        return StoredSandbox(row[0], row[1], row[2], json.loads(row[3]), row[4])

    def sandboxes(self) -> list[StoredSandbox]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, created_at, last_used, env_vars, expires_at FROM sandboxes "
                "ORDER BY created_at, id"
            ).fetchall()
        return [StoredSandbox(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    def files(self, sandbox_id: str) -> list[tuple[str, bytes | None, int]]:
        """(path, data or None for a directory, updated_at), parents before children."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, data, updated_at FROM files WHERE sandbox_id = ? ORDER BY path",
                (sandbox_id,),
            ).fetchall()
        return [(path, data, updated_at) for path, data, updated_at in rows]

    def contexts(self, sandbox_id: str) -> list[StoredContext]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, created_at, value FROM contexts WHERE sandbox_id = ? "
                "ORDER BY created_at, id",
                (sandbox_id,),
            ).fetchall()
        return [StoredContext(r[0], r[1], json.loads(r[2])) for r in rows]

    def snapshot_memory(
        self, sandbox_id: str, context_id: str, memory_pages: int
    ) -> tuple[bytes, set[int]]:
        """Reassemble a snapshot's linear memory: its chunks (zero ones were not stored),
        then its deltas in order; and the chunks the deltas changed (stored chunks that
        are out of date until rewritten)."""
        size = memory_pages * 65536
        memory = bytearray(size)
        with self._lock:
            rows = self._db.execute(
                "SELECT chunk, data FROM snapshot_chunks WHERE sandbox_id = ? AND context_id = ?",
                (sandbox_id, context_id),
            ).fetchall()
            deltas = self._db.execute(
                "SELECT runs, data FROM snapshot_deltas WHERE sandbox_id = ? AND context_id = ? "
                "ORDER BY seq",
                (sandbox_id, context_id),
            ).fetchall()
        for chunk, data in rows:
            start = chunk * CHUNK_BYTES
            end = min(start + CHUNK_BYTES, size)
            memory[start:end] = data[: end - start]
        changed: set[int] = set()
        for runs, data in deltas:
            offset = 0
            for first, count in json.loads(runs):
                start, length = first * BLOCK_BYTES, count * BLOCK_BYTES
                end = min(start + length, size)
                if end > start:
                    memory[start:end] = data[offset : offset + end - start]
                    changed.update(range(start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES + 1))
                offset += length
        return bytes(memory), changed

    def history(
        self, sandbox_id: str, context_id: str, *, limit: int | None = None
    ) -> list[tuple[int, str, int, dict[str, Any] | None]]:
        """(seq, code, started_at, result JSON) oldest first, the newest `limit` entries
        (default: all that are kept)."""
        limit = self.history_limit if limit is None else limit
        with self._lock:
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
        with self._lock:
            self._db.close()
