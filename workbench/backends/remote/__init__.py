"""The remote backend: the same API over HTTPS to a gateway (docs/gateway-protocol.md)."""

from __future__ import annotations

import asyncio
import functools
import gzip
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from workbench.api.client import Backend
from workbench.api.display import warn_untrusted
from workbench.protocol.errors import SandboxError, error_response
from workbench.protocol.http import (
    NDJSON,
    EventSink,
    Response,
    SinkFailed,
    UnreadableAnswer,
    answer_object,
    cancel_request,
    cancelled_answer,
    guarded_sink,
    invalid_response,
    json_payload,
    parse_json,
    read_event_stream,
    validation_error,
)
from workbench.protocol.ids import untravelled_id_error
from workbench.protocol.types import VersionReport

__all__ = [
    "MAX_ANSWER_BYTES",
    "ConnectionFailedError",
    "HttpTransport",
    "open_remote_backend",
    "rootless_tls_context",
    "tls_context",
]

IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE"})
RETRY_STATUSES = frozenset({502, 503, 504})
DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=30.0, pool=5.0)
VERSION_PATHS = frozenset({"/v1/health", "/v1/runtimes"})
"""The answers that report the core's and the runtimes' versions."""
MAX_ANSWER_BYTES: Final = 64 * 1_048_576
"""The most of a gateway's answer the client reads, decoded: far above any answer of the
protocol (a file read is 1 MiB as base64, a result a few MiB at most), and a bound on a
gzip bomb (a few MiB inflating to GiBs) or an endless body, which took all the memory."""
SLOWEST_UPLOAD: Final = 16 * 1024
"""Bytes a second a request's body is given to go at, at the least (an 8 MiB batch: 8.5
minutes on top of the read timeout)."""
DIAGNOSE_TIMEOUT = 10.0
"""How long the one health request that explains a failed runtime call may take."""
GZIP_PATH_SUFFIX = "/files/batch"
"""The one route that accepts `Content-Encoding: gzip` bodies (docs/gateway-protocol.md)."""
GZIP_MIN_BYTES = 32_768
"""Smaller bodies go as they are: compressing them saves less than a packet or two."""
GZIP_MAX_RATIO = 0.7
"""A compressed body is sent only when it is at most this fraction of the original: text
shrinks far below it; base64 of compressed or random data only to about 0.77, not worth
the CPU on both ends."""


def _compressed(payload: bytes) -> bytes | None:
    """`payload` gzipped (fast level: the link is the bottleneck, not the CPU), or None
    when that does not pay."""
    if len(payload) < GZIP_MIN_BYTES:
        return None
    packed = gzip.compress(payload, compresslevel=1, mtime=0)
    return packed if len(packed) <= len(payload) * GZIP_MAX_RATIO else None


def _runtime_call_failed(reply: Response) -> bool:
    """A Sandbox's 502 for a runtime call that threw (spec 2.4.1 step 7), the way a
    runtime at another version fails its contexts."""
    data = answer_object(reply, 502)
    return (
        data is not None
        and data.get("code") == "INTERNAL_ERROR"
        and str(data.get("message", "")).startswith("Binding '")
    )


class ConnectionFailedError(SandboxError):
    """The gateway could not be reached or did not answer (code `CONNECTION_FAILED`)."""


def _connection_error(message: str, url: str) -> ConnectionFailedError:
    return ConnectionFailedError(
        error_response("CONNECTION_FAILED", message, {"url": url}, http_status=503)
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


_PIECE: Final = 1 << 20
"""Bytes of an answer inflated at a time."""


async def _decoded(reply: httpx.Response) -> AsyncIterator[bytes]:
    """The answer's body, inflated here in pieces of at most `_PIECE` bytes: httpx
    inflates each chunk that arrives whole, and a stacked encoding (`gzip, gzip`) turned
    a 980-byte answer into 1 GiB before any cap could look. One layer of gzip or deflate
    is read (what the client accepts); anything else is refused."""
    encodings = [
        name
        for name in (
            part.strip().lower() for part in reply.headers.get("content-encoding", "").split(",")
        )
        if name and name != "identity"
    ]
    if not encodings:
        async for chunk in reply.aiter_raw():
            yield chunk
        return
    if len(encodings) > 1 or encodings[0] not in ("gzip", "x-gzip", "deflate"):
        raise invalid_response(
            f"The gateway's answer is encoded as {', '.join(encodings)[:100]!r}, which the "
            "client does not read (it accepts one layer of gzip or deflate)"
        )
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or a zlib header
    try:
        async for chunk in reply.aiter_raw():
            while chunk:
                piece = inflater.decompress(chunk, _PIECE)
                if piece:
                    yield piece
                chunk = inflater.unconsumed_tail
        rest = inflater.flush()
    except zlib.error as error:
        message = f"The gateway's answer could not be inflated: {error}"
        raise invalid_response(message) from UnreadableAnswer(message)
    if rest:
        yield rest


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's roots, or `SSL_CERT_FILE` / `SSL_CERT_DIR`
    as set at the first call), made once per process: each client made its own, which
    parses about 150 certificates (30-40 ms, most of the cost of opening a remote
    backend). Every client shares it: never change it."""
    return httpx.create_ssl_context()


@functools.cache
def rootless_tls_context() -> ssl.SSLContext:
    """A TLS context that trusts no certificate, for an `http://` gateway: httpx makes a
    context for every client, and the default one parses the roots (about 21 ms of a CLI
    command against a loopback `serve`). Such a client never speaks TLS (its requests
    go to its base URL, and it follows no redirect); were it ever to, it would fail
    closed rather than skip verification."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class HttpTransport:
    """Gateway requests over HTTP(S) with bearer auth, timeouts and bounded retries."""

    enforces_deadlines = False
    """A Worker gateway keeps its own limits; `serve` enforces `timeoutMs` too, and a
    client that waits exactly that long and then gives up cancels the execution there."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        retries: int = 2,
        transport: httpx.AsyncBaseTransport | None = None,
        warn: Callable[[str], None] = warn_untrusted,
        whole_answers: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.description = self.base_url
        self.retries = retries
        self.whole_answers = whole_answers
        """Every answer must arrive whole within the read timeout, streamed ones too (a
        wait the user gave: `run --timeout`); else each streamed event starts it again."""
        self._warn = warn
        """Says, once each, that a runtime speaks another protocol than the core."""
        self._warned: set[str] = set()
        secure = urlsplit(self.base_url).scheme == "https"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={
                "authorization": f"Bearer {token}",
                "user-agent": "sandbox-workbench",
                "accept-encoding": "gzip, deflate",  # what `_decoded` inflates
            },
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            verify=tls_context() if secure else rootless_tls_context(),
        )

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: EventSink | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One gateway request. Every versions report that passes by is checked (see
        `VersionReport`), and a runtime call that failed is explained by one more.
        `on_event`: take a streamed answer (`serve` streams an execution's output; a Worker
        gateway answers plainly). `headers`: the protocol's extension headers."""
        if any(step in (".", "..") for step in path.partition("?")[0].split("/")):
            raise validation_error(untravelled_id_error(path))
        reply = await self._send(method, path, body, timeout, on_event, headers)
        if method == "GET" and path in VERSION_PATHS and reply.status == 200:
            self._check_versions(reply.body)
        elif method == "POST" and _runtime_call_failed(reply):
            await self._diagnose()
        return reply

    def _check_versions(self, body: bytes) -> None:
        try:
            answer = parse_json(body)
        except ValueError:
            return
        for line in VersionReport.read(answer).warnings:
            if line not in self._warned:
                self._warned.add(line)
                self._warn(f"warning: {self.description}: {line}")

    async def _diagnose(self) -> None:
        """Ask the gateway for its versions (one short request; a failure changes nothing)."""
        try:
            async with asyncio.timeout(DIAGNOSE_TIMEOUT) as scope:
                health = {"timeout": DIAGNOSE_TIMEOUT}
                reply = await self._exchange("GET", "/v1/health", health, None, scope, None)
        except (httpx.HTTPError, TimeoutError, SandboxError):
            return
        if reply.status == 200:
            self._check_versions(reply.body)

    async def _encoded(self, path: str, body: Any) -> tuple[dict[str, Any], int]:
        """The request's body arguments, and how many bytes they send: JSON (as
        `json_payload` makes it, which escapes a lone surrogate where httpx's own encoder
        failed), gzipped for the batch route when it pays."""
        if body is None:
            return {}, 0
        payload = json_payload(body)
        headers = {"content-type": "application/json"}
        packed = None
        if path.endswith(GZIP_PATH_SUFFIX):
            packed = await asyncio.to_thread(_compressed, payload)
        if packed is None:
            return {"content": payload, "headers": headers}, len(payload)
        return {"content": packed, "headers": {**headers, "content-encoding": "gzip"}}, len(packed)

    async def _send(
        self,
        method: str,
        path: str,
        body: Any,
        timeout: float | None,
        on_event: EventSink | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """The request, retried where that is safe. Each attempt's answer must arrive
        whole within the wait (`timeout`, else the client's read timeout) plus the time
        its body takes at `SLOWEST_UPLOAD`: httpx's limits are per read and write, so a
        gateway sending a byte now and then kept the client waiting for ever. Without a
        `timeout`, each line of output a run streams starts the wait again (unless
        `whole_answers`)."""
        attempts = 1 + (self.retries if method in IDEMPOTENT else 0)
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        encoded, sent = await self._encoded(path, body)
        extra.update(encoded)
        if headers:
            extra["headers"] = {**extra.get("headers", {}), **headers}
        wait = timeout if timeout is not None else self._client.timeout.read
        deadline: float | None = None
        if wait is not None:
            deadline = wait + sent / SLOWEST_UPLOAD
        again = wait if timeout is None and not self.whole_answers else None
        for attempt in range(attempts):
            try:
                async with asyncio.timeout(deadline) as scope:
                    reply = await self._exchange(method, path, extra, on_event, scope, again)
            except TimeoutError as error:
                if not scope.expired():
                    raise
                seconds = round(deadline or 0.0, 1)
                message = f"the gateway at {self.base_url} did not answer in time"
                raise _connection_error(
                    f"{message} (waited {seconds:g} s)", self.base_url
                ) from error
            except httpx.HTTPError as error:
                if attempt + 1 < attempts and not isinstance(error, httpx.ReadTimeout):
                    await asyncio.sleep(0.2 * 2**attempt)
                    continue
                message = _describe(error, self.base_url, wait)
                raise _connection_error(message, self.base_url) from error
            if reply.status in RETRY_STATUSES and attempt + 1 < attempts:
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            return reply
        raise AssertionError("unreachable")

    async def _exchange(
        self,
        method: str,
        path: str,
        extra: dict[str, Any],
        on_event: EventSink | None,
        scope: asyncio.Timeout,
        again: float | None,
    ) -> Response:
        """One attempt: the answer, at most `MAX_ANSWER_BYTES` of it decoded (else an
        INTERNAL_ERROR), or with `on_event` its events as they arrive when it streams;
        each event puts `scope`'s deadline `again` seconds ahead, when given."""
        arguments = dict(extra)
        if on_event is not None:
            arguments["headers"] = {
                **extra.get("headers", {}),
                "accept": f"{NDJSON}, application/json",
            }
        async with self._client.stream(method, path, **arguments) as reply:
            # Never followed: the token would go wherever it points. A 3xx without a
            # Location (a 304, which httpx counts as a redirect too) is no redirect.
            if reply.is_redirect:
                where = reply.headers.get("location")
                if where is None:
                    raise invalid_response(
                        f"The gateway at {self.base_url} answered an unexpected HTTP "
                        f"{reply.status_code}"
                    )
                raise invalid_response(
                    f"The gateway at {self.base_url} answered a redirect ({reply.status_code}) "
                    f"to {where[:200]!r}: set the profile's URL to where it should go"
                )
            content_type = reply.headers.get("content-type", "")
            if on_event is not None and content_type.startswith(NDJSON):
                loop = asyncio.get_running_loop()

                sink = guarded_sink(on_event)

                def progress(event: dict[str, Any]) -> None:
                    if again is not None:
                        scope.reschedule(loop.time() + again)
                    sink(event)

                try:
                    return await read_event_stream(_decoded(reply), progress)
                except SinkFailed as failed:  # the caller's own failure, not the gateway's
                    raise failed.error from None
                except (ValueError, EOFError) as error:
                    raise invalid_response() from error
            chunks: list[bytes] = []
            size = 0
            async for chunk in _decoded(reply):
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise invalid_response(
                        f"The gateway's answer is larger than {MAX_ANSWER_BYTES >> 20} MiB: "
                        "it was not read"
                    )
                chunks.append(chunk)
            return Response(reply.status_code, b"".join(chunks), content_type)

    async def cancel(self, sandbox_id: str, context_id: str | None = None) -> bool:
        """Ask the gateway to interrupt the sandbox's execution (a `serve` extension); a
        gateway without it (404) leaves the guest running until its fuel runs out."""
        try:
            reply = await self.request("POST", *cancel_request(sandbox_id, context_id))
        except SandboxError:
            return False
        return cancelled_answer(reply)

    async def aclose(self) -> None:
        await self._client.aclose()


def open_remote_backend(
    name: str, url: str, token: str, *, wait_seconds: float | None = None, **options: Any
) -> Backend:
    """The gateway at `url`; `wait_seconds` bounds the wait for each whole answer, a
    streamed one too (default: `DEFAULT_TIMEOUT`'s 120 s read timeout, which each
    streamed event starts again; the gateway enforces its own limits)."""
    if wait_seconds is not None:
        options.setdefault("whole_answers", True)
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
