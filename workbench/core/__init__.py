"""Pure sandbox semantics shared by every local path (no I/O libraries, no UI, no SQLite)."""
