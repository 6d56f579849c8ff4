"""What a folder sync reports to its UIs: per-sync reports, issues and status events."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from workbench.api.display import counted

__all__ = [
    "ConflictPolicy",
    "EmitEvent",
    "EventKind",
    "SyncEvent",
    "SyncIssue",
    "SyncReport",
    "SyncStatus",
]


class ConflictPolicy(StrEnum):
    """What to do with a sandbox file guest code changed since our last upload."""

    LOCAL_WINS = "local-wins"
    """Overwrite (or delete) it anyway, with a conflict notice."""
    SANDBOX_WINS = "sandbox-wins"
    """Leave the sandbox's version; it becomes the new baseline for that path."""
    FAIL = "fail"
    """Change nothing in that batch and stop with `SyncConflictError`."""


class EventKind(StrEnum):
    WATCHING = "watching"
    SYNCING = "syncing"
    SYNCED = "synced"
    ERROR = "error"
    CONFLICT = "conflict"
    NOTICE = "notice"
    RETRYING = "retrying"
    STOPPED = "stopped"


@dataclass(frozen=True)
class SyncIssue:
    """A per-path problem: an error (`code` from the backend or `SYMLINK_OUTSIDE` …) or a
    conflict (`code == "CONFLICT"`)."""

    path: str
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "message": self.message}


@dataclass
class SyncReport:
    """The outcome of one sync pass (initial or incremental)."""

    full: bool
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    created_dirs: list[str] = field(default_factory=list)
    unchanged_files: set[str] = field(default_factory=set)
    """Files found in the sandbox with the local content already: nothing sent."""
    errors: list[SyncIssue] = field(default_factory=list)
    conflicts: list[SyncIssue] = field(default_factory=list)
    notices: list[SyncIssue] = field(default_factory=list)
    incomplete: bool = False
    """True when a transient failure cut the pass short; the rest stays pending."""
    started_at: float = field(default_factory=time.time)
    duration_s: float = 0.0

    @property
    def unchanged(self) -> int:
        """How many files needed nothing sent."""
        return len(self.unchanged_files)

    @property
    def changed(self) -> bool:
        """Whether the sandbox's tree changed in this pass."""
        return bool(self.uploaded or self.deleted or self.renamed or self.created_dirs)

    def to_json(self) -> dict[str, Any]:
        return {
            "full": self.full,
            "uploaded": len(self.uploaded),
            "deleted": len(self.deleted),
            "renamed": len(self.renamed),
            "createdDirs": len(self.created_dirs),
            "unchanged": self.unchanged,
            "errors": [issue.to_json() for issue in self.errors],
            "conflicts": [issue.to_json() for issue in self.conflicts],
            "notices": [issue.to_json() for issue in self.notices],
            "incomplete": self.incomplete,
            "durationMs": round(self.duration_s * 1000, 1),
        }

    def summary(self) -> str:
        """One human line, e.g. `3 uploaded, 1 deleted in 12 ms`."""
        parts = [
            text
            for count, text in (
                (len(self.uploaded), f"{len(self.uploaded):,} uploaded"),
                (len(self.renamed), f"{len(self.renamed):,} renamed"),
                (len(self.deleted), f"{len(self.deleted):,} deleted"),
                (len(self.created_dirs), f"{counted(len(self.created_dirs), 'dir')} created"),
                (len(self.errors), counted(len(self.errors), "error")),
                (len(self.conflicts), counted(len(self.conflicts), "conflict")),
            )
            if count
        ]
        text = ", ".join(parts) if parts else "up to date"
        return f"{text} in {self.duration_s * 1000:.0f} ms"


@dataclass(frozen=True)
class SyncEvent:
    """One status update for UIs (see `FolderSync.subscribe` / `FolderSync.events`)."""

    kind: EventKind
    message: str
    report: SyncReport | None = None
    issue: SyncIssue | None = None
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"event": str(self.kind), "message": self.message, "at": self.at}
        if self.report is not None:
            data["report"] = self.report.to_json()
        if self.issue is not None:
            data["issue"] = self.issue.to_json()
        return data


class EmitEvent(Protocol):
    """Hands one event to a sync's listeners (the parts of a pass report through it)."""

    def __call__(
        self,
        kind: EventKind,
        message: str,
        *,
        report: SyncReport | None = None,
        issue: SyncIssue | None = None,
    ) -> None: ...


@dataclass
class SyncStatus:
    """Running totals a status bar can show."""

    state: str = "idle"
    last_sync_at: float | None = None
    pending_paths: int = 0
    files_synced: int = 0
    errors: int = 0
    conflicts: int = 0
    last_error: str | None = None
