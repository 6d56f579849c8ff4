"""`serve`'s bearer token: weak tokens are refused at startup, headers are compared raw."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.serve_process import ServeProcess, serve_process

CONSOLE_SCRIPT = str(Path(sys.executable).with_name("sandbox-workbench"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(tmp_path_factory.mktemp("serve")) as process:
        yield process


def status_for(url: str, authorization: list[bytes]) -> int:
    """GET /v1/sandboxes with these raw Authorization header values, sent byte for byte."""
    address = urlsplit(url)
    assert address.hostname == "127.0.0.1" and address.port is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        connection.putrequest("GET", "/v1/sandboxes")
        for value in authorization:
            connection.putheader("Authorization", value)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "SANDBOX_WORKBENCH_TOKEN"}
    return {**env, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"), **extra}


@pytest.mark.parametrize(
    ("args", "env_token", "message"),
    [
        (["--token", ""], None, "error: the token from --token is empty"),
        ([], "", "error: the token from $SANDBOX_WORKBENCH_TOKEN is empty"),
        (["--token", "short-token"], None, "is shorter than 16 characters"),
        ([], "0123456789abcde", "is shorter than 16 characters"),
        (["--token", "with a space 0123456789"], None, "visible ASCII"),
        (["--token", "tab\t0123456789abcdef"], None, "visible ASCII"),
    ],
)
def test_weak_tokens_are_refused_at_startup(
    tmp_path: Path, args: list[str], env_token: str | None, message: str
) -> None:
    extra = {} if env_token is None else {"SANDBOX_WORKBENCH_TOKEN": env_token}
    refused = subprocess.run(
        [CONSOLE_SCRIPT, "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        env=serve_env(tmp_path, **extra),
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: ")
    assert message in refused.stderr


def test_help_states_the_minimum_length(tmp_path: Path) -> None:
    shown = subprocess.run(
        [CONSOLE_SCRIPT, "serve", "--help"],
        capture_output=True,
        text=True,
        env=serve_env(tmp_path),
        timeout=60,
    )
    assert shown.returncode == 0
    assert "at least 16 visible ASCII characters" in " ".join(shown.stdout.split())


def test_a_generated_token_is_printed_and_accepted(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [CONSOLE_SCRIPT, "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=serve_env(tmp_path),
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        match = re.search(r"listening on (http://\S+) \(token: (\S+)\)", ready)
        assert match is not None, ready
        url, token = match.groups()
        assert len(token) >= 40
        assert status_for(url, [b"Bearer " + token.encode()]) == 200
        assert status_for(url, [b"Bearer " + token[:-1].encode()]) == 401
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.parametrize(
    "authorization",
    [
        [],
        [b"Bearer "],
        [b"Bearer"],
        [b"Bearer \xa0{token}"],
        [b"Bearer {token}\xa0"],
        [b"Bearer  {token}"],
        [b"bearer {token}"],
        [b"BEARER {token}"],
        [b"Bearer {TOKEN}"],
        [b"Bearer {token}x"],
        [b"Bearer {token}", b"Bearer {token}"],
        [b"Bearer nope", b"Bearer {token}"],
    ],
    ids=repr,
)
def test_anything_but_the_exact_header_is_unauthorized(
    server: ServeProcess, authorization: list[bytes]
) -> None:
    token = server.token.encode()
    values = [
        value.replace(b"{token}", token).replace(b"{TOKEN}", token.upper())
        for value in authorization
    ]
    assert status_for(server.url, values) == 401


def test_the_exact_header_is_authorized(server: ServeProcess) -> None:
    assert status_for(server.url, [b"Bearer " + server.token.encode()]) == 200


@pytest.mark.parametrize("around", [(b"", b" "), (b"", b"\t"), (b" ", b""), (b"\t", b"  ")])
def test_whitespace_around_the_value_is_not_part_of_it(
    server: ServeProcess, around: tuple[bytes, bytes]
) -> None:
    """RFC 9110, 5.5: whatever HTTP parser serves (uvicorn's h11 and httptools drop it
    differently from one release to the next)."""
    before, after = around
    assert status_for(server.url, [before + b"Bearer " + server.token.encode() + after]) == 200
