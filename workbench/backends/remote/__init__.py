"""The remote backend: the same API over HTTPS to a gateway (docs/gateway-protocol.md)."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from workbench.api.client import Backend
from workbench.api.errors import SandboxError, iso_now
from workbench.api.transport import Response

__all__ = ["ConnectionFailedError", "HttpTransport", "open_remote_backend"]

IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE"})
RETRY_STATUSES = frozenset({502, 503, 504})
DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=30.0, pool=5.0)


class ConnectionFailedError(SandboxError):
    """The gateway could not be reached or did not answer (code `CONNECTION_FAILED`)."""


def _connection_error(message: str, url: str) -> ConnectionFailedError:
    return ConnectionFailedError(
        {
            "code": "CONNECTION_FAILED",
            "message": message,
            "context": {"url": url},
            "httpStatus": 503,
            "timestamp": iso_now(),
        }
    )


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and everything it was raised from (causes, contexts, grouped errors)."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        pending += getattr(current, "exceptions", ())


def _describe(error: httpx.HTTPError, base_url: str, waited: float | None) -> str:
    """What went wrong with a request, from the underlying cause (httpx's own message is
    often just "All connection attempts failed"), and what to check."""
    causes = list(_causes(error))
    where = urlsplit(base_url)
    host = where.hostname or base_url
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (
                f"TLS failure talking to {base_url}: its certificate was rejected "
                f"({cause.verify_message or cause.reason})"
            )
        if isinstance(cause, ssl.SSLError):
            return (
                f"TLS failure talking to {base_url} ({cause.reason or cause}): does it speak "
                "https? (a local `serve` is plain http://)"
            )
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve the gateway's host name {host!r} ({base_url}): {cause.strerror}"
        if isinstance(cause, ConnectionRefusedError):
            return (
                f"connection refused by {base_url}: is the gateway running and is the port right?"
            )
    if isinstance(error, httpx.ConnectTimeout):
        return f"cannot connect to {base_url}: no answer to the connection attempt in time"
    if isinstance(error, httpx.ReadTimeout):
        limit = "" if waited is None else f" (waited {waited:g} s)"
        return f"the gateway at {base_url} did not answer in time{limit}"
    if isinstance(error, httpx.TimeoutException):
        return f"the gateway at {base_url} did not answer in time ({type(error).__name__})"
    if isinstance(error, httpx.RemoteProtocolError):
        return f"the server at {base_url} broke off the exchange or does not speak HTTP: {error}"
    text = str(error) or type(error).__name__
    return f"cannot reach the gateway at {base_url}: {text}"


class HttpTransport:
    """Gateway requests over HTTP(S) with bearer auth, timeouts and bounded retries."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        retries: int = 2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.description = self.base_url
        self.retries = retries
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"authorization": f"Bearer {token}", "user-agent": "sandbox-workbench"},
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    async def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Response:
        attempts = 1 + (self.retries if method in IDEMPOTENT else 0)
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        for attempt in range(attempts):
            try:
                reply = await self._client.request(
                    method, path, json=body if body is not None else None, **extra
                )
            except httpx.HTTPError as error:
                if attempt + 1 < attempts and not isinstance(error, httpx.ReadTimeout):
                    await asyncio.sleep(0.2 * 2**attempt)
                    continue
                waited = timeout if timeout is not None else self._client.timeout.read
                message = _describe(error, self.base_url, waited)
                raise _connection_error(message, self.base_url) from error
            if reply.status_code in RETRY_STATUSES and attempt + 1 < attempts:
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            return Response(reply.status_code, reply.content, reply.headers.get("content-type", ""))
        raise AssertionError("unreachable")

    async def cancel(self, sandbox_id: str) -> bool:
        """Ask the gateway to interrupt the sandbox's execution (a `serve` extension); a
        gateway without it (404) leaves the guest running until its fuel runs out."""
        try:
            reply = await self.request("POST", f"/v1/sandboxes/{quote(sandbox_id, safe='')}/cancel")
        except SandboxError:
            return False
        if reply.status != 200:
            return False
        try:
            data = json.loads(reply.body)
        except ValueError:
            return False
        return isinstance(data, dict) and data.get("cancelled") is True

    async def aclose(self) -> None:
        await self._client.aclose()


def open_remote_backend(
    name: str, url: str, token: str, *, wait_seconds: float | None = None, **options: Any
) -> Backend:
    """The gateway at `url`; `wait_seconds` bounds the wait for each answer (default:
    `DEFAULT_TIMEOUT`'s 120 s read timeout; the gateway enforces its own limits)."""
    if wait_seconds is not None:
        options.setdefault(
            "timeout",
            httpx.Timeout(
                connect=DEFAULT_TIMEOUT.connect,
                read=wait_seconds,
                write=DEFAULT_TIMEOUT.write,
                pool=DEFAULT_TIMEOUT.pool,
            ),
        )
    return Backend(HttpTransport(url, token, **options), name=name)
