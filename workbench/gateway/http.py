"""Request and body-parsing helpers shared by every gateway route (spec 2.1, 2.2.1, 2.4)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from workbench.api.errors import ErrorCode, SandboxError, error_response, make_error
from workbench.api.transport import Response

EXECUTE_BODY_CAP = 98_304
FILES_BODY_CAP = 2_097_152
CODE_BYTES_CAP = 65_536


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    """Lower-case header names."""


def validation_error(message: str, status: int = 400) -> SandboxError:
    return make_error(ErrorCode.VALIDATION_FAILED, message, http_status=status)


def not_found() -> SandboxError:
    return validation_error("Not found", 404)


def error_json(error: SandboxError) -> Response:
    return Response.json(error.http_status, error.to_json())


def internal_error(message: str, status: int = 500) -> Response:
    return Response.json(
        status, error_response(ErrorCode.INTERNAL_ERROR, message, http_status=status)
    )


def parse_object(request: Request, cap: int) -> dict[str, Any]:
    """Spec 2.4 body parsing: size cap (413), JSON (400), an object (400)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise validation_error("Request too large", 413)
    if len(request.body) > cap:
        raise validation_error("Request too large", 413)
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        raise validation_error("Invalid JSON") from None
    if not isinstance(body, dict):
        raise validation_error("Expected an object")
    return body


def validate_code(body: dict[str, Any]) -> str:
    """Rows 9-10 of spec 2.2.1: non-blank code of at most 64 KiB (UTF-8)."""
    code = body.get("code")
    if not isinstance(code, str) or not code.strip():
        raise validation_error("Non-empty code is required")
    if len(code.encode("utf-8", errors="surrogatepass")) > CODE_BYTES_CAP:
        raise validation_error("Code exceeds 64 KiB", 413)
    return code
