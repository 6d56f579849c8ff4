"""Requests and responses of the gateway protocol: body caps and parsing on the serving
side (spec 2.1, 2.2.1, 2.4), and reading an answer into data or an error on the client
side (spec 4.5 `parseJsonResponse`)."""

from __future__ import annotations

import asyncio
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

from workbench.protocol.errors import (
    ErrorCode,
    SandboxError,
    create_error_from_response,
    error_response,
    make_error,
)

__all__ = [
    "CODE_BYTES_CAP",
    "EXECUTE_BODY_CAP",
    "FILES_BATCH_BODY_CAP",
    "FILES_BATCH_MAX_ENTRIES",
    "FILES_BODY_CAP",
    "REASONS",
    "Request",
    "Response",
    "error_json",
    "internal_error",
    "invalid_response",
    "method_not_allowed",
    "not_found",
    "parse_json_response",
    "parse_object",
    "validate_code",
    "validation_error",
]

EXECUTE_BODY_CAP = 98_304
FILES_BODY_CAP = 2_097_152
CODE_BYTES_CAP = 65_536
FILES_BATCH_BODY_CAP: Final = 8 * 1_048_576
"""`POST /files/batch` (an extension), after gzip decoding: half the 16 MiB workspace, so
one request's peak memory stays bounded, and room for five 1 MiB files sent as base64."""
FILES_BATCH_MAX_ENTRIES: Final = 1000
"""Entries of one `POST /files/batch`: bounds one request's work and answer; a full
workspace (4,096 entries) is refilled in five batches."""

REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    """Lower-case header names."""
    given_up: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the client stops waiting for the answer (it disconnected, or its call was
    cancelled): an execution still running for it is cancelled, one not yet begun never
    runs."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"

    @property
    def reason(self) -> str:
        return REASONS.get(self.status, "")

    @classmethod
    def json(cls, status: int, payload: Any) -> Response:
        text = json.dumps(payload, ensure_ascii=False)
        try:
            return cls(status, text.encode())
        except UnicodeEncodeError:  # a lone surrogate (guest strings may hold them)
            return cls(status, json.dumps(payload).encode())  # escaped as \udXXX


def validation_error(message: str, status: int = 400) -> SandboxError:
    return make_error(ErrorCode.VALIDATION_FAILED, message, http_status=status)


def not_found() -> SandboxError:
    return validation_error("Not found", 404)


def method_not_allowed() -> SandboxError:
    return validation_error("Method not allowed", 405)


def error_json(error: SandboxError) -> Response:
    return Response.json(error.http_status, error.to_json())


def internal_error(message: str, status: int = 500) -> Response:
    return Response.json(
        status, error_response(ErrorCode.INTERNAL_ERROR, message, http_status=status)
    )


def parse_object(request: Request, cap: int, *, gzip: bool = False) -> dict[str, Any]:
    """Spec 2.4 body parsing: size cap (413), JSON (400), an object (400). With `gzip`,
    a `Content-Encoding: gzip` body is accepted, and `cap` holds after decoding too."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise validation_error("Request too large", 413)
    if len(request.body) > cap:
        raise validation_error("Request too large", 413)
    raw = _decoded(request, cap) if gzip else request.body
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        raise validation_error("Invalid JSON") from None
    if not isinstance(body, dict):
        raise validation_error("Expected an object")
    return body


def _decoded(request: Request, cap: int) -> bytes:
    """The body without its `Content-Encoding` (identity or gzip, else 415); decoding stops
    as soon as more than `cap` bytes come out (413), so a small bomb cannot blow up."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return request.body
    if encoding != "gzip":
        raise validation_error("Content-Encoding must be gzip or identity", 415)
    decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = decoder.decompress(request.body, cap + 1)
    except zlib.error:
        raise validation_error("Invalid gzip body") from None
    if len(data) > cap:
        raise validation_error("Request too large", 413)
    if not decoder.eof or decoder.unused_data:
        raise validation_error("Invalid gzip body")
    return data


def validate_code(body: dict[str, Any]) -> str:
    """Rows 9-10 of spec 2.2.1: non-blank code of at most 64 KiB (UTF-8)."""
    code = body.get("code")
    if not isinstance(code, str) or not code.strip():
        raise validation_error("Non-empty code is required")
    if len(code.encode("utf-8", errors="surrogatepass")) > CODE_BYTES_CAP:
        raise validation_error("Code exceeds 64 KiB", 413)
    return code


def parse_json_response(response: Response) -> Any:
    """Spec 4.5 `parseJsonResponse`: 204 → {}; non-JSON → INTERNAL_ERROR; non-2xx → class."""
    if response.status == 204:
        return {}
    try:
        body = json.loads(response.body)
    except ValueError:
        raise create_error_from_response(None, response.status, response.reason) from None
    if not 200 <= response.status < 300:
        raise create_error_from_response(body, response.status, response.reason)
    return body


def invalid_response(message: str = "Invalid sandbox response") -> SandboxError:
    """An answer that parsed but is not the shape asked for (INTERNAL_ERROR, 500)."""
    return SandboxError(error_response(ErrorCode.INTERNAL_ERROR, message, http_status=500))
