"""The files API, ``POST /files`` (spec 5, 4.3): one request body over a workspace tree.

The wire side of the tree: validating the body, JavaScript's reading of its values,
dispatching the op to `Workspace`, building the answer, and mapping a Node-style errno
to the exact ``ErrorResponse``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from workbench.core.changes import ChangeSet
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
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import (
    ExistsResult,
    FileInfo,
    FileOpResult,
    ListFilesResult,
    MkdirResult,
    ReadFileResult,
)

__all__ = [
    "FILES_OPS",
    "FilesBody",
    "FilesResult",
    "file_info",
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
