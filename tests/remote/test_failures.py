"""The remote backend against gateways that misbehave: each failure is a clear error,
never a hang or a crash. The misbehaving gateways are real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from workbench.api import Backend, SandboxError
from workbench.backends.remote import (
    MAX_ANSWER_BYTES,
    ConnectionFailedError,
    HttpTransport,
    open_remote_backend,
    tls_context,
)
from workbench.protocol.http import NDJSON, parse_json

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request, read whole: its body."""
    headers = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in headers.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    return await reader.readexactly(length) if length else b""


async def write_answer(
    writer: asyncio.StreamWriter,
    status: str,
    body: bytes,
    content_type: str = "application/json",
    headers: str = "",
) -> None:
    """Write one answer (`headers` each ending in CRLF) and close; a client that stops
    reading early does not fail it."""
    writer.write(
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{headers}"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    writer.close()


def reply(
    status: str, body: bytes, content_type: str = "application/json", headers: str = ""
) -> Handler:
    """A gateway answering `body` to every request (see `write_answer`)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await write_answer(writer, status, body, content_type, headers)

    return handle


async def start(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture
async def gateway_factory() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def make(handler: Handler) -> str:
        server, url = await start(handler)
        servers.append(server)
        return url

    yield make
    for server in servers:
        server.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_server_down_is_a_connection_error() -> None:
    backend = open_remote_backend("down", f"http://127.0.0.1:{free_port()}", "t", retries=1)
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError) as caught:
        await backend.list_sandboxes()
    assert time.monotonic() - started < 5
    assert "connection refused" in caught.value.message or "cannot reach" in caught.value.message
    assert caught.value.code == "CONNECTION_FAILED"
    await backend.aclose()


async def test_unresolvable_host_is_a_clear_error() -> None:
    backend = open_remote_backend("dns", "http://no-such-host.invalid", "t", retries=0)
    with pytest.raises(ConnectionFailedError) as caught:
        await backend.runtimes()
    assert "no-such-host.invalid" in caught.value.message
    await backend.aclose()


async def test_slow_server_times_out(gateway_factory: Callable[[Handler], Awaitable[str]]) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(30)

    url = await gateway_factory(stall)
    timeout = httpx.Timeout(0.5)
    backend = open_remote_backend("slow", url, "t", timeout=timeout, retries=0)
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError) as caught:
        await backend.sandbox("demo").get_info()
    assert time.monotonic() - started < 5
    assert "did not answer in time" in caught.value.message
    await backend.aclose()


def trickling(content_type: str, unit: bytes) -> Handler:
    """A gateway that answers with `unit` every 0.2 s, for 40 s."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n\r\n".encode())
        with contextlib.suppress(ConnectionError):
            for _ in range(200):
                writer.write(unit)
                await writer.drain()
                await asyncio.sleep(0.2)

    return trickle


@pytest.mark.parametrize("call", ["info", "run with a timeout", "streamed run", "blank lines"])
async def test_a_gateway_trickling_its_answer_is_given_up_in_time(
    gateway_factory: Callable[[Handler], Awaitable[str]], call: str
) -> None:
    """A byte every 0.2 s never trips a read timeout of 1 s: the answer as a whole must
    come within the wait (the run's own timeout, else the read timeout: `run --timeout`
    on a remote profile); it used to wait for ever. Only a streamed run's output lines
    start the wait again (blank lines do not)."""
    if call == "blank lines":
        url = await gateway_factory(trickling(NDJSON, b"\n"))
    else:
        url = await gateway_factory(trickling("application/json", b" "))
    backend = open_remote_backend("trickle", url, "t", wait_seconds=1, retries=0)
    sandbox = backend.sandbox("demo")
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError) as caught:
        if call == "info":
            await sandbox.get_info()
        elif call == "run with a timeout":
            await sandbox.interpreter.run_code("1", binding="PYTHON", timeout=1.5)
        else:
            await sandbox.interpreter.run_code("1", binding="PYTHON", on_stdout=print)
    assert time.monotonic() - started < 5
    assert "did not answer in time" in caught.value.message
    await backend.aclose()


async def test_a_streamed_run_s_output_keeps_its_answer_waited_for(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """A run printing a line every 0.4 s for 2.4 s, with a read timeout of 1 s: its answer
    comes (each line starts the wait again). A wait the user gave (`run --timeout 1`,
    `wait_seconds`) bounds the whole answer instead: a gateway streaming for ever held
    the client for ever."""
    answer = {"type": "answer", "status": 200, "body": {"results": [], "logs": {}}}

    async def printing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {NDJSON}\r\n\r\n".encode())
        for number in range(6):
            line = {"type": "output", "stream": "stdout", "line": f"line {number}"}
            writer.write(json.dumps(line).encode() + b"\n")
            await writer.drain()
            await asyncio.sleep(0.4)
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
        writer.close()

    url = await gateway_factory(printing)
    backend = open_remote_backend("printing", url, "t", timeout=httpx.Timeout(1.0), retries=0)
    told: list[str] = []
    result = await backend.sandbox("demo").interpreter.run_code(
        "1", binding="PYTHON", on_stdout=told.append
    )
    assert result.error is None and told == [f"line {number}" for number in range(6)]
    await backend.aclose()
    bounded = open_remote_backend("printing", url, "t", wait_seconds=1, retries=0)
    told.clear()
    with pytest.raises(SandboxError, match=r"did not answer in time \(waited 1 s\)"):
        await bounded.sandbox("demo").interpreter.run_code(
            "1", binding="PYTHON", on_stdout=told.append
        )
    assert 1 <= len(told) <= 4
    await bounded.aclose()


async def test_a_line_callback_s_own_error_is_raised_as_it_is_not_blamed_on_the_gateway(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """A caller's `on_stdout` that raises (a ValueError of its own, a closed stdout's
    OSError) gets its error back as it raised it; it was reported as the gateway's
    invalid answer."""
    answer = {"type": "answer", "status": 200, "body": {"results": [], "logs": {}}}

    async def printing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {NDJSON}\r\n\r\n".encode())
        line = {"type": "output", "stream": "stdout", "line": "one"}
        writer.write(json.dumps(line).encode() + b"\n" + json.dumps(answer).encode() + b"\n")
        await writer.drain()
        writer.close()

    url = await gateway_factory(printing)
    backend = open_remote_backend("printing", url, "t", retries=0)

    try:
        for error in (ValueError("not mine: one"), BrokenPipeError("stdout closed")):

            def told(line: str, error: Exception = error) -> None:
                raise error

            with pytest.raises(type(error), match=str(error)):
                await backend.sandbox("demo").interpreter.run_code(
                    "1", binding="PYTHON", on_stdout=told
                )
    finally:
        await backend.aclose()


def gzip_bomb(inflated: int) -> bytes:
    """A gzip body of zeros that inflates to `inflated` bytes (about 1,000 times its size)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(inflated >> 20)) + packer.flush()


async def info_answered(
    gateway_factory: Callable[[Handler], Awaitable[str]], body: bytes, encoding: str
) -> SandboxError:
    """The error of a sandbox's info answered with `body` in `encoding` (it must fail)."""
    url = await gateway_factory(reply("200 OK", body, headers=f"content-encoding: {encoding}\r\n"))
    backend = open_remote_backend("encoded", url, "t", retries=0)
    try:
        with pytest.raises(SandboxError) as caught:
            await backend.sandbox("demo").get_info()
    finally:
        await backend.aclose()
    return caught.value


async def test_an_answer_past_the_cap_is_not_read_whole(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """A gzip bomb (100 KiB that inflate to 96 MiB here, to GiBs in an attack) stops at
    `MAX_ANSWER_BYTES`; it used to be inflated whole, to a MemoryError."""
    body = gzip_bomb(MAX_ANSWER_BYTES + (32 << 20))
    assert len(body) < 200_000
    refused = await info_answered(gateway_factory, body, "gzip")
    assert refused.code == "INTERNAL_ERROR"
    assert "larger than 64 MiB" in refused.message


async def test_an_answer_gzipped_twice_is_refused_unread(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """`gzip, gzip`: httpx chained its decoders and inflated each chunk whole, so 980
    bytes became 1 GiB before the cap looked; the client reads one layer only."""
    body = gzip.compress(gzip_bomb(32 << 20))
    refused = await info_answered(gateway_factory, body, "gzip, gzip")
    assert refused.code == "INTERNAL_ERROR"
    assert "encoded as 'gzip, gzip', which the client does not read" in refused.message


async def test_a_request_body_with_a_lone_surrogate_is_sent_escaped(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """httpx's own JSON encoder raised UnicodeEncodeError for code holding a lone
    surrogate; the body goes as JSON with the escape."""
    bodies: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        bodies.append(await read_request(reader))
        empty_run = b'{"results": [], "logs": {"stdout": [], "stderr": []}}'
        await write_answer(writer, "200 OK", empty_run)

    url = await gateway_factory(record)
    backend = open_remote_backend("odd", url, "t", retries=0)
    await backend.sandbox("demo").interpreter.run_code("'a\ud800b'", binding="PYTHON")
    (body,) = bodies
    assert json.loads(body)["code"] == "'a\ud800b'"
    await backend.aclose()


async def test_a_redirect_is_named_and_not_followed(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """An http:// URL of a gateway that lives at https:// answers 301: the error says
    where it points (it used to be "HTTP 301:"), and the token never goes there."""
    requested: list[bytes] = []
    where: list[str] = []

    async def elsewhere(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requested.append((await reader.readuntil(b"\r\n")).split()[1])
        writer.write(
            f"HTTP/1.1 301 Moved Permanently\r\nlocation: {where[0]}\r\n".encode()
            + b"content-length: 0\r\nconnection: close\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    url = await gateway_factory(elsewhere)
    where.append(f"{url}/moved-here")  # the same server: a followed redirect would show
    backend = open_remote_backend("moved", url, "t", retries=0)
    with pytest.raises(SandboxError) as caught:
        await backend.sandbox("demo").get_info()
    assert caught.value.code == "INTERNAL_ERROR"
    assert f"answered a redirect (301) to '{url}/moved-here'" in caught.value.message
    assert requested == [b"/v1/sandboxes/demo"]
    await backend.aclose()


async def test_a_304_is_not_taken_for_a_redirect(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    """A 304 (which httpx counts as a redirect) was "answered a redirect (304) to ''",
    then (review) a bare "HTTP 304:"."""

    async def not_modified(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 304 Not Modified\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    backend = open_remote_backend("stale", await gateway_factory(not_modified), "t", retries=0)
    with pytest.raises(SandboxError) as caught:
        await backend.sandbox("demo").get_info()
    assert caught.value.message.endswith("answered an unexpected HTTP 304")
    await backend.aclose()


async def test_garbage_body_is_an_internal_error(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await gateway_factory(reply("200 OK", b"<html>not json</html>", "text/html"))
    backend = open_remote_backend("garbage", url, "t")
    with pytest.raises(SandboxError) as caught:
        await backend.sandbox("demo").get_info()
    assert caught.value.code == "INTERNAL_ERROR"
    assert caught.value.message == "HTTP 200: OK"
    await backend.aclose()


@pytest.mark.parametrize("accept", ["json", "stream"])
async def test_json_nested_past_what_python_parses_is_an_internal_error(
    gateway_factory: Callable[[Handler], Awaitable[str]], accept: str
) -> None:
    """Valid JSON 100,000 levels deep: Python's parser recurses once per level, and the
    `RecursionError` it raises is reported as a body that cannot be read."""
    deep = b"[" * 100_000 + b"]" * 100_000
    if accept == "stream":  # a streamed run's last line holds the answer
        body = b'{"type": "answer", "status": 200, "body": ' + deep + b"}\n"
        url = await gateway_factory(reply("200 OK", body, "application/x-ndjson"))
    else:
        url = await gateway_factory(reply("200 OK", deep))
    backend = open_remote_backend("deep", url, "t")
    sandbox = backend.sandbox("demo")
    with pytest.raises(SandboxError) as caught:
        if accept == "stream":
            await sandbox.interpreter.run_code("1", binding="PYTHON", on_stdout=print)
        else:
            await sandbox.get_info()
    assert caught.value.code == "INTERNAL_ERROR"
    await backend.aclose()


class _Finalized:
    """Garbage in a cycle whose finalizer calls a function."""

    def __init__(self) -> None:
        self.itself = self

    def __del__(self) -> None:
        (lambda: None)()


def test_no_finalizer_fails_while_deep_json_is_parsed() -> None:
    """A collection that came as the parser of JSON nested past the limit had brought
    the stack to it ran finalizers there, which failed with RecursionError (each printed
    as "Exception ignored in"). A collection is started after each possible number of
    levels in turn."""
    failed: list[object] = []
    hook, threshold = sys.unraisablehook, gc.get_threshold()
    sys.unraisablehook = failed.append
    try:
        for levels in range(max(1, sys.getrecursionlimit() - 400), sys.getrecursionlimit() + 10):
            gc.collect(0)
            gc.set_threshold(levels)
            garbage = [_Finalized() for _ in range(3)]
            del garbage
            with pytest.raises(ValueError):
                parse_json(b"[" * 100_000 + b"]" * 100_000)
            gc.set_threshold(*threshold)
            gc.collect(0)
    finally:
        gc.set_threshold(*threshold)
        sys.unraisablehook = hook
    assert failed == []


async def test_json_of_the_wrong_shape_is_invalid_sandbox_response(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await gateway_factory(reply("200 OK", b'{"hello": 1}'))
    backend = open_remote_backend("shape", url, "t")
    with pytest.raises(SandboxError) as caught:
        await backend.sandbox("demo").interpreter.run_code("1", binding="PYTHON")
    assert caught.value.message == "Invalid sandbox response"
    assert caught.value.http_status == 500
    await backend.aclose()


async def test_unauthorized(gateway_factory: Callable[[Handler], Awaitable[str]]) -> None:
    body = (
        b'{"code": "UNAUTHORIZED", "message": "Missing or invalid bearer token", '
        b'"context": {}, "httpStatus": 401, "timestamp": "2026-01-01T00:00:00.000Z"}'
    )
    url = await gateway_factory(reply("401 Unauthorized", body))
    backend = open_remote_backend("auth", url, "wrong")
    with pytest.raises(SandboxError) as caught:
        await backend.list_sandboxes()
    assert caught.value.http_status == 401
    assert caught.value.code == "UNAUTHORIZED"
    await backend.aclose()


async def test_5xx_without_json_is_retried_then_reported(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    hits = 0
    plain = reply("503 Service Unavailable", b"upstream down", "text/plain")

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        await plain(reader, writer)

    url = await gateway_factory(count)
    backend = open_remote_backend("5xx", url, "t", retries=2)
    with pytest.raises(SandboxError) as caught:
        await backend.list_sandboxes()
    assert hits == 3  # GET is idempotent: retried twice
    assert caught.value.message == "HTTP 503: Service Unavailable"
    assert caught.value.http_status == 503
    await backend.aclose()


async def test_non_idempotent_requests_are_not_retried(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    hits = 0
    plain = reply("502 Bad Gateway", b"", "text/plain")

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        await plain(reader, writer)

    url = await gateway_factory(count)
    backend = open_remote_backend("post", url, "t", retries=2)
    with pytest.raises(SandboxError):
        await backend.sandbox("demo").interpreter.run_code("1", binding="PYTHON")
    assert hits == 1
    await backend.aclose()


async def test_error_response_maps_to_the_spec_class(
    gateway_factory: Callable[[Handler], Awaitable[str]],
) -> None:
    from workbench.protocol import errors

    body = (
        b'{"code": "FILE_NOT_FOUND", "message": "No such file: /workspace/x", '
        b'"context": {"path": "x", "operation": "file.read", "errno": "ENOENT"}, '
        b'"httpStatus": 404, "timestamp": "2026-01-01T00:00:00.000Z", "operation": "file.read"}'
    )
    url = await gateway_factory(reply("404 Not Found", body))
    backend = open_remote_backend("files", url, "t")
    with pytest.raises(errors.FileNotFoundError) as caught:
        await backend.sandbox("demo").read_file("x")
    assert caught.value.operation == "file.read"
    assert caught.value.context["errno"] == "ENOENT"
    await backend.aclose()


@pytest.mark.parametrize("sandbox_id", [".", ".."])
async def test_dot_ids_never_reach_a_gateway_as_another_route(
    gateway_factory: Callable[[Handler], Awaitable[str]], sandbox_id: str
) -> None:
    """`.` and `..` are valid ids (spec 8.1), but a URL path resolves them:
    `/v1/sandboxes/./execute` was a request about a sandbox named `execute`. The client
    refuses to send them; the local backend keeps them (tests/security/test_host_paths.py)."""
    requests: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readline())
        writer.close()

    backend = open_remote_backend("dots", await gateway_factory(handle), "t0ken")
    try:
        with pytest.raises(SandboxError) as caught:
            await backend.sandbox(sandbox_id).interpreter.run_code("1", binding="PYTHON")
        assert caught.value.http_status == 400
        assert "cannot travel in a gateway's URL" in caught.value.message
        assert requests == []
    finally:
        await backend.aclose()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes its certificate with openssl")
async def test_clients_share_one_tls_context_that_still_verifies(tmp_path: Path) -> None:
    """Every client of a process uses one TLS context (making one parses ~150 roots), and
    it still refuses a gateway whose certificate no root vouches for."""
    key, certificate = tmp_path / "key.pem", tmp_path / "certificate.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(certificate), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certificate, key)
    answered: list[bool] = []

    async def health(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ssl.SSLError):
            await reply("200 OK", b'{"ok": true}')(reader, writer)
            answered.append(True)

    server = await asyncio.start_server(health, "127.0.0.1", 0, ssl=server_context)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    first, second = HttpTransport(url, "t", retries=0), HttpTransport(url, "t", retries=0)
    try:
        contexts = [
            transport._client._transport._pool._ssl_context for transport in (first, second)
        ]
        assert contexts[0] is contexts[1]
        assert contexts[0].verify_mode == ssl.CERT_REQUIRED and contexts[0].check_hostname
        backend = Backend(first, name="self-signed")
        with pytest.raises(ConnectionFailedError) as caught:
            await backend.runtimes()
        assert "its certificate was rejected" in caught.value.message, caught.value.message
        assert answered == []
    finally:
        await first.aclose()
        await second.aclose()
        server.close()
        await server.wait_closed()


async def test_a_plain_http_client_trusts_no_root_and_parses_none() -> None:
    """A client of an `http://` gateway (a loopback `serve`) does not parse the ~150 roots,
    and its TLS context, which it never uses, verifies everything against none."""
    transport = HttpTransport("http://127.0.0.1:9", "t", retries=0)
    try:
        context = transport._client._transport._pool._ssl_context
        assert context is not tls_context()
        assert context.cert_store_stats()["x509_ca"] == 0
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    finally:
        await transport.aclose()
