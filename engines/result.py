"""`ExecutionResult` (spec 3): one definition used by engines, store, server, remote and TUI;
and what the workbench hands an engine and gets back beside it (`Limits`, `ExecutionReport`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not at run time: the CLI imports this module and should stay quick
    from engines.vfs import PathState

JsonValue = Any

LIMIT_ERROR = "ExecutionLimitError"
"""`error.name` of a resource-limit outcome (spec 9.2): fuel, output, result, time, cancel."""
CANCELLED = "Execution cancelled"
"""`error.message` of a cancelled run (a limit: `LIMIT_ERROR`)."""
FUEL_EXHAUSTED = "Execution fuel exhausted"
"""`error.message` of a run that used up its fuel (a limit: `LIMIT_ERROR`)."""
TIMED_OUT = "Execution timed out"
"""How `error.message` of a run stopped at its wall-clock limit begins."""
ENGINE_ERROR = "EngineError"
"""`error.name` of a host-side failure (the engine could not run or answer)."""
HOST_MESSAGE_CHARS = 2048
"""Longest host-side error message put in a result."""
RESET_NOTE = "the interpreter was reset after this error"
"""The note of a run whose error ended its interpreter (`reset_note`)."""


def reset_note(restorable: bool) -> str:
    """The note that explains what an error that ended the interpreter means for the next run."""
    return RESET_NOTE + ("; the next run restores the last snapshot" if restorable else "")


@dataclass(frozen=True)
class ResultEntry:
    """One entry of `results`: exactly one of `text` or `json` is set."""

    text: str | None = None
    json: JsonValue = None
    is_json: bool = False

    def to_json(self) -> dict[str, JsonValue]:
        return {"json": self.json} if self.is_json else {"text": self.text}

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> ResultEntry:
        if "json" in data:
            return cls(json=data["json"], is_json=True)
        return cls(text=data.get("text"))


@dataclass(frozen=True)
class ExecutionError:
    """`error` (spec 3.3)."""

    name: str
    message: str
    traceback: list[str] = field(default_factory=list)
    line_number: int | None = None

    def to_json(self) -> dict[str, JsonValue]:
        data: dict[str, JsonValue] = {
            "name": self.name,
            "message": self.message,
            "traceback": list(self.traceback),
        }
        if self.line_number is not None:
            data["lineNumber"] = self.line_number
        return data

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> ExecutionError:
        return cls(
            name=str(data.get("name", "")),
            message=str(data.get("message", "")),
            traceback=[str(line) for line in data.get("traceback") or []],
            line_number=data.get("lineNumber"),
        )


@dataclass(frozen=True)
class Usage:
    """`usage` (spec 3.1)."""

    fuel_consumed: int
    fuel_limit: int
    memory_bytes: int

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "fuelConsumed": self.fuel_consumed,
            "fuelLimit": self.fuel_limit,
            "memoryBytes": self.memory_bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> Usage:
        return cls(int(data["fuelConsumed"]), int(data["fuelLimit"]), int(data["memoryBytes"]))


@dataclass(frozen=True)
class ContextRef:
    """`context` on a context run (spec 3.1)."""

    id: str
    cwd: str
    executions: int
    snapshot_ms: float | None = None
    expires_at: int | None = None

    # Same shape as ExecutionError's to_json/from_json: each wire type maps its own fields.
    def to_json(self) -> dict[str, JsonValue]:
        data: dict[str, JsonValue] = {"id": self.id, "cwd": self.cwd, "executions": self.executions}
        if self.snapshot_ms is not None:
            data["snapshotMs"] = self.snapshot_ms
        if self.expires_at is not None:
            data["expiresAt"] = self.expires_at
        return data

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> ContextRef:
        return cls(
            id=str(data["id"]),
            cwd=str(data["cwd"]),
            executions=int(data["executions"]),
            snapshot_ms=data.get("snapshotMs"),
            expires_at=data.get("expiresAt"),
        )


@dataclass(frozen=True)
class SessionState:
    """How a context run got its interpreter, and what it took (our extension, JSON key
    `workbench`).

    `boot` is `resident` (the live REPL state), `restored` (from the context's memory
    snapshot) or `fresh` (a new interpreter: earlier REPL state is gone); `notes` say why.
    """

    boot: str
    notes: tuple[str, ...] = ()
    cpu_ms: float | None = None
    """CPU time the engine took for the run, where measured."""
    snapshot_chunks: int | None = None
    """1 MiB chunks the run's snapshot wrote, counted as the reference stores them (spec
    7.7: every chunk holding a changed page); None when no snapshot was stored."""
    files_changed: int = 0
    """Paths of `/workspace` the run created, changed or deleted."""

    @property
    def state_lost(self) -> bool:
        return self.boot == "fresh"

    @property
    def boot_notes(self) -> tuple[str, ...]:
        """Notes on how this run got its interpreter: shown before its output."""
        return tuple(note for note in self.notes if not note.startswith(RESET_NOTE))

    @property
    def reset_notes(self) -> tuple[str, ...]:
        """Notes on what the run's error did to the interpreter: shown after the error."""
        return tuple(note for note in self.notes if note.startswith(RESET_NOTE))

    def to_json(self) -> dict[str, JsonValue]:
        data: dict[str, JsonValue] = {"boot": self.boot, "notes": list(self.notes)}
        if self.cpu_ms is not None:
            data["cpuMs"] = round(self.cpu_ms, 3)
        if self.snapshot_chunks is not None:
            data["snapshotChunks"] = self.snapshot_chunks
        if self.files_changed:
            data["filesChanged"] = self.files_changed
        return data

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> SessionState:
        cpu_ms, chunks, files = (
            data.get("cpuMs"),
            data.get("snapshotChunks"),
            data.get("filesChanged"),
        )
        return cls(
            str(data.get("boot", "")),
            tuple(str(n) for n in data.get("notes") or []),
            float(cpu_ms)
            if isinstance(cpu_ms, int | float) and not isinstance(cpu_ms, bool)
            else None,
            chunks if isinstance(chunks, int) and not isinstance(chunks, bool) else None,
            files if isinstance(files, int) and not isinstance(files, bool) else 0,
        )


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one execution, exactly as spec 3.1 puts it on the wire."""

    code: str
    language: str
    engine: str
    duration_ms: float
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    results: list[ResultEntry] = field(default_factory=list)
    error: ExecutionError | None = None
    usage: Usage | None = None
    execution_count: int | None = None
    context: ContextRef | None = None
    session: SessionState | None = None
    """Workbench extension on context runs: where the REPL state came from."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, JsonValue]:
        data: dict[str, JsonValue] = {
            "code": self.code,
            "language": self.language,
            "engine": self.engine,
            "durationMs": self.duration_ms,
            "logs": {"stdout": list(self.stdout), "stderr": list(self.stderr)},
            "results": [entry.to_json() for entry in self.results],
        }
        if self.error is not None:
            data["error"] = self.error.to_json()
        if self.usage is not None:
            data["usage"] = self.usage.to_json()
        if self.execution_count is not None:
            data["executionCount"] = self.execution_count
        if self.context is not None:
            data["context"] = self.context.to_json()
        if self.session is not None:
            data["workbench"] = self.session.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, JsonValue]) -> ExecutionResult:
        logs = data.get("logs") or {}
        error = data.get("error")
        usage = data.get("usage")
        context = data.get("context")
        extension = data.get("workbench")
        return cls(
            code=str(data.get("code", "")),
            language=str(data.get("language", "")),
            engine=str(data.get("engine", "")),
            duration_ms=float(data.get("durationMs", 0)),
            stdout=[str(line) for line in logs.get("stdout") or []],
            stderr=[str(line) for line in logs.get("stderr") or []],
            results=[ResultEntry.from_json(entry) for entry in data.get("results") or []],
            error=ExecutionError.from_json(error) if isinstance(error, dict) else None,
            usage=Usage.from_json(usage) if isinstance(usage, dict) else None,
            execution_count=data.get("executionCount"),
            context=ContextRef.from_json(context) if isinstance(context, dict) else None,
            session=SessionState.from_json(extension) if isinstance(extension, dict) else None,
        )


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD, as the reference's UTF-8 encoding
    of a JavaScript string does (TextEncoder): the guest envelope carries UTF-8."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


@dataclass(frozen=True)
class Limits:
    """Per-execution limits (spec 9.2) plus our wall-clock timeout (beyond the reference)."""

    fuel: int | None = None
    """None: the language's default budget."""
    memory_bytes: int | None = None
    """None: the language's default cap."""
    timeout_seconds: float | None = 30.0
    output_bytes: int = 32768
    output_writes: int = 200
    result_bytes: int = 65536


class Boot(Enum):
    """Where the instance that ran an execution came from."""

    RESIDENT = "resident"
    FRESH = "fresh"
    RESTORED = "restored"


@dataclass
class ExecutionReport:
    """An execution's result plus what the caller needs to keep the session honest."""

    result: ExecutionResult
    cwd: str
    boot: Boot
    invalidated: bool = False
    """The instance was discarded after this execution (trap or limit)."""
    notes: list[str] = field(default_factory=list)
    restore_point_dropped: bool = False
    """The restore point could not be used (restore failed, or the restored instance
    failed at once): it was dropped, and any stored copy must go too."""
    changes: list[PathState] = field(default_factory=list)
    """What the run changed in `/workspace` (`VirtualFS.finish`); empty after an error,
    whose changes were taken back."""
    cpu_ms: float | None = None
    """CPU time the execution took on the engine's thread (booting the instance, the
    guest, reading its answer); None where it was not measured."""


STREAMS = ("stdout", "stderr")
OutputListener = Callable[[str, bytes], None]
"""Told of guest output as it is written: the stream ("stdout" or "stderr") and bytes."""
