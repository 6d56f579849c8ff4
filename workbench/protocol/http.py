"""Requests and responses of the gateway protocol: body caps and parsing on the serving
side (spec 2.1, 2.2.1, 2.4), and reading an answer into data or an error on the client
side (spec 4.5 `parseJsonResponse`)."""

from __future__ import annotations

import asyncio
import codecs
import gc
import json
import re
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

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
    "EXECUTE_BODY_ROOM",
    "FILES_BATCH_BODY_CAP",
    "FILES_BATCH_MAX_ENTRIES",
    "FILES_BODY_CAP",
    "NDJSON",
    "REASONS",
    "STARTED_EVENT",
    "WAITING_EVENT",
    "EventSink",
    "Handler",
    "OutputLines",
    "Request",
    "Response",
    "SinkFailed",
    "UnreadableAnswer",
    "answer_event",
    "answer_object",
    "body_cap",
    "cancel_request",
    "cancelled_answer",
    "code_problem",
    "error_json",
    "guarded_sink",
    "internal_error",
    "invalid_response",
    "json_payload",
    "method_not_allowed",
    "not_found",
    "output_event",
    "parse_json",
    "parse_json_response",
    "parse_object",
    "read_event_stream",
    "validate_code",
    "validation_error",
    "wants_stream",
]

EXECUTE_BODY_CAP = 98_304
EXECUTE_BODY_ROOM: Final = 2048
"""Room for an execute request's fields besides `code` as the TUI sends them (the context,
the language): a cell whose code as a JSON string takes more than the cap less this is
refused before it is sent."""
FILES_BODY_CAP = 2_097_152
CODE_BYTES_CAP = 65_536
FILES_BATCH_BODY_CAP: Final = 8 * 1_048_576
"""`POST /files/batch` (an extension), after gzip decoding: half the 16 MiB workspace, so
one request's peak memory stays bounded, and room for five 1 MiB files sent as base64."""
FILES_BATCH_MAX_ENTRIES: Final = 1000
"""Entries of one `POST /files/batch`: bounds one request's work and answer; a full
workspace (4,096 entries) is refilled in five batches."""
_FILES_PATH = re.compile(r"/v1/sandboxes/[^/]+/files(/batch)?")


_STATELESS_EXECUTE = re.compile(r"/v1/runtimes(?:/.*)?/execute")
"""The route of `POST /v1/runtimes/{binding...}/execute` (workbench.backends.local)."""


def is_json_content(headers: Mapping[str, str]) -> bool:
    """Spec 2.2.1's first check: the `content-type` header, lower-cased, starts with
    `application/json`."""
    return headers.get("content-type", "").lower().startswith("application/json")


def oversize_refusal(method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str]:
    """What a request with a body past its route's cap answers, before the body is read:
    413, or 415 for a stateless execution that is not JSON (spec 2.2.1 checks the content
    type first)."""
    stateless = method == "POST" and _STATELESS_EXECUTE.fullmatch(path.split("?", 1)[0])
    if stateless and not is_json_content(headers):
        return 415, "Content-Type must be application/json"
    return 413, "Request too large"


def body_cap(path: str) -> int:
    """The largest request body the gateway route at `path` takes (spec 2.4, 2.7): 2 MiB
    for a sandbox's `/files`, 8 MiB for `/files/batch` (also after gzip decoding, which
    the route checks), 96 KiB for any other."""
    files = _FILES_PATH.fullmatch(path.split("?", 1)[0])
    if files is None:
        return EXECUTE_BODY_CAP
    return FILES_BATCH_BODY_CAP if files.group(1) else FILES_BODY_CAP


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


NDJSON = "application/x-ndjson"
"""An `/execute` answer that streams (a workbench extension: docs/gateway-protocol.md):
output events, one JSON object a line, then the answer event."""
EventSink = Callable[[dict[str, Any]], None]
STREAMS = ("stdout", "stderr")


def parse_json(raw: bytes | str) -> Any:
    """`json.loads` of what another process sent: JSON nested deeper than Python parses
    from where this runs (its parser recurses once per level) is a `ValueError`, as any
    JSON that cannot be read, never a `RecursionError`. No garbage collection runs during
    the parse: one that ran as deep JSON brought the stack to its limit ran finalizers
    there, which failed, and each printed a traceback ("Exception ignored in")."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    finally:
        if collecting:
            gc.enable()


def output_event(stream: str, line: str) -> dict[str, Any]:
    """One line of an execution's output, as the guest wrote it."""
    return {"type": "output", "stream": stream, "line": line}


WAITING_EVENT: dict[str, Any] = {"type": "waiting"}
"""A streamed execution's event: it waits for its sandbox's turn (another request,
another client's run most likely, holds it), sent once it waited `WAIT_NOTICE_S`."""
STARTED_EVENT: dict[str, Any] = {"type": "started"}
"""A streamed execution's event after `WAITING_EVENT`: its turn came, it runs now."""


def answer_event(response: Response) -> bytes:
    """The last line of a streamed answer: what the plain answer would have been."""
    body = json.loads(response.body) if response.body else None
    return json.dumps({"type": "answer", "status": response.status, "body": body}).encode()


MUST_EXIST_HEADER = "x-sandbox-must-exist"
"""A request header (value `1`): carry the request out only if its sandbox exists, never
make it (an extension, `SANDBOX_MUST_EXIST_FEATURE`; docs/gateway-protocol.md)."""


def must_exist(headers: Mapping[str, str]) -> bool:
    """The request asks not to make its sandbox (`MUST_EXIST_HEADER` is `1`)."""
    return headers.get(MUST_EXIST_HEADER, "").strip() == "1"


def wants_stream(headers: Mapping[str, str]) -> bool:
    """The client takes a streamed answer (it asked with `Accept`)."""
    return NDJSON in headers.get("accept", "")


MAX_EVENT_BYTES = 4 << 20
"""The longest line of a streamed answer (its last holds the whole result)."""


class SinkFailed(Exception):
    """The caller's event sink raised `error`: raised again as it was, never taken for a
    server that broke off or answered garbage (a `| head` that closed stdout is an OSError,
    a caller's own check may be a ValueError)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def guarded_sink(on_event: EventSink) -> EventSink:
    """`on_event`, its failures raised as `SinkFailed`."""

    def sink(event: dict[str, Any]) -> None:
        try:
            on_event(event)
        except Exception as error:
            raise SinkFailed(error) from error

    return sink


async def read_event_stream(chunks: AsyncIterator[bytes], on_event: EventSink) -> Response:
    """Read a streamed answer: each output event goes to `on_event` as it arrives; the
    answer event becomes the `Response` the plain answer would have been (a waiting
    event goes to `on_event` too). `ValueError`
    for what is not such a stream, `EOFError` if it ends before its answer."""
    pending = bytearray()
    async for chunk in chunks:
        # Only the new chunk is searched: a long line sent a KiB at a time was joined and
        # split again whole at each chunk, 7 s for 4 MiB (a helper).
        if b"\n" not in chunk:
            pending += chunk
            lines = []
        else:
            *lines, rest = chunk.split(b"\n")
            lines[0] = bytes(pending) + lines[0]
            pending = bytearray(rest)
        if len(pending) > MAX_EVENT_BYTES:
            raise ValueError("a line of the streamed answer is too long")
        for line in lines:
            if not line.strip():
                continue
            event = parse_json(line)
            if not isinstance(event, dict):
                raise ValueError("a line of the streamed answer is not an object")
            if event.get("type") == "answer":
                status = event.get("status")
                if not isinstance(status, int) or isinstance(status, bool):
                    raise ValueError("the streamed answer has no status")
                return Response(status, json.dumps(event.get("body")).encode())
            if event.get("type") in ("output", "waiting", "started"):
                on_event(event)
    raise EOFError("the streamed answer was cut off")


class OutputLines:
    """Turns an execution's output bytes, as they come, into lines for `sink`: decoded as
    UTF-8 (a character split between writes waits for its end), one event per completed
    line. A last line without its newline is not sent: the answer holds it."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._decoders = {
            stream: codecs.getincrementaldecoder("utf-8")("replace") for stream in STREAMS
        }
        self._partial = dict.fromkeys(STREAMS, "")

    def __call__(self, stream: str, data: bytes) -> None:
        if stream not in self._partial:
            return
        text = self._partial[stream] + self._decoders[stream].decode(data)
        *lines, self._partial[stream] = text.split("\n")
        for line in lines:
            self._sink(output_event(stream, line))


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
    events: EventSink | None = None
    """Where an execution streams its output lines as they are written, when the client
    asked for a stream (`Accept: application/x-ndjson`); callable from any thread."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    """Further headers (lower-case names), such as a 405's `allow`."""

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


def json_payload(body: Any) -> bytes:
    """A request's JSON body as httpx sends it: compact UTF-8 (a `\\uXXXX` escape for each
    non-ASCII character would make code under the 64 KiB limit a body over the gateway's
    96 KiB cap), escaped only where a lone surrogate cannot be UTF-8."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


Handler = Callable[[Request], Awaitable[Response]]
"""A gateway's answer to one request (`LocalGateway.handle`, behind `serve` and the daemon;
a test's own in `MockTransport`)."""


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


def cancel_request(sandbox_id: str, context_id: str | None) -> tuple[str, dict[str, str] | None]:
    """The path and body of `POST /v1/sandboxes/:id/cancel` (an extension): the sandbox's
    execution in progress, or with `context_id` only one in that context."""
    path = f"/v1/sandboxes/{quote(sandbox_id, safe='')}/cancel"
    return path, None if context_id is None else {"contextId": context_id}


def answer_object(reply: Response, status: int) -> dict[str, Any] | None:
    """`reply`'s JSON object if it answers with `status` (None for anything else)."""
    if reply.status != status:
        return None
    try:
        data = parse_json(reply.body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def cancelled_answer(reply: Response) -> bool:
    """Whether a gateway's answer to `cancel_request` says an execution was interrupted
    (anything else, a 404 of a gateway without the route included: it was not)."""
    data = answer_object(reply, 200)
    return data is not None and data.get("cancelled") is True


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
        body = parse_json(raw)
    except ValueError:
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


_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What JavaScript's `trim()` removes (WhiteSpace and LineTerminator): the reference
judges blank code by it. Python's `str.strip()` also removes U+001C-U+001F and U+0085,
and keeps U+FEFF."""


BLANK_CODE: Final = "Non-empty code is required"
CODE_TOO_LONG: Final = "Code exceeds 64 KiB"


def code_problem(code: str) -> str | None:
    """Why rows 9-10 of spec 2.2.1 refuse `code` (`BLANK_CODE`, `CODE_TOO_LONG`: over
    64 KiB of UTF-8), or None."""
    if not code.strip(_JS_WHITESPACE):
        return BLANK_CODE
    if len(code.encode("utf-8", errors="surrogatepass")) > CODE_BYTES_CAP:
        return CODE_TOO_LONG
    return None


def validate_code(body: dict[str, Any]) -> str:
    """Rows 9-10 of spec 2.2.1: non-blank code of at most 64 KiB (UTF-8)."""
    code = body.get("code")
    if not isinstance(code, str):
        raise validation_error(BLANK_CODE)
    problem = code_problem(code)
    if problem is not None:
        raise validation_error(problem, 413 if problem == CODE_TOO_LONG else 400)
    return code


def parse_json_response(response: Response) -> Any:
    """Spec 4.5 `parseJsonResponse`: 204 → {}; non-JSON → INTERNAL_ERROR; non-2xx → class."""
    if response.status == 204:
        return {}
    try:
        body = parse_json(response.body)
    except ValueError:
        raise create_error_from_response(None, response.status, response.reason) from (
            UnreadableAnswer(f"HTTP {response.status} {response.reason} with a body not JSON")
        )
    if not 200 <= response.status < 300:
        raise create_error_from_response(body, response.status, response.reason)
    return body


class UnreadableAnswer(ValueError):
    """Why an answer could not be read (not JSON, not the shape asked for, too large, a
    redirect): the cause of the INTERNAL_ERROR raised for it, so that a command can tell
    a gateway's fault from the gateway's own errors."""


def invalid_response(message: str = "Invalid sandbox response") -> SandboxError:
    """An answer that could not be read, or not as the shape asked for (INTERNAL_ERROR,
    500), caused by an `UnreadableAnswer` unless raised from another cause."""
    error = SandboxError(error_response(ErrorCode.INTERNAL_ERROR, message, http_status=500))
    error.__cause__ = UnreadableAnswer(message)
    return error
