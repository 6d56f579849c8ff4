"""`SocketTransport`: gateway requests to the local daemon over its Unix socket.

HTTP/1.1, one connection per request (a Unix connect costs microseconds), spoken by
hand rather than through httpx: importing httpx alone takes longer than a whole `run`
may (benchmarks/README.md, cli). The daemon is ours, so the subset is small: a
Content-Length body each way, and a chunked NDJSON answer for an execution whose output
streams. A request given up (its timeout, a cancelled task, Ctrl+C)
closes its connection, and the daemon cancels the execution it was waiting for. Every
answer names the daemon that gave it (`DAEMON_HEADER`), so that a client that lives long
sees when another client replaced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.backends.daemon.location import peer_is_this_user
from workbench.config import LocalSettings
from workbench.core.tasks import cancel_and_wait
from workbench.protocol.errors import SandboxError, error_response
from workbench.protocol.http import (
    MUST_EXIST_HEADER,
    NDJSON,
    EventSink,
    Request,
    Response,
    SinkFailed,
    body_cap,
    cancel_request,
    cancelled_answer,
    error_json,
    guarded_sink,
    json_payload,
    parse_json,
    read_event_stream,
    validation_error,
)

CONNECT_SECONDS = 5.0
KEEPALIVE_SECONDS = 60.0
MAX_HEAD_BYTES = 65_536
DAEMON_HEADER = "x-sandbox-workbench-daemon"
"""On every answer of the daemon's socket (never on `serve`'s TCP): `DaemonIdentity` as
JSON. A header, not a field of `/v1/health`: `serve` in front of a daemon passes bodies
on to its TCP clients, and health needs no token there."""
STOP_REASON_HEADER = "x-sandbox-workbench-stop-reason"
"""On a `POST /v1/daemon/stop`: why the client stops the daemon (its log and the errors
of runs it cancels say it), `printable_reason`; without it, `daemon stop`."""


def printable_reason(reason: str) -> str | None:
    """`reason` stripped, if it is 1-200 characters of printable ASCII (a header can carry
    it, a log line shows it as it is); else None."""
    reason = reason.strip()
    if not reason or len(reason) > 200 or not all(" " <= char <= "~" for char in reason):
        return None
    return reason


BRIEF_HEADER = "x-sandbox-workbench-brief"
"""On a `GET /v1/daemon`, whatever its value: `memoryBytes` is null. A client connecting
needs only the rest, and reading the memory takes the daemon milliseconds per engine
process; a daemon of an earlier version answers it anyway."""


@dataclass(frozen=True)
class DaemonIdentity:
    """Which daemon answered: another pid or start time is another daemon (a client that
    asked for other settings or another version replaced it, or it exited and was
    started again)."""

    pid: int
    started_at: int
    """Epoch ms."""
    version: str
    settings: LocalSettings | None
    started_by: int | None
    """The pid of the client that started it (None: `serve`, or started by hand)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "startedAt": self.started_at,
            "version": self.version,
            "settings": None if self.settings is None else self.settings.to_json(),
            "startedBy": self.started_by,
        }

    @classmethod
    def from_json(cls, data: Any) -> DaemonIdentity | None:
        """The identity `data` holds; None when it holds none."""
        if not isinstance(data, dict):
            return None
        pid, started_at, version = data.get("pid"), data.get("startedAt"), data.get("version")
        started_by = data.get("startedBy")
        if not isinstance(pid, int) or not isinstance(started_at, int):
            return None
        if not isinstance(version, str) or not isinstance(started_by, int | None):
            return None
        settings = LocalSettings.from_json(data.get("settings"))
        return cls(pid, started_at, version, settings, started_by)

    @classmethod
    def from_header(cls, value: str | None) -> DaemonIdentity | None:
        if not value:
            return None
        try:
            return cls.from_json(parse_json(value))
        except ValueError:
            return None


class DaemonUnreachableError(SandboxError):
    """The daemon did not answer (code `CONNECTION_FAILED`)."""


def unreachable(message: str, socket: Path) -> DaemonUnreachableError:
    return DaemonUnreachableError(
        error_response("CONNECTION_FAILED", message, {"socket": str(socket)}, http_status=503)
    )


class SocketTransport:
    """The `Transport` of the local backend through its daemon."""

    enforces_deadlines = True

    def __init__(self, socket: Path, description: str, data_dir: Path | None = None) -> None:
        """`data_dir`: the daemon's, to start a new one when it is gone (a client that
        lives long, as the TUI or `watch`, outlives a daemon that exits when idle)."""
        self.socket = socket
        self.description = description
        self.data_dir = data_dir
        self.daemon: DaemonIdentity | None = None
        """The daemon that answered last (or was found when the backend opened)."""

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
        payload = b"" if body is None else json_payload(body)
        return await self._exchange(method, path, payload, dict(headers or {}), timeout, on_event)

    async def forward(self, request: Request) -> Response:
        """Pass a request on as it came (`serve` in front of the daemon): its body, its
        encoding and its extension headers untouched; given up, its connection closes and
        the daemon gives it up."""
        extra = {
            name: request.headers.get(name, "") for name in ("content-encoding", MUST_EXIST_HEADER)
        }
        if request.events is not None:
            extra["accept"] = NDJSON
        exchange = asyncio.ensure_future(
            self._exchange(request.method, request.path, request.body, extra, None, request.events)
        )
        given_up = asyncio.ensure_future(request.given_up.wait())
        try:
            await asyncio.wait({exchange, given_up}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled itself: the daemon's request goes with it
            given_up.cancel()
            with contextlib.suppress(SandboxError):
                await cancel_and_wait(exchange)
            raise
        given_up.cancel()
        if not exchange.done():
            with contextlib.suppress(SandboxError):
                await cancel_and_wait(exchange)
            return Response(499, b"")  # nobody is waiting for it
        return exchange.result()

    async def _exchange(
        self,
        method: str,
        path: str,
        payload: bytes,
        extra_headers: dict[str, str],
        timeout: float | None,
        on_event: EventSink | None = None,
    ) -> Response:
        if on_event is not None:
            extra_headers = {**extra_headers, "accept": NDJSON}
        if any("\r" in part or "\n" in part for part in (method, path, *extra_headers.values())):
            raise validation_error("A request line or header holds a line break")
        if len(payload) > body_cap(path):
            # The daemon's own answer: it would refuse such a body before reading it, and the
            # connection it then closes under the body would read as a crash here.
            return error_json(validation_error("Request too large", 413))
        extra = "".join(f"{name}: {value}\r\n" for name, value in extra_headers.items() if value)
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: local-daemon\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n{extra}"
            "connection: close\r\n\r\n"
        ).encode("latin-1")
        reader, writer = await self._connect()
        sink = None if on_event is None else guarded_sink(on_event)
        try:
            writer.write(head + payload)
            await writer.drain()
            async with asyncio.timeout(timeout):
                response, headers = await _read_response(reader, sink)
        except SinkFailed as failed:  # the client's own failure (stdout closed), not the daemon's
            raise failed.error from None
        except TimeoutError:
            raise unreachable(
                f"the local daemon did not answer in time (waited {timeout:g} s)", self.socket
            ) from None
        except (OSError, EOFError, ValueError) as error:
            raise unreachable(
                f"the local daemon broke off the request ({error or type(error).__name__}): "
                "it may have been stopped or have crashed; run the command again",
                self.socket,
            ) from error
        finally:
            writer.close()
            with contextlib.suppress(OSError):  # a cancel while it closes still cancels
                await writer.wait_closed()
        self.daemon = DaemonIdentity.from_header(headers.get(DAEMON_HEADER)) or self.daemon
        return response

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the daemon, started again first when it is gone."""
        try:
            return await self._open()
        except (OSError, TimeoutError) as error:
            gone: BaseException = error
        if self.data_dir is not None:
            from workbench.backends.daemon.client import ensure_daemon

            given_up = threading.Event()
            try:
                # Whatever daemon runs by then is taken, even one of other settings that
                # another client started: replacing it would have that client replace
                # this one's in turn, back and forth (docs/architecture.md, Processes).
                info = await asyncio.to_thread(
                    ensure_daemon, self.data_dir, given_up=given_up, adopt=True
                )
                self.socket = Path(info.socket)
                self.daemon = info.identity
                return await self._open()
            except asyncio.CancelledError:
                given_up.set()  # its thread stops polling now, not a minute later
                raise
            except Exception as error:
                gone = error
        raise unreachable(
            f"the local daemon is not answering on {self.socket} ({gone}): run the "
            "command again to start a new one",
            self.socket,
        ) from gone

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with asyncio.timeout(CONNECT_SECONDS):
            reader, writer = await asyncio.open_unix_connection(str(self.socket))
        if not peer_is_this_user(writer.get_extra_info("socket")):
            writer.close()
            raise unreachable(
                f"the process answering on {self.socket} is another user's: refusing it",
                self.socket,
            )
        return reader, writer

    async def keep_alive(self, every: float = KEEPALIVE_SECONDS) -> None:
        """Keep the daemon from its idle exit while this client waits for something else
        (`watch` between changes); a daemon that went away is started again."""
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(SandboxError):
                await self._exchange("GET", "/v1/daemon", b"", {BRIEF_HEADER: "1"}, None)

    async def cancel(self, sandbox_id: str, context_id: str | None = None) -> bool:
        return cancelled_answer(await self.request("POST", *cancel_request(sandbox_id, context_id)))

    async def aclose(self) -> None:
        """Nothing is kept open between requests."""


async def _read_response(
    reader: asyncio.StreamReader, on_event: EventSink | None = None
) -> tuple[Response, dict[str, str]]:
    """The answer, and its headers (lower-case names)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise ValueError("the answer's head is too long") from None
    except asyncio.IncompleteReadError as error:
        raise EOFError("no answer") from error
    if len(head) > MAX_HEAD_BYTES:
        raise ValueError("the answer's head is too long")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    content_type = headers.get("content-type", "")
    try:
        if content_type.startswith(NDJSON) and on_event is not None:
            chunked = "chunked" in headers.get("transfer-encoding", "")
            chunks = _chunks(reader) if chunked else _rest(reader)
            return await read_event_stream(chunks, on_event), headers
        body = await reader.readexactly(int(length)) if length else await reader.read()
    except asyncio.IncompleteReadError as error:
        raise EOFError("the answer was cut off") from error
    return Response(int(parts[1]), body, content_type), headers


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's data, chunk by chunk (RFC 9112, 7.1)."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)  # ValueError: not a chunk
        if size == 0:
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]


async def _rest(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A body without a length: what comes until the connection closes."""
    while data := await reader.read(1 << 16):
        yield data
