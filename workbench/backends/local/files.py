"""The files API, ``POST /files`` (spec 5, 4.3): one request body over a workspace tree;
and ``POST /files/batch`` (an extension, docs/gateway-protocol.md): many changing
requests in one, applied in order on one workspace.

The wire side of the tree: validating the body, JavaScript's reading of its values,
dispatching the op to `Workspace`, building the answer, and mapping a Node-style errno
to the exact ``ErrorResponse``.

In a batch, each entry succeeds or fails on its own with exactly the answer `POST /files`
would give it, or fails its precondition (`PRECONDITION_FAILED`, not applied). The caller
stores the changes of every applied entry in one transaction, so a failed commit fails the
request as a whole and takes every entry back out of the tree.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from workbench.core.changes import Change, ChangeSet
from workbench.core.paths import InvalidPathError, WorkspaceOSError, normalize
from workbench.core.workspace import Entry, Workspace
from workbench.protocol.errors import (
    ErrorCode,
    Operation,
    SandboxError,
    error_class_for,
    error_code_for_errno,
    error_response,
)
from workbench.protocol.http import FILES_BATCH_MAX_ENTRIES, validation_error
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import (
    BatchEntryResult,
    ExistsResult,
    FileInfo,
    FileOpResult,
    FilesBatchResult,
    FileState,
    FileVersion,
    ListFilesResult,
    MkdirResult,
    ReadFileResult,
)

__all__ = [
    "BATCH_OPS",
    "FILES_OPS",
    "FilesBody",
    "FilesResult",
    "file_info",
    "files_batch",
    "files_request",
    "invalid_request",
    "is_hidden",
    "looks_binary",
    "mime_type_for",
    "parse_files_body",
    "run_files_op",
    "workspace_error",
]

FilesResult = ReadFileResult | FileOpResult | MkdirResult | ListFilesResult | ExistsResult

FILES_OPS: Final = frozenset(Operation.FOR_FILES_OP)

MIME_TYPES: Final[Mapping[str, str]] = {
    ".json": "application/json",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".py": "text/x-python",
    ".pl": "text/x-perl",
    ".rb": "text/x-ruby",
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".html": "text/html",
    ".css": "text/css",
    ".csv": "text/csv",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
    ".pdf": "application/pdf",
    ".wasm": "application/wasm",
    ".zip": "application/zip",
    ".gz": "application/gzip",
}
_EXT_RE: Final = re.compile(r"\.[^./]+\Z")


def mime_type_for(path: str, is_binary: bool) -> str:
    """MIME type by lower-cased extension of the last segment (spec 5.4)."""
    m = _EXT_RE.search(path)
    found = MIME_TYPES.get(m.group(0).lower()) if m else None
    return found or ("application/octet-stream" if is_binary else "text/plain")


def looks_binary(data: bytes) -> bool:
    """Not valid UTF-8, or valid but containing NUL (spec 5.5); empty is not binary."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return b"\x00" in data


def is_hidden(relative_path: str) -> bool:
    """True when any segment of ``relative_path`` starts with ``.`` (spec 5.3)."""
    return any(seg.startswith(".") for seg in relative_path.split("/"))


def _decode_utf8(data: bytes) -> str:
    """``TextDecoder("utf-8")``: replacement characters and a leading BOM stripped."""
    return data.decode("utf-8-sig", errors="replace")


def _js_string(value: object) -> str:
    """JavaScript ``String(value)`` for JSON values (used for non-string ``content``)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, list):
        return ",".join("" if v is None else _js_string(v) for v in value)
    return "[object Object]"


def _js_truthy(value: object) -> bool:
    """JavaScript truthiness of a JSON value (``[]`` and ``{}`` are truthy)."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def file_info(entry: Entry, base: str, sandbox_created_at: str, now_ms: int) -> FileInfo:
    """``FileInfo`` (spec 5.3) for ``entry`` listed under directory ``base``."""
    name = entry.path.rsplit("/", 1)[-1]
    prefix = base + "/"
    rel = entry.path[len(prefix) :] if entry.path.startswith(prefix) else name
    is_dir = entry.type == "directory"
    return FileInfo(
        name,
        entry.path,
        rel,
        entry.type,
        entry.size,
        sandbox_created_at if is_dir else iso_from_ms(entry.updated_at or now_ms),
        "drwxr-xr-x" if is_dir else "-rw-r--r--",
    )


@dataclass(frozen=True)
class FilesBody:
    """A `POST /files` body that passed validation."""

    op: str
    raw_path: str
    new_path: str | None
    encoding: str
    body: dict[str, Any]

    @property
    def operation(self) -> str:
        return Operation.FOR_FILES_OP[self.op]


def invalid_request(message: str, timestamp: str) -> SandboxError:
    """VALIDATION_FAILED 400 with the files API's timestamp."""
    return error_class_for(ErrorCode.VALIDATION_FAILED)(
        error_response(ErrorCode.VALIDATION_FAILED, message, http_status=400, timestamp=timestamp)
    )


def parse_files_body(body: object, timestamp: str) -> FilesBody:
    """Validate a `POST /files` body (spec 5.1), in the spec's order."""
    if not isinstance(body, dict):
        raise invalid_request("Expected an object", timestamp)
    op = body.get("op")
    if not isinstance(op, str) or op not in FILES_OPS:
        raise invalid_request("Unknown op", timestamp)
    raw_path = body.get("path")
    if not isinstance(raw_path, str) or not raw_path:
        raise invalid_request("path is required", timestamp)
    new_path = body.get("newPath")
    if op in ("rename", "move") and (not isinstance(new_path, str) or not new_path):
        raise invalid_request(f"newPath is required for {op}", timestamp)
    if "encoding" in body and body["encoding"] not in ("utf-8", "base64"):
        raise invalid_request("encoding must be utf-8 or base64", timestamp)
    # Beyond the spec: a path the host could not materialize is a malformed request,
    # refused before anything runs (an escaping path stays the operation's 403).
    checked: list[tuple[str, object]] = [("path", raw_path)]
    if op in ("rename", "move"):
        checked.append(("newPath", new_path))
    for name, value in checked:
        try:
            normalize(value)
        except InvalidPathError as exc:
            raise invalid_request(f"Invalid {name}: {exc.reason}", timestamp) from None
        except WorkspaceOSError:
            pass
    return FilesBody(
        op,
        raw_path,
        new_path if isinstance(new_path, str) else None,
        body.get("encoding") or "utf-8",
        body,
    )


def files_request(
    workspace: Workspace, body: object, *, now: int, sandbox_created_at: str
) -> tuple[FilesResult, ChangeSet]:
    """Handle a whole ``POST /files`` body (spec 5.1-5.5, 4.3) on ``workspace``.

    Returns the answer and the change set to persist; raises the matching
    ``SandboxError`` subclass (with the exact ``ErrorResponse``) on failure.
    """
    parsed = parse_files_body(body, iso_from_ms(now))
    return run_files_op(workspace, parsed, now=now, sandbox_created_at=sandbox_created_at)


def workspace_error(exc: WorkspaceOSError, op: str, raw_path: str, timestamp: str) -> SandboxError:
    """The files API's error for a failed operation (spec 4.3)."""
    operation = Operation.FOR_FILES_OP[op]
    code = (
        ErrorCode.FILESYSTEM_ERROR
        if op == "mkdir" and exc.errno not in ("EACCES", "ENOSPC")
        else error_code_for_errno(exc.errno)
    )
    context = {"path": raw_path, "operation": operation, **exc.extra, "errno": exc.errno}
    return error_class_for(code)(
        error_response(code, exc.message, context, operation=operation, timestamp=timestamp)
    )


def run_files_op(
    workspace: Workspace, parsed: FilesBody, *, now: int, sandbox_created_at: str
) -> tuple[FilesResult, ChangeSet]:
    """Run a validated files op on ``workspace`` (the tree changes only when it succeeds)."""
    timestamp = iso_from_ms(now)
    op, raw_path, new_path, encoding, body = (
        parsed.op,
        parsed.raw_path,
        parsed.new_path,
        parsed.encoding,
        parsed.body,
    )
    recursive = _js_truthy(body.get("recursive"))
    cs = ChangeSet()
    try:
        path = normalize(raw_path).absolute
        result: FilesResult
        if op == "read":
            data, _ = workspace.read(raw_path)
            binary = looks_binary(data)
            content = (
                base64.b64encode(data).decode("ascii")
                if encoding == "base64"
                else _decode_utf8(data)
            )
            result = ReadFileResult(
                path,
                content,
                encoding,
                binary,
                mime_type_for(path, binary),
                len(data),
                timestamp,
            )
        elif op == "write":
            raw_content = body.get("content")
            text = "" if raw_content is None else _js_string(raw_content)
            cs = workspace.write(raw_path, text, now=now, encoding=encoding)
            result = FileOpResult(path, timestamp)
        elif op == "mkdir":
            cs = workspace.mkdir(raw_path, recursive=recursive)
            result = MkdirResult(path, recursive, timestamp)
        elif op == "delete":
            force = _js_truthy(body.get("force"))
            cs = workspace.delete(raw_path, recursive=recursive, force=force)
            result = FileOpResult(path, timestamp)
        elif op in ("rename", "move"):
            assert new_path is not None
            cs = workspace.rename(raw_path, new_path)
            result = FileOpResult(path, timestamp, new_path=normalize(new_path).absolute)
        elif op == "list":
            include_hidden = _js_truthy(body.get("includeHidden"))
            files = [
                info
                for info in (
                    file_info(e, path, sandbox_created_at, now)
                    for e in workspace.list_dir(raw_path, recursive=recursive)
                )
                if include_hidden or not is_hidden(info.relative_path)
            ]
            result = ListFilesResult(path, files, len(files), timestamp)
        else:  # exists
            result = ExistsResult(path, workspace.exists(raw_path), timestamp)
    except WorkspaceOSError as exc:
        raise workspace_error(exc, op, raw_path, timestamp) from exc
    return result, cs


BATCH_OPS: Final = ("write", "mkdir", "delete", "rename", "move")
"""The ops a batch may hold: the ones that change the tree."""

Precondition = FileVersion | Literal["absent"] | None
"""`ifMatch`'s expected file, "absent" for `ifNoneMatch: "*"`, or None (no precondition)."""


async def files_batch(
    workspace: Workspace, body: dict[str, Any], *, now: int, sandbox_created_at: str
) -> tuple[FilesBatchResult, ChangeSet]:
    """Apply every entry of a batch body in order; the answer and the changes to store.

    Raises VALIDATION_FAILED for a body that is not a batch (no `entries` array, 400) or
    holds more than `FILES_BATCH_MAX_ENTRIES` (413): then nothing is applied. Between
    entries it lets other requests run (a thousand renames of a large directory take
    seconds); the caller holds the sandbox's turn, so none of them sees this tree.
    """
    entries = body.get("entries")
    if not isinstance(entries, list):
        raise validation_error("entries must be an array")
    if len(entries) > FILES_BATCH_MAX_ENTRIES:
        raise validation_error(
            f"Too many entries: at most {FILES_BATCH_MAX_ENTRIES} per batch", 413
        )
    timestamp = iso_from_ms(now)
    results: list[BatchEntryResult] = []
    changes: dict[str, Change] = {}
    """One change per path, the last one winning: what the entries left."""
    for entry in entries:
        await asyncio.sleep(0)
        try:
            parsed, precondition = _parse_entry(entry, timestamp)
            if precondition is not None:
                _check_precondition(
                    workspace, parsed, precondition, timestamp, sandbox_created_at, now
                )
            answer, applied = run_files_op(
                workspace, parsed, now=now, sandbox_created_at=sandbox_created_at
            )
        except SandboxError as error:
            results.append(BatchEntryResult(False, error=error.to_json()))
            continue
        changes.update((change.path, change) for change in applied)
        results.append(BatchEntryResult(True, result=answer.to_json()))
    batch = FilesBatchResult(results, timestamp, sandbox_created_at)
    return batch, ChangeSet(changes.values())


def _parse_entry(entry: object, timestamp: str) -> tuple[FilesBody, Precondition]:
    """The entry's `POST /files` validation, with the batch's rules first: a changing op
    only, and a well-formed precondition (checked before the path, as the Worker gateway,
    which leaves the path to the Durable Object, does)."""
    precondition: Precondition = None
    op = entry.get("op") if isinstance(entry, dict) else None
    if isinstance(entry, dict) and isinstance(op, str) and op in FILES_OPS:
        if op not in BATCH_OPS:
            raise invalid_request(
                "op must be write, mkdir, delete, rename or move in a batch", timestamp
            )
        precondition = _precondition(entry, op, timestamp)
    return parse_files_body(entry, timestamp), precondition


def _precondition(entry: dict[str, Any], op: str, timestamp: str) -> Precondition:
    if_match, if_none_match = entry.get("ifMatch"), entry.get("ifNoneMatch")
    if if_match is None and if_none_match is None:
        return None
    if op == "mkdir":
        raise invalid_request("mkdir takes no precondition", timestamp)
    if if_match is not None and if_none_match is not None:
        raise invalid_request("Pass ifMatch or ifNoneMatch, not both", timestamp)
    if if_none_match is not None:
        if if_none_match != "*":
            raise invalid_request('ifNoneMatch must be "*"', timestamp)
        return "absent"
    size = if_match.get("size") if isinstance(if_match, dict) else None
    modified_at = if_match.get("modifiedAt") if isinstance(if_match, dict) else None
    if (
        not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
        or not isinstance(modified_at, str)
    ):
        raise invalid_request(
            "ifMatch must be an object with size (an integer >= 0) and modifiedAt (a string)",
            timestamp,
        )
    return FileVersion(size, modified_at)


def _check_precondition(
    workspace: Workspace,
    parsed: FilesBody,
    expected: FileVersion | Literal["absent"],
    timestamp: str,
    sandbox_created_at: str,
    now: int,
) -> None:
    """Raise PRECONDITION_FAILED unless `path` holds what the precondition expects. A path
    that names no place below /workspace (outside it, or the root) is left to the
    operation, which fails on it."""
    try:
        target = normalize(parsed.raw_path)
    except WorkspaceOSError:
        return
    if target.is_root:
        return
    current = _state_at(workspace, target.absolute, sandbox_created_at, now)
    if expected == "absent":
        if current is None:
            return
        reason = "already exists"
    elif current is None:
        reason = "does not exist"
    elif current.is_directory:
        reason = "is a directory"
    elif current.size == expected.size and current.modified_at == expected.modified_at:
        return
    else:
        reason = f"changed (size {current.size}, modifiedAt {current.modified_at})"
    code = ErrorCode.PRECONDITION_FAILED
    context = {
        "path": parsed.raw_path,
        "operation": parsed.operation,
        "current": None if current is None else current.to_json(),
    }
    raise error_class_for(code)(
        error_response(
            code,
            f"Precondition failed: {parsed.raw_path} {reason}",
            context,
            operation=parsed.operation,
            timestamp=timestamp,
        )
    )


def _state_at(
    workspace: Workspace, absolute: str, sandbox_created_at: str, now: int
) -> FileState | None:
    """What `list` of the parent would report for `absolute` (None: nothing there)."""
    try:
        entry = workspace.stat(absolute)
    except WorkspaceOSError:  # ENOENT, or a file where a parent should be (ENOTDIR)
        return None
    if entry.type == "directory":
        return FileState("directory", 0, sandbox_created_at)
    return FileState("file", entry.size, iso_from_ms(entry.updated_at or now))
