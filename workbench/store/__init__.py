"""SQLite persistence for the local backend (WAL; one transaction per change)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from workbench.store.database import (
    Store,
    StoredCheckpoint,
    StoredContext,
    StoredSandbox,
    Transaction,
)

__all__ = [
    "Store",
    "StoredCheckpoint",
    "StoredContext",
    "StoredSandbox",
    "Transaction",
    "open_failure",
]


def open_failure(error: BaseException, database: Path) -> str | None:
    """What to tell the user when opening the store at `database` raised `error` (None:
    not a way opening a store fails)."""
    if isinstance(error, sqlite3.DatabaseError):
        return (
            f"cannot open the local store {database}: {error}; move the file aside "
            "or use another --data-dir"
        )
    if isinstance(error, RuntimeError):  # the store's schema is newer than this version's
        return str(error)
    if isinstance(error, OSError):
        return (
            f"cannot open the local store in {database.parent}: {error.strerror or error}; "
            "use another --data-dir"
        )
    return None
