"""SQLite persistence for the local backend (WAL; one transaction per change)."""

from workbench.store.database import Store, StoredContext, StoredSandbox, Transaction

__all__ = ["Store", "StoredContext", "StoredSandbox", "Transaction"]
