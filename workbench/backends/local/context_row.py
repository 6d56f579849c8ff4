"""A code context's registry row (spec 7.1): stored as JSON, shown as protocol types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import CodeContext, ContextInfo, SnapshotInfo
from workbench.store import StoredContext


@dataclass
class ContextRow:
    """Spec 7.1 registry row plus the stored snapshot record."""

    id: str
    binding: str
    language: str
    engine: str
    cwd: str
    env_vars: dict[str, str]
    created_at: int
    last_used: int
    executions: int = 0
    snapshot: dict[str, Any] | None = None
    seq: int = 0
    """Creation order within the sandbox: breaks `createdAt` ties (same millisecond), so
    listings and the default context follow creation order like the reference's stable
    sort over its insertion-ordered registry."""

    def to_stored(self) -> StoredContext:
        return StoredContext(
            self.id,
            self.created_at,
            {
                "binding": self.binding,
                "language": self.language,
                "engine": self.engine,
                "cwd": self.cwd,
                "envVars": self.env_vars,
                "lastUsed": self.last_used,
                "executions": self.executions,
                "snapshot": self.snapshot,
                "seq": self.seq,
            },
        )

    @classmethod
    def from_stored(cls, stored: StoredContext) -> ContextRow:
        value = stored.value
        return cls(
            id=stored.id,
            binding=str(value["binding"]),
            language=str(value["language"]),
            engine=str(value["engine"]),
            cwd=str(value["cwd"]),
            env_vars=dict(value.get("envVars") or {}),
            created_at=stored.created_at,
            last_used=int(value["lastUsed"]),
            executions=int(value.get("executions", 0)),
            snapshot=value.get("snapshot"),
            seq=int(value.get("seq", 0)),
        )

    def code_context(self) -> CodeContext:
        return CodeContext(
            self.id,
            self.binding,
            self.language,
            self.cwd,
            iso_from_ms(self.created_at),
            iso_from_ms(self.last_used),
        )

    def context_info(self) -> ContextInfo:
        return ContextInfo(
            self.id,
            self.binding,
            self.language,
            self.engine,
            self.cwd,
            iso_from_ms(self.created_at),
            iso_from_ms(self.last_used),
            self.executions,
            self.snapshot_info(),
        )

    def snapshot_info(self) -> SnapshotInfo | None:
        """The public part of the stored snapshot record, values as stored."""
        snapshot = self.snapshot
        if snapshot is None:
            return None
        return SnapshotInfo(
            snapshot["build"],
            snapshot["pages"],
            snapshot["bytes"],
            snapshot["storedBytes"],
            snapshot["takenAt"],
            snapshot["stale"],
        )
