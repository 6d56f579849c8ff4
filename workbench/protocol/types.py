"""The wire shapes (spec 2.4, 5, 8.2; docs/gateway-protocol.md), each declared once.

The client reads these types, and the local gateway (so `serve` too) answers with them;
`workbench.protocol.codec` maps every one to exactly the camelCase JSON the real system
uses, keys in the order declared here. `ExecutionResult` and its parts are the engines'
own (`engines.result`, which cannot import workbench) and travel by their own codec.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Self

from engines.result import (
    ContextRef,
    ExecutionError,
    ExecutionResult,
    JsonValue,
    ResultEntry,
    Usage,
)
from workbench.protocol.codec import WireType, wire
from workbench.protocol.errors import SandboxError, create_error_from_response

__all__ = [
    "CHECKPOINTS_FEATURE",
    "CONTEXT_FORK_FEATURE",
    "EXECUTION_TIMEOUT_FEATURE",
    "FILES_BATCH_FEATURE",
    "BatchEntry",
    "BatchEntryResult",
    "CancelResult",
    "Checkpoint",
    "CheckpointList",
    "CodeContext",
    "ContextInfo",
    "ContextList",
    "ContextRef",
    "CoreInfo",
    "ExecutionError",
    "ExecutionResult",
    "ExistsResult",
    "FileInfo",
    "FileOpResult",
    "FilePermissions",
    "FileState",
    "FileVersion",
    "FilesBatchLimits",
    "FilesBatchResult",
    "Health",
    "HistoryEntry",
    "HistoryList",
    "JsonValue",
    "ListFilesResult",
    "MkdirResult",
    "ReadFileResult",
    "ResultEntry",
    "RuntimeInfo",
    "RuntimeList",
    "SandboxInfo",
    "SandboxList",
    "SandboxSummary",
    "SnapshotInfo",
    "Success",
    "UnavailableRuntime",
    "Usage",
    "VersionReport",
    "mismatch_warning",
    "mismatched_runtimes",
    "parse_iso",
]


def parse_iso(value: str) -> datetime:
    """Parse a JavaScript `toISOString()` timestamp into an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class CoreInfo(WireType):
    """What runs the sandboxes behind a gateway: the pinned `@sandbox-workers/core` of the
    Worker gateway, or the workbench itself locally and in `serve`. `interpreter_protocol`
    is the one runtime protocol (spec 2.2.2) it accepts."""

    name: str
    version: str
    interpreter_protocol: int = 1


@dataclass(frozen=True)
class RuntimeInfo(WireType):
    """One binding a backend offers (`GET /v1/runtimes` entry, spec 2.2.2 plus binding).
    `engine` is the runtime's own version string, `protocol` its interpreter protocol."""

    binding: str
    language: str
    engine: str
    contexts: bool
    protocol: int = 1


@dataclass(frozen=True)
class UnavailableRuntime(WireType):
    """A binding the Worker gateway could not probe (`unavailable` entries)."""

    binding: str
    error: str


FILES_BATCH_FEATURE = "files-batch"
"""The `Health.features` name of `POST /v1/sandboxes/:id/files/batch`."""
EXECUTION_TIMEOUT_FEATURE = "execution-timeout"
"""`timeoutMs` in an execute body is the execution's own deadline, and an execution whose
request is given up is cancelled."""
OUTPUT_STREAM_FEATURE = "output-stream"
"""An execute request that accepts `application/x-ndjson` gets the guest's output lines
as they are written (docs/gateway-protocol.md); a gateway without it answers at the end."""
CONTEXT_FORK_FEATURE = "context-fork"
"""`POST /contexts/:id/fork` makes a new context from a copy of the context's state."""
CHECKPOINTS_FEATURE = "checkpoints"
"""`…/contexts/:id/checkpoints` saves, lists, restores and deletes named states."""
SANDBOX_MUST_EXIST_FEATURE = "sandbox-must-exist"
"""A sandbox request carrying `MUST_EXIST_HEADER` is answered 404 `SANDBOX_NOT_FOUND`, and
makes nothing, when its sandbox does not exist (spec 2.4 would make it, empty)."""
CONTEXT_INSPECT_FEATURE = "context-inspect"
"""`POST /contexts/:id/inspect` (and `…/inspect/value`) lists a context's names without
running code in it."""


@dataclass(frozen=True)
class FilesBatchLimits(WireType):
    """What one `POST /files/batch` may hold on this server (`Health.files_batch`)."""

    max_entries: int
    max_bytes: int
    """Of the JSON body, after gzip decoding."""


@dataclass(frozen=True)
class Health(WireType):
    """`GET /v1/health`: the server's versions, its core's and each runtime's, and the
    protocol extensions it serves (so a client needs no probe request to find them)."""

    ok: bool
    version: str
    protocol: int
    core: CoreInfo | None = field(default=None, metadata=wire(omit_none=True))
    """None from a server older than the versions report."""
    runtimes: list[RuntimeInfo] = field(default_factory=list)
    unavailable: list[UnavailableRuntime] | None = field(
        default=None, metadata=wire(omit_none=True)
    )
    features: list[str] = field(default_factory=list)
    """Extensions served, such as `FILES_BATCH_FEATURE`; empty from an older server."""
    files_batch: FilesBatchLimits | None = field(default=None, metadata=wire(omit_none=True))
    """The limits of `files/batch`, when `features` lists it."""

    @property
    def batch_limits(self) -> FilesBatchLimits | None:
        """The `files/batch` limits when the server offers the operation, else None."""
        if FILES_BATCH_FEATURE not in self.features or self.files_batch is None:
            return None
        return self.files_batch


@dataclass(frozen=True)
class RuntimeList(WireType):
    """`GET /v1/runtimes`."""

    runtimes: list[RuntimeInfo]
    unavailable: list[UnavailableRuntime] | None = field(
        default=None, metadata=wire(omit_none=True)
    )
    core: CoreInfo | None = field(default=None, metadata=wire(omit_none=True))


def mismatched_runtimes(core: CoreInfo | None, runtimes: list[RuntimeInfo]) -> list[RuntimeInfo]:
    """The runtimes speaking another interpreter protocol than `core` accepts: the core
    refuses to create contexts on them (spec 7.2), and runs in their contexts fail."""
    if core is None:
        return []
    return [runtime for runtime in runtimes if runtime.protocol != core.interpreter_protocol]


def mismatch_warning(core: CoreInfo, runtime: RuntimeInfo) -> str:
    """What to tell a person about one of `mismatched_runtimes`."""
    return (
        f"runtime {runtime.binding} ({runtime.engine}) speaks interpreter protocol "
        f"{runtime.protocol}, but {core.name} {core.version} expects "
        f"{core.interpreter_protocol}: its code contexts will fail; deploy the runtime at "
        "the pinned version (sandbox-workbench gateway init)"
    )


@dataclass(frozen=True)
class VersionReport:
    """What a `GET /v1/health` or `GET /v1/runtimes` answer of any backend says about
    versions (docs/gateway-protocol.md, "Versions")."""

    core: str
    """`<name> <version>` of what runs the sandboxes; "" when the server does not say."""
    interpreter_protocol: int | None
    """The one runtime protocol that core accepts; None when the server does not say."""
    runtimes: list[RuntimeInfo]
    mismatched: list[RuntimeInfo]
    """The runtimes speaking another protocol than the core accepts."""
    warnings: list[str]
    """One sentence for each of `mismatched`."""

    @classmethod
    def read(cls, answer: Any) -> VersionReport:
        """The report of a decoded answer; empty for an answer of another shape."""
        try:
            listed = RuntimeList.from_json(answer)
        except (KeyError, TypeError, ValueError, OverflowError):  # `1e999` too (review)
            return cls("", None, [], [], [])
        core = listed.core
        if core is None:
            return cls("", None, listed.runtimes, [], [])
        mismatched = mismatched_runtimes(core, listed.runtimes)
        return cls(
            f"{core.name} {core.version}",
            core.interpreter_protocol,
            listed.runtimes,
            mismatched,
            [mismatch_warning(core, runtime) for runtime in mismatched],
        )


@dataclass(frozen=True)
class SandboxSummary(WireType):
    """A `GET /v1/sandboxes` entry."""

    id: str
    created_at: str
    last_used: str
    expires_at: int | None = field(metadata=wire(raw=True))
    """As the gateway sent it (a fractional TTL makes it a float on the real system)."""


@dataclass(frozen=True)
class SandboxList(WireType):
    """`GET /v1/sandboxes`."""

    sandboxes: list[SandboxSummary]


@dataclass(frozen=True)
class Success(WireType):
    """The body of a change that returns nothing else (destroy, env, delete context)."""

    success: bool = field(default=True, init=False)


@dataclass(frozen=True)
class CancelResult(WireType):
    """`POST /v1/sandboxes/:id/cancel` (a serve extension)."""

    cancelled: bool


LOCAL_ONLY_CONTEXT_LANGUAGES = frozenset({"ruby"})
"""Languages whose code contexts only the local backend offers, and only when asked to:
the deployed system runs Ruby statelessly (spec 1.4: its initial memory is too large to
snapshot per context)."""


@dataclass(frozen=True)
class CodeContext(WireType):
    """A code context as `POST /contexts` and `GET /contexts` return it (spec 2.4.2)."""

    id: str
    binding: str
    language: str
    cwd: str
    created_at: str
    last_used: str
    start_cwd: str | None = field(default=None, metadata=wire(omit_none=True))
    """The cwd it was created in, where that is known apart from `cwd` (a listing's
    `ContextInfo.start_cwd`); never in the spec's answers."""

    @property
    def local_only(self) -> bool:
        """Only the local backend has contexts of this language (`--ruby-contexts`)."""
        return self.language in LOCAL_ONLY_CONTEXT_LANGUAGES

    @property
    def created(self) -> datetime:
        return parse_iso(self.created_at)

    @property
    def last_used_at(self) -> datetime:
        return parse_iso(self.last_used)


@dataclass(frozen=True)
class ContextList(WireType):
    """`GET /contexts`."""

    contexts: list[CodeContext]


@dataclass(frozen=True)
class SnapshotInfo(WireType):
    """Spec 7.7 `SnapshotInfo`."""

    build: str
    pages: int
    bytes: int
    stored_bytes: int
    taken_at: int
    stale: bool = False


@dataclass(frozen=True)
class ContextInfo(WireType):
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
    start_cwd: str | None = field(default=None, metadata=wire(omit_none=True))
    """The cwd the context was created in, which its first run starts in (an extension of
    serve and the local backend; None elsewhere, and for a context stored before it)."""

    @property
    def local_only(self) -> bool:
        """Only the local backend has contexts of this language (`--ruby-contexts`)."""
        return self.language in LOCAL_ONLY_CONTEXT_LANGUAGES


@dataclass(frozen=True)
class SandboxInfo(WireType):
    """Spec 8.2 `SandboxInfo` (`GET /`)."""

    id: str
    created_at: str
    last_used: str
    env_vars: dict[str, str]
    contexts: list[ContextInfo]
    workspace_files: int = field(metadata=wire(name="files", group="workspace", missing=0))
    workspace_bytes: int = field(metadata=wire(name="bytes", group="workspace", missing=0))
    file_api: bool = field(metadata=wire(missing=True))
    expires_at: int | None = field(metadata=wire(raw=True))


@dataclass(frozen=True)
class HistoryEntry(WireType):
    """One past execution of a context (`GET /contexts/:id/history`, a serve extension)."""

    seq: int
    code: str
    started_at: int
    result: ExecutionResult | None = None


@dataclass(frozen=True)
class HistoryList(WireType):
    """`GET /contexts/:id/history`."""

    history: list[HistoryEntry]


@dataclass(frozen=True)
class Checkpoint(WireType):
    """A context's state saved under a name (`…/contexts/:id/checkpoints`, an extension
    of serve and the local backend)."""

    name: str
    context_id: str
    created_at: str
    executions: int
    """The context's execution count when it was saved."""
    bytes: int
    """Memory the checkpoint holds apart from the engine's image (4 KiB blocks, shared
    with the snapshots and checkpoints that hold the same ones)."""


@dataclass(frozen=True)
class CheckpointList(WireType):
    """`GET /contexts/:id/checkpoints`: the context's, oldest first, and what the
    sandbox's checkpoints hold against its budget."""

    checkpoints: list[Checkpoint]
    sandbox_bytes: int
    """The `bytes` of every checkpoint of the sandbox, summed."""
    budget_bytes: int
    """The most `sandbox_bytes` may reach; a save past it is refused."""


@dataclass(frozen=True)
class InspectedName(WireType):
    """One name the user made in a context, as the context inspector lists it."""

    name: str
    """As the language writes it: `x` (Python, JavaScript, a Ruby local), `$x`, `@x`, `%x`,
    `&x` (Perl), `$x` or `X` (a Ruby global or constant)."""
    type: str
    repr: str
    """Cut to one short line; `InspectedValue` has it whole."""
    length: int | None = None
    """Items or characters, where the value has a length."""
    bytes: int | None = None
    """Memory the value holds, where the language can tell."""


@dataclass(frozen=True)
class ContextInspection(WireType):
    """`POST /contexts/:id/inspect`: the user's names in a context's REPL state."""

    context_id: str
    execution_count: int
    """The run whose state this is."""
    names: list[InspectedName]
    more: int = 0
    """Names left out past the inspector's limit."""
    ran_code: bool = False
    """The inspection ran as an execution of the context (a gateway without
    `context-inspect`): it counted, and its history has it."""


@dataclass(frozen=True)
class InspectedValue(WireType):
    """`POST /contexts/:id/inspect/value`: one name's value written out in full, a page
    at a time (`offset` and `total` count characters)."""

    context_id: str
    name: str
    type: str
    repr: str
    offset: int
    total: int
    ran_code: bool = False


@dataclass(frozen=True)
class FilePermissions(WireType):
    """`FileInfo.permissions` (spec 5.3): always readable and writable."""

    readable: bool
    writable: bool
    executable: bool


@dataclass(frozen=True)
class FileInfo(WireType):
    """Spec 5.3 `FileInfo`."""

    name: str
    absolute_path: str
    relative_path: str
    type: str
    size: int
    modified_at: str
    mode: str
    permissions: FilePermissions = field(init=False)
    """Derived from `type`: only directories are executable."""

    def __post_init__(self) -> None:
        permissions = FilePermissions(True, True, self.is_directory)
        object.__setattr__(self, "permissions", permissions)

    @property
    def is_directory(self) -> bool:
        return self.type == "directory"


@dataclass(frozen=True)
class FileOpResult(WireType):
    """`write`, `delete`, `rename`, `move` responses (spec 5.2); `new_path` for the last two."""

    success: bool = field(default=True, init=False)
    path: str
    new_path: str | None = field(default=None, kw_only=True, metadata=wire(omit_none=True))
    timestamp: str


@dataclass(frozen=True)
class MkdirResult(WireType):
    success: bool = field(default=True, init=False)
    path: str
    recursive: bool
    timestamp: str


@dataclass(frozen=True)
class ReadFileResult(WireType):
    """`read` response (spec 5.2); `content` is text, or base64 when `encoding` is base64."""

    success: bool = field(default=True, init=False)
    path: str
    content: str
    encoding: str = field(metadata=wire(missing="utf-8"))
    is_binary: bool = field(metadata=wire(missing=False))
    mime_type: str = field(metadata=wire(missing="application/octet-stream"))
    size: int = field(metadata=wire(missing=0))
    timestamp: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """As every wire type; base64 that does not decode fails here (binascii.Error, a
        ValueError), not where the bytes are first used."""
        read = super().from_json(data)
        if read.encoding == "base64":
            _ = read.data
        return read

    @cached_property
    def data(self) -> bytes:
        """The file's bytes (decoded from base64 when the read asked for it)."""
        if self.encoding == "base64":
            return base64.b64decode(self.content)
        return self.content.encode()


@dataclass(frozen=True)
class ListFilesResult(WireType):
    success: bool = field(default=True, init=False)
    path: str
    files: list[FileInfo]
    count: int
    timestamp: str


@dataclass(frozen=True)
class ExistsResult(WireType):
    success: bool = field(default=True, init=False)
    path: str
    exists: bool
    timestamp: str


# ----- files/batch (an extension: docs/gateway-protocol.md) ------------------------------


@dataclass(frozen=True)
class FileVersion(WireType):
    """A precondition's expected file: its size and `modifiedAt` as `list` reports them."""

    size: int
    modified_at: str


@dataclass(frozen=True)
class FileState(WireType):
    """What is at a path now (a failed precondition's `context.current`)."""

    type: str
    size: int
    modified_at: str

    @property
    def is_directory(self) -> bool:
        return self.type == "directory"


@dataclass(frozen=True)
class BatchEntry(WireType):
    """One entry of `POST /files/batch`: a `POST /files` body of a changing op (write,
    mkdir, delete, rename, move) with an optional precondition on `path`: `if_match`
    (a file of that size and `modifiedAt`) or `if_none_match="*"` (nothing there)."""

    op: str
    path: str
    content: str | None = field(default=None, metadata=wire(omit_none=True))
    encoding: str | None = field(default=None, metadata=wire(omit_none=True))
    new_path: str | None = field(default=None, metadata=wire(omit_none=True))
    recursive: bool | None = field(default=None, metadata=wire(omit_none=True))
    force: bool | None = field(default=None, metadata=wire(omit_none=True))
    if_match: FileVersion | None = field(default=None, metadata=wire(omit_none=True))
    if_none_match: str | None = field(default=None, metadata=wire(omit_none=True))

    @classmethod
    def write(
        cls,
        path: str,
        content: str | bytes,
        *,
        if_match: FileVersion | None = None,
        if_absent: bool = False,
    ) -> BatchEntry:
        """Write `content` (bytes travel as base64, text as UTF-8)."""
        if isinstance(content, bytes):
            text, encoding = base64.b64encode(content).decode("ascii"), "base64"
        else:
            text, encoding = content, "utf-8"
        return cls(
            "write",
            path,
            text,
            encoding,
            if_match=if_match,
            if_none_match="*" if if_absent else None,
        )

    @classmethod
    def mkdir(cls, path: str, *, recursive: bool | None = None) -> BatchEntry:
        return cls("mkdir", path, recursive=recursive)

    @classmethod
    def delete(
        cls,
        path: str,
        *,
        recursive: bool | None = None,
        force: bool | None = None,
        if_match: FileVersion | None = None,
    ) -> BatchEntry:
        return cls("delete", path, recursive=recursive, force=force, if_match=if_match)

    @classmethod
    def rename(cls, path: str, new_path: str, *, if_match: FileVersion | None = None) -> BatchEntry:
        return cls("rename", path, new_path=new_path, if_match=if_match)


@dataclass(frozen=True)
class BatchEntryResult(WireType):
    """One entry's outcome, in request order: `result` (the `POST /files` answer) when
    `ok`, else `error` (the `ErrorResponse` that request would have got, or
    `PRECONDITION_FAILED`)."""

    ok: bool
    result: dict[str, JsonValue] | None = field(
        default=None, metadata=wire(omit_none=True, raw=True)
    )
    error: dict[str, JsonValue] | None = field(
        default=None, metadata=wire(omit_none=True, raw=True)
    )

    @property
    def timestamp(self) -> str:
        """The answer's `timestamp` (for a write: the file's `modifiedAt`)."""
        source = self.result if self.ok else self.error
        value = (source or {}).get("timestamp")
        return value if isinstance(value, str) else ""

    @property
    def failure(self) -> SandboxError | None:
        """The entry's error as the class `POST /files` would have raised; None if ok."""
        if self.ok:
            return None
        status = (self.error or {}).get("httpStatus")
        return create_error_from_response(
            self.error, status if isinstance(status, int) else None, None
        )

    @property
    def current(self) -> FileState | None:
        """After a failed precondition: what is at the path now (None: nothing)."""
        context = (self.error or {}).get("context")
        found = context.get("current") if isinstance(context, dict) else None
        return FileState.from_json(found) if isinstance(found, dict) else None


@dataclass(frozen=True)
class FilesBatchResult(WireType):
    """`POST /files/batch`: one result per entry, in order, and when the sandbox the
    entries went to was made (a value that changes between two batches says it was
    destroyed and made again in between: what a folder sync put there is gone)."""

    results: list[BatchEntryResult]
    timestamp: str
    sandbox_created_at: str | None = field(default=None, metadata=wire(omit_none=True))
