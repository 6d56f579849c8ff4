"""Wire-level errors of sandbox-workers (spec 4.1-4.5): codes, operations, statuses, classes.

The class names mirror the spec exactly, so ``FileNotFoundError`` and ``FileExistsError``
defined here *shadow the Python builtins inside this module*. Importers should write
``errors.FileNotFoundError`` (module-qualified) or use the ``SandboxFileNotFoundError`` /
``SandboxFileExistsError`` aliases; never ``from ... import FileNotFoundError`` into a
module that also needs the builtin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from workbench.protocol.timestamps import iso_now

__all__ = [
    "CodeExecutionError",
    "ContextNotFoundError",
    "ErrorCode",
    "ErrorResponse",
    "FileExistsError",
    "FileNotFoundError",
    "FileSystemError",
    "FileTooLargeError",
    "NotSupportedError",
    "Operation",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "SandboxError",
    "SandboxFileExistsError",
    "SandboxFileNotFoundError",
    "SandboxNotFoundError",
    "ValidationFailedError",
    "create_error_from_response",
    "error_class_for",
    "error_code_for_errno",
    "error_response",
    "http_status_for",
    "iso_now",
    "make_error",
    "sandbox_not_found",
]

#: Raw ``ErrorResponse`` JSON object (camelCase keys, exactly as on the wire).
ErrorResponse = dict[str, Any]


class ErrorCode:
    """``ErrorCode`` string constants (spec 4.2)."""

    FILE_NOT_FOUND: Final = "FILE_NOT_FOUND"
    FILE_EXISTS: Final = "FILE_EXISTS"
    PERMISSION_DENIED: Final = "PERMISSION_DENIED"
    IS_DIRECTORY: Final = "IS_DIRECTORY"
    NOT_DIRECTORY: Final = "NOT_DIRECTORY"
    FILE_TOO_LARGE: Final = "FILE_TOO_LARGE"
    NO_SPACE: Final = "NO_SPACE"
    FILESYSTEM_ERROR: Final = "FILESYSTEM_ERROR"
    CONTEXT_NOT_FOUND: Final = "CONTEXT_NOT_FOUND"
    VALIDATION_FAILED: Final = "VALIDATION_FAILED"
    CODE_EXECUTION_ERROR: Final = "CODE_EXECUTION_ERROR"
    INTERNAL_ERROR: Final = "INTERNAL_ERROR"
    NOT_SUPPORTED: Final = "NOT_SUPPORTED"
    PRECONDITION_FAILED: Final = "PRECONDITION_FAILED"
    """Beyond the spec: a `files/batch` entry whose precondition did not hold."""
    SANDBOX_NOT_FOUND: Final = "SANDBOX_NOT_FOUND"
    """Beyond the spec: a request that asked for an existing sandbox (the
    `x-sandbox-must-exist` header) named one that does not exist; nothing was made."""


class Operation:
    """``OperationType`` string constants (spec 4.4)."""

    FILE_READ: Final = "file.read"
    FILE_WRITE: Final = "file.write"
    FILE_DELETE: Final = "file.delete"
    FILE_MOVE: Final = "file.move"
    FILE_RENAME: Final = "file.rename"
    FILE_STAT: Final = "file.stat"
    DIRECTORY_CREATE: Final = "directory.create"
    DIRECTORY_LIST: Final = "directory.list"
    CODE_EXECUTE: Final = "code.execute"
    CODE_CONTEXT_CREATE: Final = "code.context.create"
    CODE_CONTEXT_DELETE: Final = "code.context.delete"

    #: ``POST /files`` op → operation (spec 4.4).
    FOR_FILES_OP: Final[Mapping[str, str]] = {
        "read": "file.read",
        "write": "file.write",
        "mkdir": "directory.create",
        "delete": "file.delete",
        "rename": "file.rename",
        "move": "file.move",
        "list": "directory.list",
        "exists": "file.stat",
    }


#: Code → HTTP status of the newest version (spec 4.2).
HTTP_STATUS: Final[Mapping[str, int]] = {
    ErrorCode.FILE_NOT_FOUND: 404,
    ErrorCode.FILE_EXISTS: 409,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.IS_DIRECTORY: 400,
    ErrorCode.NOT_DIRECTORY: 400,
    ErrorCode.FILE_TOO_LARGE: 413,
    ErrorCode.NO_SPACE: 500,
    ErrorCode.FILESYSTEM_ERROR: 500,
    ErrorCode.CONTEXT_NOT_FOUND: 404,
    ErrorCode.VALIDATION_FAILED: 400,
    ErrorCode.CODE_EXECUTION_ERROR: 500,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.NOT_SUPPORTED: 403,
    ErrorCode.PRECONDITION_FAILED: 412,
    ErrorCode.SANDBOX_NOT_FOUND: 404,
}

_CODE_FOR_ERRNO: Final[Mapping[str, str]] = {
    "ENOENT": ErrorCode.FILE_NOT_FOUND,
    "EEXIST": ErrorCode.FILE_EXISTS,
    "EACCES": ErrorCode.PERMISSION_DENIED,
    "EISDIR": ErrorCode.IS_DIRECTORY,
    "ENOTDIR": ErrorCode.NOT_DIRECTORY,
    "EFBIG": ErrorCode.FILE_TOO_LARGE,
    "ENOSPC": ErrorCode.NO_SPACE,
}


def http_status_for(code: str) -> int:
    """HTTP status for ``code`` (spec 4.2); unknown codes map to 500."""
    return HTTP_STATUS.get(code, 500)


def error_code_for_errno(errno: str) -> str:
    """Error code for a Node-style errno (spec 4.3); anything unlisted is FILESYSTEM_ERROR."""
    return _CODE_FOR_ERRNO.get(errno, ErrorCode.FILESYSTEM_ERROR)


def error_response(
    code: str,
    message: str,
    context: Mapping[str, Any] | None = None,
    *,
    http_status: int | None = None,
    operation: str | None = None,
    timestamp: str | None = None,
) -> ErrorResponse:
    """Build an ``ErrorResponse`` dict (spec 4.1); status defaults to the code's table value."""
    body: ErrorResponse = {
        "code": code,
        "message": message,
        "context": dict(context) if context is not None else {},
        "httpStatus": http_status if http_status is not None else http_status_for(code),
        "timestamp": timestamp if timestamp is not None else iso_now(),
    }
    if operation is not None:
        body["operation"] = operation
    return body


class SandboxError(Exception):
    """Base of every wire error; wraps the raw ``ErrorResponse`` (spec 4.5)."""

    def __init__(self, error_response: ErrorResponse) -> None:
        super().__init__(str(error_response.get("message", "")))
        self.error_response: ErrorResponse = error_response

    @property
    def name(self) -> str:
        """The class name, like JavaScript ``error.name``."""
        return type(self).__name__

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.error_response.get("message", ""))

    @property
    def code(self) -> str:
        """The ``ErrorCode`` string."""
        return str(self.error_response.get("code", ErrorCode.INTERNAL_ERROR))

    @property
    def context(self) -> dict[str, Any]:
        """The ``context`` object (``{}`` when absent)."""
        ctx = self.error_response.get("context")
        return ctx if isinstance(ctx, dict) else {}

    @property
    def http_status(self) -> int:
        """The ``httpStatus`` the response carried (or would carry)."""
        status = self.error_response.get("httpStatus")
        return int(status) if isinstance(status, int | float) else http_status_for(self.code)

    @property
    def timestamp(self) -> str:
        """ISO timestamp of the error."""
        return str(self.error_response.get("timestamp", ""))

    @property
    def operation(self) -> str | None:
        """The ``OperationType`` for file-operation errors, else ``None``."""
        op = self.error_response.get("operation")
        return op if isinstance(op, str) else None

    def to_json(self) -> ErrorResponse:
        """The raw ``ErrorResponse`` (like JavaScript ``toJSON()``)."""
        return self.error_response

    def __repr__(self) -> str:
        return f"{self.name}({self.code}, {self.message!r})"


class FileNotFoundError(SandboxError):  # shadows the builtin (spec name)
    """``FILE_NOT_FOUND``; context ``{path, operation}``."""


class FileExistsError(SandboxError):  # shadows the builtin (spec name)
    """``FILE_EXISTS``; context ``{path, operation}``."""


class FileTooLargeError(SandboxError):
    """``FILE_TOO_LARGE``; context ``{path, operation, maxSize, actualSize}``."""


class PermissionDeniedError(SandboxError):
    """``PERMISSION_DENIED``; context ``{path, operation}``."""


class FileSystemError(SandboxError):
    """``NO_SPACE``, ``IS_DIRECTORY``, ``NOT_DIRECTORY``, ``FILESYSTEM_ERROR``."""


class ContextNotFoundError(SandboxError):
    """``CONTEXT_NOT_FOUND``; context ``{contextId}``."""


class ValidationFailedError(SandboxError):
    """``VALIDATION_FAILED`` (any request-validation status: 400/404/405/413/415)."""


class CodeExecutionError(SandboxError):
    """``CODE_EXECUTION_ERROR`` (defined for SDK parity; never emitted by servers)."""


class NotSupportedError(SandboxError):
    """``NOT_SUPPORTED``: File API disabled; context ``{feature}``."""


class PreconditionFailedError(SandboxError):
    """``PRECONDITION_FAILED`` (a `files/batch` extension): the entry was not applied;
    context ``{path, operation, current}``, ``current`` being what is at the path now."""


class SandboxNotFoundError(SandboxError):
    """``SANDBOX_NOT_FOUND`` (an extension): a request sent only if its sandbox exists
    found none, and made none; context ``{sandboxId}``."""


#: Non-shadowing aliases for importers that also use the builtins.
SandboxFileNotFoundError = FileNotFoundError
SandboxFileExistsError = FileExistsError

_CLASS_FOR_CODE: Final[Mapping[str, type[SandboxError]]] = {
    ErrorCode.FILE_NOT_FOUND: FileNotFoundError,
    ErrorCode.FILE_EXISTS: FileExistsError,
    ErrorCode.FILE_TOO_LARGE: FileTooLargeError,
    ErrorCode.PERMISSION_DENIED: PermissionDeniedError,
    ErrorCode.NO_SPACE: FileSystemError,
    ErrorCode.IS_DIRECTORY: FileSystemError,
    ErrorCode.NOT_DIRECTORY: FileSystemError,
    ErrorCode.FILESYSTEM_ERROR: FileSystemError,
    ErrorCode.CONTEXT_NOT_FOUND: ContextNotFoundError,
    ErrorCode.VALIDATION_FAILED: ValidationFailedError,
    ErrorCode.CODE_EXECUTION_ERROR: CodeExecutionError,
    ErrorCode.NOT_SUPPORTED: NotSupportedError,
    ErrorCode.PRECONDITION_FAILED: PreconditionFailedError,
    ErrorCode.SANDBOX_NOT_FOUND: SandboxNotFoundError,
}


def error_class_for(code: str) -> type[SandboxError]:
    """The client class for ``code`` (spec 4.5); unknown codes give ``SandboxError``."""
    return _CLASS_FOR_CODE.get(code, SandboxError)


# The parameters of `error_response`, repeated so callers build and wrap in one call.
def make_error(
    code: str,
    message: str,
    context: Mapping[str, Any] | None = None,
    *,
    http_status: int | None = None,
    operation: str | None = None,
    timestamp: str | None = None,
) -> SandboxError:
    """Build an ``ErrorResponse`` and wrap it in the class matching ``code``."""
    body = error_response(
        code,
        message,
        context,
        http_status=http_status,
        operation=operation,
        timestamp=timestamp,
    )
    return error_class_for(code)(body)


def sandbox_not_found(sandbox_id: str) -> SandboxNotFoundError:
    """The answer to a request that must find its sandbox, when there is none."""
    body = error_response(
        ErrorCode.SANDBOX_NOT_FOUND, f"Sandbox '{sandbox_id}' not found", {"sandboxId": sandbox_id}
    )
    return SandboxNotFoundError(body)


def create_error_from_response(
    body: object, status: int | None = None, status_text: str | None = None
) -> SandboxError:
    """Map a parsed error body to a ``SandboxError`` subclass (spec 4.5 rules 1-2).

    Rule 1: a body that is not an object with string ``code`` and ``message`` becomes a
    plain ``SandboxError`` ``INTERNAL_ERROR`` "HTTP <status>: <statusText>". Rule 2: the
    body is normalized (context object or ``{}``, numeric httpStatus or the table value,
    string timestamp or now, string operation copied) and the class picked by code.
    """
    if not (
        isinstance(body, dict)
        and isinstance(body.get("code"), str)
        and isinstance(body.get("message"), str)
    ):
        st = 500 if status is None else status
        text = "" if status_text is None else status_text
        return SandboxError(
            {
                "code": ErrorCode.INTERNAL_ERROR,
                "message": f"HTTP {st}: {text}",
                "context": {},
                "httpStatus": st,
                "timestamp": iso_now(),
            }
        )
    code: str = body["code"]
    ctx = body.get("context")
    raw_status = body.get("httpStatus")
    raw_ts = body.get("timestamp")
    normalized: ErrorResponse = {
        "code": code,
        "message": body["message"],
        "context": ctx if isinstance(ctx, dict) else {},
        "httpStatus": (
            raw_status
            if isinstance(raw_status, int | float) and not isinstance(raw_status, bool)
            else http_status_for(code)
        ),
        "timestamp": raw_ts if isinstance(raw_ts, str) else iso_now(),
    }
    op = body.get("operation")
    if isinstance(op, str):
        normalized["operation"] = op
    return error_class_for(code)(normalized)
