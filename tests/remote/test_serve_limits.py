"""`serve` against clients that send slowly, hold connections open or send too much.

A client without the token is answered before its body is read and its connection is
closed; every client has `HEADER_TIMEOUT_S` for its headers; a body larger than the
route accepts is refused before it is read; connections are kept below the process's
file limit, so that however many of them clients without the token hold, the token
holder is answered; and an error those clients provoke is logged a few times a second
at most. Each test starts its own `serve` (some under a low file limit) and stops it.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.serve_process import stop_process
from workbench.backends.daemon.location import socket_path
from workbench.daemon.server import (
    HEADER_TIMEOUT_S,
    LOG_REPEATS_PER_SECOND,
    MAX_HEADER_BYTES,
    ConnectionGuard,
    RepeatLimit,
)
from workbench.paths import private_data_dir
from workbench.protocol.http import (
    EXECUTE_BODY_CAP,
    FILES_BATCH_BODY_CAP,
    FILES_BODY_CAP,
    Request,
    Response,
)
from workbench.server.app import GatewayApp

TOKEN = "limits-token-0123456789"
READY = re.compile(r"listening on http://(127\.0\.0\.1):(\d+)")
LIMIT_FILES = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)
"""Runs argv[2:] under a file limit of argv[1] (no `preexec_fn`: the test process may have
threads, which a fork followed by Python code can deadlock)."""
ANSWER_SECONDS = 3.0
"""How soon an answer that needs no engine must come, however busy the machine."""


@dataclass(frozen=True)
class Served:
    address: tuple[str, int]
    data_dir: Path
    log: Path
    process: subprocess.Popen[bytes]

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serve(directory: Path, *, max_files: int | None = None) -> Iterator[Served]:
    """`serve --port 0` with its output in a file (a flood cannot block it on a pipe),
    under a file limit of `max_files` when given; stopped (killed if need be) after."""
    data_dir = directory / "data"
    command = [sys.executable, "-m", "workbench", "serve", "--port", "0"]
    command += ["--data-dir", str(data_dir), "--token", TOKEN]
    if max_files is not None:
        command = [sys.executable, "-c", LIMIT_FILES, str(max_files), *command]
    log = directory / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while (ready := READY.search(log.read_text(errors="replace"))) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve did not start:\n" + log.read_text(errors="replace"))
            time.sleep(0.05)
        yield Served((ready.group(1), int(ready.group(2))), data_dir, log, process)
    finally:
        stop_process(process)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("limits")) as process:
        yield process


def request_head(method: str, path: str, *headers: str, token: bool) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", *headers]
    if token:
        lines.append(f"authorization: Bearer {TOKEN}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(connection: socket.socket, timeout: float) -> tuple[int, dict[str, str]]:
    """The status and (lower-case) headers of the answer on `connection`, its body read."""
    connection.settimeout(timeout)
    response = http.client.HTTPResponse(connection)
    response.begin()
    response.read()
    return response.status, {name.lower(): value for name, value in response.getheaders()}


def closed_by_server(connection: socket.socket, timeout: float) -> bool:
    """Whether the server closes `connection` within `timeout` (what it sent is read)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if select.select([connection], [], [], left)[0]:
            try:
                if connection.recv(65536) == b"":
                    return True
            except ConnectionResetError:
                return True
    return False


def authorized_status(served: Served, path: str, timeout: float) -> int:
    client = http.client.HTTPConnection(*served.address, timeout=timeout)
    try:
        client.request("GET", path, headers={"authorization": f"Bearer {TOKEN}"})
        response = client.getresponse()
        response.read()
        return response.status
    finally:
        client.close()


# -- bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framing", "first_piece"),
    [
        ("content-length: 1000000", b"x" * 1024),
        ("transfer-encoding: chunked", b"400\r\n" + b"x" * 1024 + b"\r\n"),
    ],
    ids=["content-length", "chunked"],
)
def test_a_401_arrives_before_the_body_is_sent(
    served: Served, framing: str, first_piece: bytes
) -> None:
    """A 1 MB body (within the route's limit) of which 1 KiB was sent: the 401 does not
    wait for the rest, and the connection is closed instead of read on."""
    head = request_head("POST", "/v1/sandboxes/slow/files", framing, token=False)
    with socket.create_connection(served.address, timeout=10) as connection:
        connection.sendall(head + first_piece)
        status, headers = read_answer(connection, ANSWER_SECONDS)
        assert (status, headers["connection"]) == (401, "close")
        assert closed_by_server(connection, ANSWER_SECONDS)


def test_a_body_declared_too_large_is_refused_before_it_is_sent(served: Served) -> None:
    head = request_head(
        "POST", "/v1/sandboxes/big/files", f"content-length: {100 * 2**20}", token=True
    )
    with socket.create_connection(served.address, timeout=10) as connection:
        connection.sendall(head)
        status, headers = read_answer(connection, ANSWER_SECONDS)
        assert (status, headers["connection"]) == (413, "close")
        assert closed_by_server(connection, ANSWER_SECONDS)


@pytest.mark.parametrize(
    ("path", "declared"),
    [
        ("/v1/runtimes/PYTHON/execute", EXECUTE_BODY_CAP + 1),
        ("/v1/sandboxes/big/execute", EXECUTE_BODY_CAP + 1),
        ("/v1/sandboxes/big/contexts", EXECUTE_BODY_CAP + 1),
        ("/v1/sandboxes/big/env", EXECUTE_BODY_CAP + 1),
        ("/v1/sandboxes/big/files", FILES_BODY_CAP + 1),
        ("/v1/sandboxes/big/files/batch", FILES_BATCH_BODY_CAP + 1),
        ("/v1/sandboxes/big/execute", 10_000_000),
    ],
)
def test_a_body_declared_past_its_route_s_cap_is_answered_413_at_once(
    served: Served, path: str, declared: int
) -> None:
    """The spec's caps (96 KiB; 2 MiB for /files; 8 MiB for the batch): headers declaring
    more and no body get their 413 within 2 s, not once a body came, and the connection
    is closed."""
    head = request_head(
        "POST", path, "content-type: application/json", f"content-length: {declared}", token=True
    )
    with socket.create_connection(served.address, timeout=10) as connection:
        started = time.monotonic()
        connection.sendall(head)
        status, headers = read_answer(connection, 2.0)
        assert time.monotonic() - started < 2.0
        assert (status, headers["connection"]) == (413, "close")
        assert closed_by_server(connection, ANSWER_SECONDS)


@pytest.mark.parametrize("sent", [False, True], ids=["declared", "sent"])
def test_a_stateless_execution_past_the_cap_that_is_not_json_is_415(
    served: Served, sent: bool
) -> None:
    """Spec 2.2.1 checks the content type before the length: a body past the cap that is
    not JSON gets 415, declared (at once) or sent whole; a sandbox route takes any content
    type (spec 2.4), so its answer stays 413."""
    size = EXECUTE_BODY_CAP + 1
    for path, status in [
        ("/v1/runtimes/PYTHON/execute", 415),
        ("/v1/sandboxes/big/execute", 413),
    ]:
        head = request_head(
            "POST", path, "content-type: text/plain", f"content-length: {size}", token=True
        )
        with socket.create_connection(served.address, timeout=10) as connection:
            connection.sendall(head + (b"x" * size if sent else b""))
            answer, headers = read_answer(connection, ANSWER_SECONDS)
            assert (path, answer, headers["connection"]) == (path, status, "close")


@pytest.mark.parametrize(
    ("path", "cap"),
    [("/v1/sandboxes/caps/env", EXECUTE_BODY_CAP), ("/v1/sandboxes/caps/files", FILES_BODY_CAP)],
)
def test_a_body_of_the_cap_is_read_and_one_byte_more_is_413(
    served: Served, path: str, cap: int
) -> None:
    """Bodies sent whole: one of exactly the cap gets its route's answer; one byte more
    gets 413, which the client reads after sending it all (the rest is dropped)."""
    start = (
        b'{"envVars": {"A": "1"}}' if path.endswith("/env") else b'{"op": "exists", "path": "a"}'
    )
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    for size, status in [(cap, 200), (cap + 1, 413)]:
        client = http.client.HTTPConnection(*served.address, timeout=ANSWER_SECONDS * 4)
        try:
            client.request("POST", path, body=start.ljust(size), headers=headers)
            response = client.getresponse()
            assert (size, response.status) == (size, status), response.read()
            response.read()
        finally:
            client.close()


def test_without_the_token_a_body_past_the_cap_is_still_401(served: Served) -> None:
    head = request_head(
        "POST", "/v1/sandboxes/big/execute", "content-length: 10000000", token=False
    )
    with socket.create_connection(served.address, timeout=10) as connection:
        connection.sendall(head)
        status, headers = read_answer(connection, ANSWER_SECONDS)
        assert (status, headers["connection"]) == (401, "close")


def test_a_chunked_body_growing_too_large_is_refused_and_not_read_on(served: Served) -> None:
    """Sent as fast as the server takes it: once past the limit (2 MiB), 413 comes and
    the connection closes, long before the 32 MiB on offer are sent."""
    head = request_head("POST", "/v1/sandboxes/big/files", "transfer-encoding: chunked", token=True)
    piece = b"40000\r\n" + b"x" * 0x40000 + b"\r\n"
    sent = 0
    with socket.create_connection(served.address, timeout=10) as connection:
        connection.sendall(head)
        try:
            while sent < 32 * 2**20:
                connection.sendall(piece)
                sent += 0x40000
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        status, headers = read_answer(connection, ANSWER_SECONDS)
    assert (status, headers["connection"]) == (413, "close")
    assert FILES_BODY_CAP < sent < 16 * 2**20


def test_an_authorized_body_sent_too_slowly_is_answered_408() -> None:
    """The body's deadline (in-process: the real one is a minute)."""
    handled: list[Request] = []

    async def handle(request: Request) -> Response:
        handled.append(request)
        return Response(200, b"{}")

    async def one_piece_then_nothing() -> dict[str, Any]:
        if not sent_pieces:
            sent_pieces.append(1)
            return {"type": "http.request", "body": b"{", "more_body": True}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    sent_pieces: list[int] = []
    answer: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        answer.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/sandboxes/a/execute",
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
    }
    app = GatewayApp(handle, TOKEN, body_timeout=0.2)
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(app(scope, one_piece_then_nothing, send), 5))
    assert time.monotonic() - started < 2
    assert handled == []
    assert answer[0]["status"] == 408
    assert (b"connection", b"close") in answer[0]["headers"]


# -- headers ---------------------------------------------------------------------------------


def send_slowly_until_closed(connection: socket.socket, give_up_after: float) -> float | None:
    """Send a header byte every 0.2 s; the seconds until the server closed, or None."""
    started = time.monotonic()
    connection.sendall(b"x-slow: ")
    while time.monotonic() - started < give_up_after:
        try:
            connection.sendall(b"a")
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
        if closed_by_server(connection, 0.2):
            return time.monotonic() - started
    return None


@pytest.mark.parametrize("after_an_answer", [False, True], ids=["first", "after-an-answer"])
def test_slow_headers_are_dropped_after_the_time_limit(
    served: Served, after_an_answer: bool
) -> None:
    """Bytes keep coming (so uvicorn's keep-alive timer never fires), the headers never end:
    the connection is closed `HEADER_TIMEOUT_S` after it opened, or after its last answer."""
    with socket.create_connection(served.address, timeout=10) as connection:
        if after_an_answer:
            connection.sendall(request_head("GET", "/v1/sandboxes", token=True))
            assert read_answer(connection, ANSWER_SECONDS)[0] == 200
        connection.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        closed_after = send_slowly_until_closed(connection, HEADER_TIMEOUT_S + 3)
    assert closed_after is not None
    assert HEADER_TIMEOUT_S - 0.5 < closed_after < HEADER_TIMEOUT_S + 2


def test_a_connection_idle_past_the_header_limit_still_serves(served: Served) -> None:
    """A client's pool reuses an idle connection for up to its own expiry (httpx: 5 s):
    the server must not close it at the header limit, or a request sent at that moment
    is lost (seen as "Network connection lost" from workerd)."""
    with socket.create_connection(served.address, timeout=10) as connection:
        connection.sendall(request_head("GET", "/v1/sandboxes", token=True))
        assert read_answer(connection, ANSWER_SECONDS)[0] == 200
        time.sleep(HEADER_TIMEOUT_S + 1)
        connection.sendall(request_head("GET", "/v1/sandboxes", token=True))
        assert read_answer(connection, ANSWER_SECONDS)[0] == 200


def test_headers_beyond_the_limit_close_the_connection(served: Served) -> None:
    with socket.create_connection(served.address, timeout=10) as connection:
        connection.sendall(b"GET /v1/health HTTP/1.1\r\nx-big: " + b"a" * (4 * MAX_HEADER_BYTES))
        assert closed_by_server(connection, ANSWER_SECONDS)


# -- connections and the log -----------------------------------------------------------------


def connect_locally(path: str) -> socket.socket:
    """A connection to the daemon's socket, waiting while its queue is full."""
    deadline = time.monotonic() + 10
    while True:
        local = socket.socket(socket.AF_UNIX)
        local.setblocking(False)
        try:
            local.connect(path)
            return local
        except BlockingIOError:  # the queue is full: the daemon accepts in a moment
            local.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_slow_clients_without_the_token_leave_the_token_holder_answered(tmp_path: Path) -> None:
    """300 connections without the token (slow headers, slow bodies) against a file limit
    of 256: the token holder is still answered at once, and nothing is logged."""
    slow_body = request_head("POST", "/v1/sandboxes", "content-length: 1000000", token=False)
    with serve(tmp_path, max_files=256) as served, ExitStack() as connections:
        for number in range(300):
            connection = socket.create_connection(served.address, timeout=10)
            connections.enter_context(connection)
            if number % 2:
                connection.sendall(slow_body + b"{")
            else:
                connection.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        started = time.monotonic()
        assert authorized_status(served, "/v1/sandboxes", timeout=ANSWER_SECONDS) == 200
        assert time.monotonic() - started < ANSWER_SECONDS
        own_lines = ("sandbox-workbench serve:", "note:")
        logged = [line for line in served.logged().splitlines() if not line.startswith(own_lines)]
        assert logged == []


def test_failing_accepts_are_logged_a_few_times_a_second(tmp_path: Path) -> None:
    """The daemon's own socket (whose clients are this user's, and not limited) holds
    every descriptor, so that each TCP client makes accepting fail: the log gets a few
    lines a second, and once descriptors are free again the token holder is answered."""
    with serve(tmp_path, max_files=128) as served:
        local_socket = str(socket_path(private_data_dir(served.data_dir)))
        started = time.monotonic()
        with ExitStack() as connections:
            for _ in range(160):
                connections.enter_context(connect_locally(local_socket))
            for _ in range(40):
                connections.enter_context(socket.create_connection(served.address, timeout=10))
            time.sleep(2)
        failures = served.logged().count("out of system resource")
        seconds = time.monotonic() - started
        assert 0 < failures <= LOG_REPEATS_PER_SECOND * (seconds + 2), failures
        assert authorized_status(served, "/v1/sandboxes", timeout=10) == 200


# -- the parts on their own ------------------------------------------------------------------


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_at_the_limit_the_connection_waiting_longest_for_headers_is_closed() -> None:
    guard = ConnectionGuard(3)
    first, second, third, fourth, fifth = (FakeTransport() for _ in range(5))
    for transport in (first, second, third):
        assert guard.admit(transport)
        guard.awaiting_headers(transport)
    guard.request_began(first)  # under way: never closed for a newcomer
    assert guard.admit(fourth)
    assert second.closed and not first.closed and not third.closed
    guard.request_began(third)
    guard.request_began(fourth)
    assert not guard.admit(fifth)  # every connection has a request under way
    guard.forget(first)
    assert guard.admit(fifth)


def test_a_repeated_message_is_let_through_a_few_times_a_second() -> None:
    now = [0.0]
    limit = RepeatLimit(per_second=3, clock=lambda: now[0])

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)

    passed = [record("accept failed\nsocket: fd=3") for _ in range(100)]
    assert [limit.filter(item) for item in passed] == [True] * 3 + [False] * 97
    assert "repeats dropped" in passed[2].getMessage()
    assert limit.filter(record("another message"))
    now[0] = 1.0
    assert limit.filter(record("accept failed\nsocket: fd=4"))
