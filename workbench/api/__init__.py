"""The public, headless API of sandbox-workbench: import from here.

`Backend` is a place sandboxes live (the embedded local one from
`workbench.backends.local.open_local_backend`, a deployed gateway from
`workbench.backends.remote.open_remote_backend`), `SandboxClient` one sandbox in it. Both
answer with the protocol's types and raise its `SandboxError` classes; the modules behind
these names are private. `FileNotFoundError` and `FileExistsError` of the protocol would
shadow the builtins, so they are offered as `SandboxFileNotFoundError` and
`SandboxFileExistsError` (or `workbench.protocol.errors.FileNotFoundError`).
"""

from workbench.api.client import Backend, Interpreter, LineCallback, SandboxClient
from workbench.api.display import neutralise, short_id, without_controls
from workbench.api.engines import EngineInfo, EngineManager, EnginePrepareError, Progress
from workbench.api.transport import Transport
from workbench.core.clock import SYSTEM_CLOCK, Clock, FixedClock
from workbench.core.envvars import ENV_KEY_PATTERN, is_valid_env_key
from workbench.protocol.errors import (
    CodeExecutionError,
    ContextNotFoundError,
    ErrorCode,
    FileSystemError,
    FileTooLargeError,
    NotSupportedError,
    Operation,
    PermissionDeniedError,
    PreconditionFailedError,
    SandboxError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    ValidationFailedError,
)
from workbench.protocol.ids import SANDBOX_ID_PATTERN, sandbox_id_error
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import (
    CHECKPOINTS_FEATURE,
    CONTEXT_FORK_FEATURE,
    LOCAL_ONLY_CONTEXT_LANGUAGES,
    OUTPUT_STREAM_FEATURE,
    BatchEntry,
    BatchEntryResult,
    Checkpoint,
    CodeContext,
    ContextInfo,
    ContextRef,
    ExecutionError,
    ExecutionResult,
    ExistsResult,
    FileInfo,
    FileOpResult,
    FilesBatchLimits,
    FilesBatchResult,
    FileState,
    FileVersion,
    HistoryEntry,
    ListFilesResult,
    MkdirResult,
    ReadFileResult,
    ResultEntry,
    RuntimeInfo,
    SandboxInfo,
    SandboxSummary,
    SnapshotInfo,
    Usage,
    VersionReport,
    parse_iso,
)

__all__ = [
    "CHECKPOINTS_FEATURE",
    "CONTEXT_FORK_FEATURE",
    "ENV_KEY_PATTERN",
    "LOCAL_ONLY_CONTEXT_LANGUAGES",
    "OUTPUT_STREAM_FEATURE",
    "SANDBOX_ID_PATTERN",
    "SYSTEM_CLOCK",
    "Backend",
    "BatchEntry",
    "BatchEntryResult",
    "Checkpoint",
    "Clock",
    "CodeContext",
    "CodeExecutionError",
    "ContextInfo",
    "ContextNotFoundError",
    "ContextRef",
    "EngineInfo",
    "EngineManager",
    "EnginePrepareError",
    "ErrorCode",
    "ExecutionError",
    "ExecutionResult",
    "ExistsResult",
    "FileInfo",
    "FileOpResult",
    "FileState",
    "FileSystemError",
    "FileTooLargeError",
    "FileVersion",
    "FilesBatchLimits",
    "FilesBatchResult",
    "FixedClock",
    "HistoryEntry",
    "Interpreter",
    "LineCallback",
    "ListFilesResult",
    "MkdirResult",
    "NotSupportedError",
    "Operation",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "Progress",
    "ReadFileResult",
    "ResultEntry",
    "RuntimeInfo",
    "SandboxClient",
    "SandboxError",
    "SandboxFileExistsError",
    "SandboxFileNotFoundError",
    "SandboxInfo",
    "SandboxSummary",
    "SnapshotInfo",
    "Transport",
    "Usage",
    "ValidationFailedError",
    "VersionReport",
    "is_valid_env_key",
    "iso_from_ms",
    "neutralise",
    "parse_iso",
    "sandbox_id_error",
    "short_id",
    "without_controls",
]
