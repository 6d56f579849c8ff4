"""Messages that background workers post to the app (workers never touch widgets)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from workbench.api.client import Backend
from workbench.api.types import (
    CodeContext,
    ExecutionResult,
    FileInfo,
    RuntimeInfo,
    SandboxInfo,
    SandboxSummary,
)


@dataclass
class BackendOpened(Message):
    profile: str
    backend: Backend


@dataclass
class BackendFailed(Message):
    profile: str
    reason: str


@dataclass
class HealthChecked(Message):
    profile: str
    healthy: bool
    detail: str


@dataclass
class SandboxesLoaded(Message):
    sandboxes: list[SandboxSummary]


@dataclass
class RuntimesLoaded(Message):
    runtimes: list[RuntimeInfo]


@dataclass
class SandboxInfoLoaded(Message):
    info: SandboxInfo


@dataclass
class DirectoryListed(Message):
    sandbox_id: str
    path: str
    files: list[FileInfo]


@dataclass
class ContextOpened(Message):
    sandbox_id: str
    context: CodeContext
    history: list[str]


@dataclass
class ContextRemoved(Message):
    sandbox_id: str
    context_id: str


@dataclass
class SandboxDestroyed(Message):
    sandbox_id: str


@dataclass
class CellFinished(Message):
    sandbox_id: str
    context_id: str
    code: str
    result: ExecutionResult | None
    failure: str | None


@dataclass
class RunAbandoned(Message):
    """The backend could not interrupt the engine; the request is dropped instead."""

    sandbox_id: str
    context_id: str


@dataclass
class OperationFailed(Message):
    """A request failed; the app shows `reason` as an error notification."""

    title: str
    reason: str
