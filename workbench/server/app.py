"""An ASGI application serving the gateway protocol (run by uvicorn).

HTTP parsing is uvicorn's; this layer checks the bearer token in constant time (when
there is one: the daemon's own socket has none), reads the body (bounded in size and
time) and hands the request to a handler that owns every route, status and error body:
the local gateway, or the daemon for a `serve` in front of it. A client that disconnects
before its answer gives its request up (`Request.given_up`): its execution is cancelled.

A client without the token never has its body read: it is answered at once and its
connection closed, so it cannot hold the connection (and its file descriptor) by sending
slowly. A body declared larger than the route accepts is refused before it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from workbench.core.tasks import cancel_and_wait
from workbench.protocol.errors import error_response
from workbench.protocol.http import (
    NDJSON,
    Handler,
    Request,
    Response,
    answer_event,
    body_cap,
    error_json,
    oversize_refusal,
    validation_error,
    wants_stream,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PUBLIC_PATHS = frozenset({"/v1/health"})
DISCARD_BYTES = 4 << 20
"""Bytes past the limit read and dropped after the 413 rather than cut off, so that an
authorized client reads its answer (closing with its body unread resets the connection
under it); `DISCARD_IDLE_S`: how long dropping waits for more, `DISCARD_S` in all."""
DISCARD_IDLE_S = 0.5
DISCARD_S = 5.0
BODY_TIMEOUT_S = 60.0
"""How long an authorized client may take to send a whole body: the largest (8 MiB) at
about 1 Mbit/s. One that sends slower is answered 408 and its connection closed."""


def unauthorized() -> Response:
    body = error_response("UNAUTHORIZED", "Missing or invalid bearer token", http_status=401)
    return Response.json(401, body)


class GatewayApp:
    """ASGI 3 app: bearer auth + body cap in front of a gateway's `handle`."""

    def __init__(
        self,
        handle: Handler,
        token: str | None,
        *,
        on_shutdown: Callable[[], object] = object,
        body_timeout: float = BODY_TIMEOUT_S,
    ) -> None:
        """`token` None: no authorization (a socket only its owner can reach);
        `on_shutdown` runs at the lifespan's shutdown; `body_timeout`: seconds to receive
        a whole body."""
        self.handle = handle
        self._expected_header = None if token is None else b"Bearer " + token.encode()
        self._on_shutdown = on_shutdown
        self._body_timeout = body_timeout

    def authorized(self, raw_headers: list[tuple[bytes, bytes]]) -> bool:
        """Exactly one Authorization header whose value is `Bearer <token>`.

        The value is compared in constant time without case folding, so a lowercase
        scheme, a second space or a no-break space fail. Spaces and tabs around it are not
        part of a field value (RFC 9110, 5.5): the HTTP parsers drop them (uvicorn's
        httptools one from 0.55 on) and so do we, whichever parser serves.
        """
        if self._expected_header is None:
            return True
        values = [value for name, value in raw_headers if name.lower() == b"authorization"]
        if len(values) != 1:
            return False
        return hmac.compare_digest(values[0].strip(b" \t"), self._expected_header)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        raw_headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw_headers
        }
        # The raw (still percent-encoded) path: the gateway decodes each segment itself,
        # so an id containing "/" (sent as %2F) stays one segment.
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else scope.get("path", "/")
        authorized = self.authorized(raw_headers)
        if not authorized and path not in PUBLIC_PATHS:
            await self._send(send, unauthorized(), close=True)
            return
        cap = body_cap(path)
        declared = _declared_length(headers)
        method = scope.get("method", "GET")
        if not authorized:  # a public route without the token: its body stays unread
            if declared > cap:
                await self._refuse(send, *oversize_refusal(method, path, headers))
                return
            request = Request(method, path, b"", headers)
            await self._send(send, await self.handle(request), close=True)
            return
        if declared > cap + DISCARD_BYTES:
            await self._refuse(send, *oversize_refusal(method, path, headers))
            return
        body = None
        if declared <= cap:
            try:
                async with asyncio.timeout(self._body_timeout):
                    body = await _read_body(receive, cap)
            except TimeoutError:
                await self._refuse(send, 408, "Request body not received in time")
                return
        if body is None:  # declared, or grown, past the cap
            await self._refuse_then_drop(send, receive, *oversize_refusal(method, path, headers))
            return
        if method == "POST" and path.endswith("/execute") and wants_stream(headers):
            await self._stream_answer(Request(method, path, body, headers), receive, send)
            return
        request = Request(method, path, body, headers)
        await self._send(send, await self._answer(request, receive))

    async def _answer(self, request: Request, receive: Receive) -> Response:
        """The handler's answer; a disconnect meanwhile gives the request up (the handler
        still finishes it: what it did is stored as any other request's)."""
        answering = asyncio.ensure_future(self.handle(request))
        disconnect = asyncio.ensure_future(_disconnected(receive))
        try:
            done, _ = await asyncio.wait(
                {answering, disconnect}, return_when=asyncio.FIRST_COMPLETED
            )
            if disconnect in done:
                request.given_up.set()
            return await answering
        finally:
            await cancel_and_wait(disconnect)

    async def _stream_answer(self, plain: Request, receive: Receive, send: Send) -> None:
        """An execution whose client takes a stream: its output lines as NDJSON while it
        runs, then the answer as the last line. One that printed nothing before it ended
        is answered plainly, status and all."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def sink(event: dict[str, Any]) -> None:  # called on an engine thread
            loop.call_soon_threadsafe(events.put_nowait, event)

        request = dataclasses.replace(plain, events=sink)
        answering = asyncio.ensure_future(self.handle(request))
        disconnect = asyncio.ensure_future(_disconnected(receive))
        streaming = False

        async def emit(line: bytes) -> None:
            nonlocal streaming
            if not streaming:
                streaming = True
                headers = [(b"content-type", NDJSON.encode()), (b"cache-control", b"no-store")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": line + b"\n", "more_body": True})

        try:
            while not answering.done():
                getting = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait(
                    {answering, disconnect, getting}, return_when=asyncio.FIRST_COMPLETED
                )
                if getting in done:
                    await emit(json.dumps(getting.result()).encode())
                else:
                    getting.cancel()
                if disconnect in done:  # nobody reads what follows
                    request.given_up.set()
                    await answering
                    return
            response = answering.result()
            if not streaming:
                await self._send(send, response)
                return
            while not events.empty():  # lines written just before the answer
                await emit(json.dumps(events.get_nowait()).encode())
            await send({"type": "http.response.body", "body": answer_event(response) + b"\n"})
        finally:
            await cancel_and_wait(disconnect)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._on_shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @classmethod
    async def _refuse(cls, send: Send, status: int, message: str) -> None:
        """Answer a request whose body was not (wholly) read, and close its connection."""
        await cls._send(send, error_json(validation_error(message, status)), close=True)

    @classmethod
    async def _refuse_then_drop(
        cls, send: Send, receive: Receive, status: int, message: str
    ) -> None:
        """Answer (413, or 415) before reading on; then drop (never keep) what keeps
        coming, up to `DISCARD_BYTES` and `DISCARD_S`, so the client reads the answer
        rather than a reset; then close the connection."""
        refusal = error_json(validation_error(message, status))
        await cls._send(send, refusal, close=True, complete=False)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DISCARD_S):
                await _discard_body(receive, DISCARD_BYTES)
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _send(
        send: Send, response: Response, *, close: bool = False, complete: bool = True
    ) -> None:
        """Send `response`; `close`: then close the connection (uvicorn does so after a
        `connection: close` answer), leaving whatever the client still sends unread;
        `complete` False: the caller ends the response (the bytes go out now)."""
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"cache-control", b"no-store"),
            (b"content-length", str(len(response.body)).encode()),
        ]
        headers += [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers
        ]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body, "more_body": not complete})


def _declared_length(headers: dict[str, str]) -> int:
    """The body length the request's Content-Length declares (0 without one; the HTTP
    parser has refused a malformed one already)."""
    try:
        return int(headers.get("content-length", "0"))
    except ValueError:
        return 0


async def _read_body(receive: Receive, cap: int) -> bytes | None:
    """The request body, or None as soon as it exceeds `cap` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _discard_body(receive: Receive, limit: int) -> None:
    """Read the rest of the body and drop it, until it ends, `limit` bytes were dropped,
    none came for `DISCARD_IDLE_S` (a client that sends nothing before its answer) or the
    client went away."""
    dropped = 0
    while dropped <= limit:
        try:
            async with asyncio.timeout(DISCARD_IDLE_S):
                message = await receive()
        except TimeoutError:
            return
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return
        dropped += len(message.get("body", b""))


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
