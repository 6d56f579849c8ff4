"""Pending changes: the folder paths (or a whole rescan) waiting for the next pass. A
failed pass puts its paths back, so a later one retries them (passes are state-based)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from workbench.core.host_paths import host_path
from workbench.sync.ignore import IGNORE_FILE_NAMES, IgnoreRules
from workbench.sync.relative_paths import is_plain

__all__ = ["PendingChanges"]

_FULL_RESCAN_THRESHOLD: Final = 256
"""More dirty paths than this in one pass: rescan the whole folder (cheaper)."""


class PendingChanges:
    """Changed paths under `root` waiting for a pass; `full` asks for a whole rescan."""

    def __init__(self, root: Path, rules: IgnoreRules) -> None:
        self.root = root
        self.rules = rules
        self.paths: set[str] = set()
        self.full = False

    @property
    def waiting(self) -> bool:
        return self.full or bool(self.paths)

    def add(self, paths: Iterable[str | Path], *, skip_ignored: bool) -> None:
        """Mark changed paths (outside the folder: dropped); a changed ignore file means a
        full rescan. The watcher skips ignored paths; `FolderSync.sync_paths` does not."""
        for path in paths:
            relative = self._relative(path)
            if relative is None:
                continue
            if relative.rpartition("/")[2] in IGNORE_FILE_NAMES:
                self.rules.invalidate()
                self.full = True
            elif skip_ignored and self.rules.is_ignored(
                relative, host_path(self.root, relative).is_dir()
            ):
                continue
            self.paths.add(relative)

    def take(self) -> list[str] | None:
        """The sorted paths for the next pass (None: rescan everything); clears them."""
        full = self.full or len(self.paths) > _FULL_RESCAN_THRESHOLD
        scope = None if full else sorted(self.paths)
        self.paths.clear()
        self.full = False
        return scope

    def put_back(self, scope: list[str] | None) -> None:
        """Keep a failed pass's `scope` (None: everything) for the next attempt."""
        if scope is None:
            self.full = True
        else:
            self.paths.update(scope)

    def _relative(self, path: str | Path) -> str | None:
        """The folder-relative form of a changed path; None outside the folder."""
        candidate = Path(path)
        if candidate.is_absolute():
            try:
                candidate = candidate.relative_to(self.root)
            except ValueError:
                return None
        text = candidate.as_posix().strip("/")
        return text if is_plain(text) else None
