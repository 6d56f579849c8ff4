"""Messages that background workers post to the app (workers never touch widgets)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from workbench.api.client import Backend
from workbench.api.engines import EngineInfo
from workbench.api.types import (
    CodeContext,
    ExecutionResult,
    FileInfo,
    RuntimeInfo,
    SandboxInfo,
    SandboxSummary,
)
from workbench.sync.events import SyncEvent, SyncReport


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
class EngineStatesLoaded(Message):
    engines: list[EngineInfo]


@dataclass
class EngineProgress(Message):
    """A local engine's preparation moved on (posted from its worker thread)."""

    language: str
    label: str
    fraction: float


@dataclass
class EnginePrepared(Message):
    language: str
    error: str | None


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
    label: str | None = None
    """Why the cell ran when nobody typed it (e.g. a watch run)."""


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


@dataclass
class WatchEventReceived(Message):
    """A status event of the running folder watch."""

    watch_id: int
    event: SyncEvent


@dataclass
class WatchSynced(Message):
    """A watch pass finished (after the SYNCED event): the sandbox tree may refresh."""

    watch_id: int
    sandbox_id: str
    dest: str
    report: SyncReport


@dataclass
class WatchRunStarted(Message):
    """A watch run of the entry file started in `context_id` (its cell follows as a
    `CellFinished` labelled as a watch run)."""

    watch_id: int
    context_id: str
    code: str


@dataclass
class WatchEnded(Message):
    """The watch worker ended: stopped, or `failure` ended it."""

    watch_id: int
    failure: str | None
