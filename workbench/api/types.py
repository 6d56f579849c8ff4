"""Typed views of the wire shapes (spec 2.4, 5, 8.2; gateway protocol), with JSON codecs.

Every type parses from and serializes to exactly the camelCase JSON the real system uses,
so the local and remote backends, the server and the TUI share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engines.result import (
    ContextRef,
    ExecutionError,
    ExecutionResult,
    JsonValue,
    ResultEntry,
    Usage,
)

__all__ = [
    "CodeContext",
    "ContextInfo",
    "ContextRef",
    "ExecutionError",
    "ExecutionResult",
    "ExistsResult",
    "FileInfo",
    "FileOpResult",
    "JsonValue",
    "ListFilesResult",
    "MkdirResult",
    "ReadFileResult",
    "ResultEntry",
    "RuntimeInfo",
    "SandboxInfo",
    "SandboxSummary",
    "SnapshotInfo",
    "Usage",
    "parse_iso",
]

Json = dict[str, Any]


def parse_iso(value: str) -> datetime:
    """Parse a JavaScript `toISOString()` timestamp into an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class RuntimeInfo:
    """One binding a backend offers (`GET /v1/runtimes` entry, spec 2.2.2 plus binding)."""

    binding: str
    language: str
    engine: str
    contexts: bool
    protocol: int = 1

    def to_json(self) -> Json:
        return {
            "binding": self.binding,
            "language": self.language,
            "engine": self.engine,
            "contexts": self.contexts,
            "protocol": self.protocol,
        }

    @classmethod
    def from_json(cls, data: Json) -> RuntimeInfo:
        return cls(
            str(data["binding"]),
            str(data["language"]),
            str(data["engine"]),
            bool(data["contexts"]),
            int(data.get("protocol", 1)),
        )


@dataclass(frozen=True)
class SandboxSummary:
    """A `GET /v1/sandboxes` entry."""

    id: str
    created_at: str
    last_used: str
    expires_at: int | None

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "createdAt": self.created_at,
            "lastUsed": self.last_used,
            "expiresAt": self.expires_at,
        }

    @classmethod
    def from_json(cls, data: Json) -> SandboxSummary:
        return cls(
            str(data["id"]), str(data["createdAt"]), str(data["lastUsed"]), data.get("expiresAt")
        )


@dataclass(frozen=True)
class CodeContext:
    """A code context as `POST /contexts` and `GET /contexts` return it (spec 2.4.2)."""

    id: str
    binding: str
    language: str
    cwd: str
    created_at: str
    last_used: str

    @property
    def created(self) -> datetime:
        return parse_iso(self.created_at)

    @property
    def last_used_at(self) -> datetime:
        return parse_iso(self.last_used)

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "binding": self.binding,
            "language": self.language,
            "cwd": self.cwd,
            "createdAt": self.created_at,
            "lastUsed": self.last_used,
        }

    @classmethod
    def from_json(cls, data: Json) -> CodeContext:
        return cls(
            str(data["id"]),
            str(data["binding"]),
            str(data["language"]),
            str(data["cwd"]),
            str(data["createdAt"]),
            str(data["lastUsed"]),
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """Spec 7.7 `SnapshotInfo`."""

    build: str
    pages: int
    bytes: int
    stored_bytes: int
    taken_at: int
    stale: bool = False

    def to_json(self) -> Json:
        return {
            "build": self.build,
            "pages": self.pages,
            "bytes": self.bytes,
            "storedBytes": self.stored_bytes,
            "takenAt": self.taken_at,
            "stale": self.stale,
        }

    @classmethod
    def from_json(cls, data: Json) -> SnapshotInfo:
        return cls(
            str(data["build"]),
            int(data["pages"]),
            int(data["bytes"]),
            int(data["storedBytes"]),
            int(data["takenAt"]),
            bool(data.get("stale", False)),
        )


@dataclass(frozen=True)
class ContextInfo:
    """A `SandboxInfo.contexts` entry (spec 8.2)."""

    id: str
    binding: str
    language: str
    engine: str
    cwd: str
    created_at: str
    last_used: str
    executions: int
    snapshot: SnapshotInfo | None

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "binding": self.binding,
            "language": self.language,
            "engine": self.engine,
            "cwd": self.cwd,
            "createdAt": self.created_at,
            "lastUsed": self.last_used,
            "executions": self.executions,
            "snapshot": None if self.snapshot is None else self.snapshot.to_json(),
        }

    @classmethod
    def from_json(cls, data: Json) -> ContextInfo:
        snapshot = data.get("snapshot")
        return cls(
            str(data["id"]),
            str(data["binding"]),
            str(data["language"]),
            str(data["engine"]),
            str(data["cwd"]),
            str(data["createdAt"]),
            str(data["lastUsed"]),
            int(data["executions"]),
            SnapshotInfo.from_json(snapshot) if isinstance(snapshot, dict) else None,
        )


@dataclass(frozen=True)
class SandboxInfo:
    """Spec 8.2 `SandboxInfo` (`GET /`)."""

    id: str
    created_at: str
    last_used: str
    env_vars: dict[str, str]
    contexts: list[ContextInfo]
    workspace_files: int
    workspace_bytes: int
    file_api: bool
    expires_at: int | None

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "createdAt": self.created_at,
            "lastUsed": self.last_used,
            "envVars": dict(self.env_vars),
            "contexts": [context.to_json() for context in self.contexts],
            "workspace": {"files": self.workspace_files, "bytes": self.workspace_bytes},
            "fileApi": self.file_api,
            "expiresAt": self.expires_at,
        }

    @classmethod
    def from_json(cls, data: Json) -> SandboxInfo:
        workspace = data.get("workspace") or {}
        return cls(
            str(data["id"]),
            str(data["createdAt"]),
            str(data["lastUsed"]),
            {str(k): str(v) for k, v in (data.get("envVars") or {}).items()},
            [ContextInfo.from_json(item) for item in data.get("contexts") or []],
            int(workspace.get("files", 0)),
            int(workspace.get("bytes", 0)),
            bool(data.get("fileApi", True)),
            data.get("expiresAt"),
        )


@dataclass(frozen=True)
class FileInfo:
    """Spec 5.3 `FileInfo`."""

    name: str
    absolute_path: str
    relative_path: str
    type: str
    size: int
    modified_at: str
    mode: str

    @property
    def is_directory(self) -> bool:
        return self.type == "directory"

    def to_json(self) -> Json:
        return {
            "name": self.name,
            "absolutePath": self.absolute_path,
            "relativePath": self.relative_path,
            "type": self.type,
            "size": self.size,
            "modifiedAt": self.modified_at,
            "mode": self.mode,
            "permissions": {"readable": True, "writable": True, "executable": self.is_directory},
        }

    @classmethod
    def from_json(cls, data: Json) -> FileInfo:
        return cls(
            str(data["name"]),
            str(data["absolutePath"]),
            str(data["relativePath"]),
            str(data["type"]),
            int(data["size"]),
            str(data["modifiedAt"]),
            str(data["mode"]),
        )


@dataclass(frozen=True)
class FileOpResult:
    """`write`, `delete`, `rename`, `move` responses (spec 5.2); `new_path` for the last two."""

    path: str
    timestamp: str
    new_path: str | None = None

    @classmethod
    def from_json(cls, data: Json) -> FileOpResult:
        new_path = data.get("newPath")
        return cls(
            str(data["path"]), str(data["timestamp"]), None if new_path is None else str(new_path)
        )


@dataclass(frozen=True)
class MkdirResult:
    path: str
    recursive: bool
    timestamp: str

    @classmethod
    def from_json(cls, data: Json) -> MkdirResult:
        return cls(str(data["path"]), bool(data["recursive"]), str(data["timestamp"]))


@dataclass(frozen=True)
class ReadFileResult:
    """`read` response (spec 5.2); `content` is text, or base64 when `encoding` is base64."""

    path: str
    content: str
    encoding: str
    is_binary: bool
    mime_type: str
    size: int
    timestamp: str

    @property
    def data(self) -> bytes:
        """The file's bytes (decoded from base64 when the read asked for it)."""
        import base64

        if self.encoding == "base64":
            return base64.b64decode(self.content)
        return self.content.encode()

    @classmethod
    def from_json(cls, data: Json) -> ReadFileResult:
        return cls(
            str(data["path"]),
            str(data["content"]),
            str(data.get("encoding", "utf-8")),
            bool(data.get("isBinary", False)),
            str(data.get("mimeType", "application/octet-stream")),
            int(data.get("size", 0)),
            str(data["timestamp"]),
        )


@dataclass(frozen=True)
class ListFilesResult:
    path: str
    files: list[FileInfo]
    count: int
    timestamp: str

    @classmethod
    def from_json(cls, data: Json) -> ListFilesResult:
        return cls(
            str(data["path"]),
            [FileInfo.from_json(item) for item in data.get("files") or []],
            int(data["count"]),
            str(data["timestamp"]),
        )


@dataclass(frozen=True)
class ExistsResult:
    path: str
    exists: bool
    timestamp: str

    @classmethod
    def from_json(cls, data: Json) -> ExistsResult:
        return cls(str(data["path"]), bool(data["exists"]), str(data["timestamp"]))


@dataclass(frozen=True)
class HistoryEntry:
    """One past execution of a context (kept by the workbench for the REPL's history)."""

    seq: int
    code: str
    started_at: int
    result: ExecutionResult | None = None
    extra: dict[str, JsonValue] = field(default_factory=dict)
