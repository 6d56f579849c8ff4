"""The replayable transcript file (`"format": "sandbox-workbench-transcript"`, version 1).

A transcript holds what is needed to run a context's cells again elsewhere: the
context's binding, cwd and env vars, the sandbox's env vars, optionally the workspace
files, and each cell's code with the outcome observed when it ran. A file is untrusted
input: `parse_transcript` checks every field and names the first bad one.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

from workbench.api import (
    MAX_WORKSPACE_ENTRIES,
    ResultEntry,
    code_problem,
    encodable,
    is_valid_env_key,
)
from workbench.transcripts.outcomes import Outcome, OutcomeError

FORMAT: Final = "sandbox-workbench-transcript"
VERSION: Final = 1
MAX_TRANSCRIPT_BYTES: Final = 64 * 1024 * 1024
"""Largest transcript file read."""
MAX_WORKSPACE_BYTES: Final = 24 * 1024 * 1024
"""Most file bytes a transcript carries: more than a workspace holds (16 MiB), and in
base64 well within `MAX_TRANSCRIPT_BYTES`."""
TRANSCRIPT_FILE_MODE: Final = 0o600
"""Transcripts may hold env var values and printed secrets."""

EnvVars = Mapping[str, str | None]
"""Env vars as recorded: a `None` value is a key whose value was not exported."""


class TranscriptError(ValueError):
    """A transcript file that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class WorkspaceFile:
    path: str
    """Relative to /workspace."""
    content: bytes


@dataclass(frozen=True)
class Workspace:
    """The /workspace to recreate before the first cell: directories (parents first,
    empty ones included) and files."""

    directories: tuple[str, ...] = ()
    files: tuple[WorkspaceFile, ...] = ()

    @property
    def size(self) -> int:
        return sum(len(item.content) for item in self.files)


@dataclass(frozen=True)
class ContextSpec:
    """How the context was created."""

    binding: str
    language: str
    cwd: str = "/workspace"
    env_vars: EnvVars = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedCell:
    code: str
    outcome: Outcome | None
    """What the cell did when it ran (None: not known, e.g. a request that failed)."""


@dataclass(frozen=True)
class Transcript:
    context: ContextSpec
    cells: tuple[RecordedCell, ...]
    sandbox_env_vars: EnvVars = field(default_factory=dict)
    workspace: Workspace | None = None
    """None when the files were not exported."""
    source: Mapping[str, str] = field(default_factory=dict)
    """Where it was recorded (profile, sandbox, context): shown, never acted on."""

    def to_json(self) -> dict[str, Any]:
        workspace = self.workspace
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": dict(self.source),
            "context": {
                "binding": self.context.binding,
                "language": self.context.language,
                "cwd": self.context.cwd,
                "envVars": dict(self.context.env_vars),
            },
            "sandbox": {"envVars": dict(self.sandbox_env_vars)},
            "workspace": None
            if workspace is None
            else {
                "directories": list(workspace.directories),
                "files": [
                    {"path": item.path, "content": base64.b64encode(item.content).decode()}
                    for item in workspace.files
                ],
            },
            "cells": [
                {
                    "code": cell.code,
                    "outcome": None if cell.outcome is None else cell.outcome.to_json(),
                }
                for cell in self.cells
            ],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------- reading


class _Fields:
    """Typed access to one JSON object of the file, naming the field in every error."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise TranscriptError(f"{where or 'the file'} must be a JSON object")
        self.value = value
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, default: Any = None) -> Any:
        return self.value.get(key, default)

    def text(self, key: str, *, default: str | None = None, non_empty: bool = False) -> str:
        value = self.value.get(key, default)
        if not isinstance(value, str) or (non_empty and not value):
            kind = "a non-empty string" if non_empty else "a string"
            raise TranscriptError(f"{self.name(key)} must be {kind}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.value.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise TranscriptError(f"{self.name(key)} must be a list of strings")
        return tuple(value)

    def objects(self, key: str) -> list[_Fields]:
        value = self.value.get(key, [])
        if not isinstance(value, list):
            raise TranscriptError(f"{self.name(key)} must be a list")
        return [_Fields(item, f"{self.name(key)}[{index}]") for index, item in enumerate(value)]

    def env_vars(self, key: str) -> dict[str, str | None]:
        value = self.value.get(key, {})
        if not isinstance(value, dict):
            raise TranscriptError(f"{self.name(key)} must be an object")
        for name, item in value.items():
            if not is_valid_env_key(name):
                raise TranscriptError(f"{self.name(key)}: {name!r} is not a valid env var name")
            if item is not None and not isinstance(item, str):
                raise TranscriptError(f"{self.name(key)}.{name} must be a string or null")
        return dict(value)


def _workspace_path(text: str, where: str) -> str:
    """A path relative to /workspace, without `.`/`..` or empty segments."""
    segments = text.split("/")
    if (
        not text
        or text.startswith("/")
        or "\x00" in text
        or any(segment in ("", ".", "..") for segment in segments)
    ):
        raise TranscriptError(f"{where} must be a relative path inside /workspace, got {text!r}")
    return text


def _code(cell: _Fields) -> str:
    """A cell's code, as a gateway takes it (found before the replay runs any cell)."""
    code = cell.text("code", non_empty=True)
    problem = code_problem(code)
    if problem is not None:
        raise TranscriptError(f"{cell.name('code')}: {problem}")
    return code


def _outcome(value: Any, where: str) -> Outcome | None:
    if value is None:
        return None
    fields = _Fields(value, where)
    results = []
    for entry in fields.objects("results"):
        keys = set(entry.value)
        if keys == {"text"} and isinstance(entry.value["text"], str):
            results.append(ResultEntry(text=entry.value["text"]))
        elif keys == {"json"}:
            results.append(ResultEntry(json=entry.value["json"], is_json=True))
        else:
            raise TranscriptError(f'{entry.where} must be {{"text": string}} or {{"json": value}}')
    error_value = fields.get("error")
    error = None
    if error_value is not None:
        error_fields = _Fields(error_value, fields.name("error"))
        error = OutcomeError(error_fields.text("name"), error_fields.text("message"))
    return Outcome(fields.strings("stdout"), fields.strings("stderr"), tuple(results), error)


def _workspace(value: Any) -> Workspace | None:
    if value is None:
        return None
    fields = _Fields(value, "workspace")
    unknown = sorted(set(fields.value) - {"directories", "files"})
    if unknown:  # files named as keys, say: ignored, the replay lacked them unsaid (QA)
        named = ", ".join(repr(key) for key in unknown[:3])
        raise TranscriptError(f"workspace holds directories and files, not {named}")
    directories = tuple(
        _workspace_path(path, f"workspace.directories[{index}]")
        for index, path in enumerate(fields.strings("directories"))
    )
    files = []
    for entry in fields.objects("files"):
        path = _workspace_path(entry.text("path"), entry.name("path"))
        try:
            content = base64.b64decode(entry.text("content"), validate=True)
        except binascii.Error as error:
            raise TranscriptError(f"{entry.name('content')} is not valid base64: {error}") from None
        files.append(WorkspaceFile(path, content))
    file_paths = {file.path for file in files}
    entries = set(directories) | file_paths
    for path in [*directories, *file_paths]:
        for parent in map(str, PurePosixPath(path).parents[:-1]):  # `.` is /workspace
            if parent in file_paths:  # the sandbox refuses it midway through a replay
                raise TranscriptError(f"workspace: {path} lies under the file {parent}")
            entries.add(parent)
    if len(entries) > MAX_WORKSPACE_ENTRIES:
        raise TranscriptError(
            f"workspace: {len(entries):,} entries, more than a sandbox holds "
            f"({MAX_WORKSPACE_ENTRIES:,})"
        )
    return Workspace(directories, tuple(files))


def parse_transcript(data: Any) -> Transcript:
    """A transcript from its parsed JSON; `TranscriptError` names the first bad field."""
    top = _Fields(data, "")
    if top.get("format") != FORMAT:
        raise TranscriptError(f'not a sandbox-workbench transcript ("format" is not "{FORMAT}")')
    version = top.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TranscriptError('"version" must be a positive integer')
    if version > VERSION:
        raise TranscriptError(
            f"transcript version {version} is newer than this sandbox-workbench reads "
            f"(up to {VERSION}); upgrade sandbox-workbench"
        )
    context = _Fields(top.get("context"), "context")
    sandbox = _Fields(top.get("sandbox", {}), "sandbox")
    source = top.get("source", {})
    if not isinstance(source, dict) or not all(isinstance(v, str) for v in source.values()):
        raise TranscriptError("source must be an object of strings")
    cells = tuple(
        RecordedCell(_code(cell), _outcome(cell.get("outcome"), cell.name("outcome")))
        for cell in top.objects("cells")
    )
    return Transcript(
        context=ContextSpec(
            binding=context.text("binding", non_empty=True),
            language=context.text("language", non_empty=True),
            cwd=context.text("cwd", default="/workspace", non_empty=True),
            env_vars=context.env_vars("envVars"),
        ),
        cells=cells,
        sandbox_env_vars=sandbox.env_vars("envVars"),
        workspace=_workspace(top.get("workspace")),
        source=dict(source),
    )


MAX_TRANSCRIPT_VALUES: Final = 1_000_000
"""Most JSON values a transcript file may hold (counted before it is parsed): parsed,
five million tiny cells in 64 MiB took 2.4 GiB."""
_JSON_STRINGS: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_MAX_INTEGER_DIGITS: Final = 4_300
"""Python's own limit on converting digits to an integer."""


def read_transcript(path: Path) -> Transcript:
    """Read and check a transcript file; every problem is a one-line `TranscriptError`.
    Only a regular file is read (opened without blocking: a FIFO waits for a writer)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise TranscriptError(f"cannot read {path}: it is not a regular file")
            raw = file.read(MAX_TRANSCRIPT_BYTES + 1)
    except OSError as error:
        raise TranscriptError(f"cannot read {path}: {error.strerror or error}") from None
    if len(raw) > MAX_TRANSCRIPT_BYTES:
        raise TranscriptError(f"{path} is larger than {MAX_TRANSCRIPT_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TranscriptError(f"{path} is not UTF-8 text") from None
    structure = _JSON_STRINGS.sub("", text)
    if sum(map(structure.count, ",[{")) > MAX_TRANSCRIPT_VALUES:
        raise TranscriptError(f"{path} holds more than {MAX_TRANSCRIPT_VALUES:,} values")
    try:
        data = json.loads(text, parse_constant=_not_json, parse_int=_integer)
    except json.JSONDecodeError as error:
        raise TranscriptError(
            f"{path} is not JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    except ValueError as error:  # from the hooks below
        raise TranscriptError(f"{path}: {error}") from None
    except RecursionError:
        raise TranscriptError(f"{path} nests too deeply") from None
    try:
        return parse_transcript(data)
    except TranscriptError as error:
        raise TranscriptError(f"{path}: {error}") from None
    except RecursionError:
        raise TranscriptError(f"{path} nests too deeply") from None


def _not_json(constant: str) -> Any:
    """`NaN` and `Infinity`, which Python's parser takes and JSON does not."""
    raise ValueError(f"{constant} is not a JSON value")


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of over {_MAX_INTEGER_DIGITS:,} digits")
    return int(digits)


def write_private_text(path: Path, text: str, *, overwrite: bool) -> None:
    """Write `text` to `path` as a private file (0600). Without `overwrite` an existing
    file raises FileExistsError; a symlink at `path` is never followed (OSError). With
    it, a regular file is replaced whole or not at all (written beside it, then renamed
    over it, so a failed write such as a full disk keeps the old one; the new file has
    its own mode and links); anything else there (a FIFO, `/dev/null`) is written to as
    it is. A lone surrogate in `text` is written as its escape (`encodable`)."""
    data = encodable(text).encode("utf-8")
    if not overwrite:
        _write_new(path, data)
        return
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None and stat.S_ISLNK(found.st_mode):
        raise OSError(errno.ELOOP, "a symbolic link is not replaced", str(path))
    if found is not None and not stat.S_ISREG(found.st_mode):
        flags = os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(os.open(path, flags), "wb") as stream:
            stream.write(data)
        return
    temporary = path.with_name(f".sbw-{secrets.token_hex(6)}.tmp")  # short: any name fits
    try:
        _write_new(temporary, data)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from None


def _write_new(path: Path, data: bytes) -> None:
    """Create `path` (0600, never through a symlink) holding `data`; a failed or
    interrupted write removes the file it created."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, TRANSCRIPT_FILE_MODE)
    try:
        with open(descriptor, "wb") as file:
            file.write(data)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
