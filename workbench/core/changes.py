"""Row-level change sets: what one workspace operation changed, for one store transaction.

A ``file`` change is a row ``files(path, data, updated_at)``; a ``dir`` change is a
``NULL``-data row; a ``delete`` removes one row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["Change", "ChangeSet"]


@dataclass(frozen=True, slots=True)
class Change:
    """One row-level change: ``file`` upsert, ``dir`` upsert, or ``delete`` of one path."""

    kind: Literal["file", "dir", "delete"]
    path: str
    data: bytes | None = None
    updated_at: int = 0


class ChangeSet:
    """Row changes of one operation, at most one per path (last write wins).

    Because each path appears once, the changes can be applied in any order; the
    store's transaction does ``INSERT OR REPLACE`` for file/dir and ``DELETE`` for
    delete. Deleting a directory lists every path of its subtree explicitly.
    """

    __slots__ = ("_by_path",)

    def __init__(self, changes: Iterable[Change] = ()) -> None:
        self._by_path: dict[str, Change] = {}
        for c in changes:
            self._by_path[c.path] = c

    def upsert_file(self, path: str, data: bytes, updated_at: int) -> None:
        """Record a file row."""
        self._by_path[path] = Change("file", path, data, updated_at)

    def upsert_dir(self, path: str) -> None:
        """Record a directory row (``data`` NULL, ``updated_at`` 0)."""
        self._by_path[path] = Change("dir", path)

    def delete(self, path: str) -> None:
        """Record the removal of one row."""
        self._by_path[path] = Change("delete", path)

    @property
    def changes(self) -> list[Change]:
        """The changes in recording order."""
        return list(self._by_path.values())

    def get(self, path: str) -> Change | None:
        """The change recorded for ``path``, if any."""
        return self._by_path.get(path)

    def __iter__(self) -> Iterator[Change]:
        return iter(list(self._by_path.values()))

    def __len__(self) -> int:
        return len(self._by_path)

    def __bool__(self) -> bool:
        return bool(self._by_path)

    def __repr__(self) -> str:
        return f"ChangeSet({self.changes!r})"
