"""How a client reaches a gateway: one request in, one HTTP-shaped response out.

The local backend answers in-process; the remote backend sends the same request over
HTTPS. Both speak the gateway protocol (docs/gateway-protocol.md), so one client
implementation serves both and they cannot drift apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from workbench.api.errors import ErrorCode, SandboxError, create_error_from_response, iso_now

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
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


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


class Transport(Protocol):
    """Sends gateway-protocol requests (paths start with `/v1/`)."""

    description: str
    """Where requests go, for status bars and error messages (never contains secrets)."""

    async def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Response:
        """Send one request; `body` is JSON-encoded when not None."""
        ...

    async def cancel(self, sandbox_id: str) -> bool:
        """Stop the running execution of a sandbox; False if only the request can be
        abandoned (the guest keeps running until its fuel runs out)."""
        ...

    async def aclose(self) -> None: ...


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
    return SandboxError(
        {
            "code": ErrorCode.INTERNAL_ERROR,
            "message": message,
            "context": {},
            "httpStatus": 500,
            "timestamp": iso_now(),
        }
    )
