"""Error table, classes and create_error_from_response (spec 4.1-4.5)."""

import re

from workbench.protocol import errors
from workbench.protocol.errors import ErrorCode, Operation, create_error_from_response

ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def test_status_table() -> None:
    assert errors.http_status_for("NO_SPACE") == 500
    assert errors.http_status_for("FILESYSTEM_ERROR") == 500
    assert errors.http_status_for("NOT_SUPPORTED") == 403
    assert errors.http_status_for("FILE_EXISTS") == 409
    assert errors.http_status_for("FILE_TOO_LARGE") == 413
    assert errors.http_status_for("WHATEVER") == 500


def test_errno_mapping() -> None:
    assert errors.error_code_for_errno("ENOENT") == ErrorCode.FILE_NOT_FOUND
    assert errors.error_code_for_errno("ENOTEMPTY") == ErrorCode.FILESYSTEM_ERROR
    assert errors.error_code_for_errno("EINVAL") == ErrorCode.FILESYSTEM_ERROR


def test_operations() -> None:
    assert Operation.FOR_FILES_OP["exists"] == "file.stat"
    assert Operation.FOR_FILES_OP["mkdir"] == "directory.create"
    assert Operation.CODE_CONTEXT_DELETE == "code.context.delete"


def test_rule1_malformed_body() -> None:
    err = create_error_from_response("oops", status=502, status_text="Bad Gateway")
    assert type(err) is errors.SandboxError
    assert err.code == "INTERNAL_ERROR"
    assert err.message == "HTTP 502: Bad Gateway"
    assert err.http_status == 502 and err.context == {}
    assert ISO.fullmatch(err.timestamp)
    default = create_error_from_response({"code": 1, "message": "x"})
    assert default.message == "HTTP 500: " and default.http_status == 500


def test_rule2_normalizes_and_picks_class() -> None:
    err = create_error_from_response(
        {"code": "FILE_NOT_FOUND", "message": "No such file: a", "context": [1]}
    )
    assert isinstance(err, errors.FileNotFoundError)
    assert isinstance(err, errors.SandboxFileNotFoundError)
    assert not isinstance(err, FileNotFoundError)  # the builtin is not involved
    assert err.context == {} and err.http_status == 404 and err.operation is None
    assert err.name == "FileNotFoundError"
    body = {
        "code": "NO_SPACE",
        "message": "m",
        "httpStatus": 507,
        "timestamp": "t",
        "operation": "file.write",
        "context": {"errno": "ENOSPC"},
    }
    e2 = create_error_from_response(body)
    assert isinstance(e2, errors.FileSystemError)
    assert e2.http_status == 507 and e2.timestamp == "t" and e2.operation == "file.write"
    assert e2.to_json() == body
    unknown = create_error_from_response({"code": "NEW", "message": "m"})
    assert type(unknown) is errors.SandboxError and unknown.http_status == 500


def test_class_table() -> None:
    for code, cls in [
        ("FILE_EXISTS", errors.FileExistsError),
        ("FILE_TOO_LARGE", errors.FileTooLargeError),
        ("PERMISSION_DENIED", errors.PermissionDeniedError),
        ("IS_DIRECTORY", errors.FileSystemError),
        ("NOT_DIRECTORY", errors.FileSystemError),
        ("CONTEXT_NOT_FOUND", errors.ContextNotFoundError),
        ("VALIDATION_FAILED", errors.ValidationFailedError),
        ("CODE_EXECUTION_ERROR", errors.CodeExecutionError),
        ("NOT_SUPPORTED", errors.NotSupportedError),
        ("INTERNAL_ERROR", errors.SandboxError),
    ]:
        assert errors.error_class_for(code) is cls
    assert not hasattr(errors, "ExecutionLimitError")


def test_error_response_builder() -> None:
    body = errors.error_response("FILE_NOT_FOUND", "m", {"path": "a"}, operation="file.read")
    assert body["httpStatus"] == 404 and body["operation"] == "file.read"
    assert ISO.fullmatch(body["timestamp"])
    assert "operation" not in errors.error_response("VALIDATION_FAILED", "x", http_status=413)
