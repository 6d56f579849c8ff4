"""Fuzz a real `serve` process against docs/gateway-openapi.json with schemathesis.

Every generated request (valid and invalid by the schema, undeclared methods included)
must get an answer that is not an internal error, `serve` must log no exception, and it
must still be healthy afterwards. The document as published mostly reaches validation
(random bindings, ids and paths), so a steered copy also drives the routes' inner
workings: real bindings, a few sandboxes and file paths that meet each other, and cheap
code, with fewer examples for the operations that run engines. Bodies are also sent in
slow pieces and beyond the routes' limits, with and without the token.
"""

from __future__ import annotations

import copy
import http.client
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import strategies
from schemathesis import Case

from tests.conftest import require_engine
from tests.serve_process import ServeProcess, serve_process
from workbench.protocol.http import body_cap

OPENAPI = Path(__file__).parents[2] / "docs" / "gateway-openapi.json"
EXECUTE = r"/execute$"
BINDINGS = ["PYTHON", "JAVASCRIPT", "PERL", "RUBY"]
SANDBOX_IDS = ["fuzz-a", "fuzz-b"]
CHEAP_CODE = ["1", "1 + 1", "x = 41", "'é\\u0000' * 3", "nope(", "print(1)"]
"""Fast in every language (or a syntax error there): no loops, no imports."""
WORKSPACE_PATHS = ["a.txt", "d", "d/b.txt", "/workspace/d/", "../escape", "/etc/passwd", ""]


def steered(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of the gateway document whose valid values meet the server's real state."""
    steered_document = copy.deepcopy(document)
    for item in steered_document["paths"].values():
        operations = [item, *(value for key, value in item.items() if key != "parameters")]
        for operation in operations:
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "id":
                    parameter["schema"] = {"enum": SANDBOX_IDS}
                elif parameter["name"] == "binding":
                    parameter["schema"] = {"enum": BINDINGS}
        for operation in operations:
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            properties = (body or {}).get("schema", {}).get("properties", {})
            if "binding" in properties:
                properties["binding"] = {"enum": BINDINGS}
            if "code" in properties:
                properties["code"] = {"enum": CHEAP_CODE}
    for name in ("FilesRequest", "FilesBatchEntry"):
        files = steered_document["components"]["schemas"][name]["properties"]
        files["path"] = files["newPath"] = {"enum": WORKSPACE_PATHS}
    return steered_document


published = schemathesis.openapi.from_path(OPENAPI)
steered_schema = schemathesis.openapi.from_dict(steered(json.loads(OPENAPI.read_text())))
FUZZ_SETTINGS = hypothesis.settings(
    deadline=None,
    database=None,  # nothing written to the checkout
    suppress_health_check=list(hypothesis.HealthCheck),
)


class ServeUnderFuzz:
    """A running `serve` and everything it has written to stdout/stderr so far."""

    def __init__(self, process: ServeProcess) -> None:
        self.process = process
        self.output: list[str] = []
        # Drained continuously: a full pipe would block serve's logging.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.process.stdout is not None
        for line in self.process.process.stdout:
            self.output.append(line)

    @property
    def log(self) -> str:
        return "".join(self.output)

    def check(self, case: Case[Any]) -> None:
        """Send a generated case with the token (see `judge`)."""
        logged_before = len(self.output)
        response = case.call(
            base_url=self.process.url,
            headers={"authorization": f"Bearer {self.process.token}"},
            timeout=60,
        )
        content_type = response.headers.get("content-type", [""])[0]
        self.judge(
            case.as_curl_command(), logged_before, response.status_code, content_type, response.text
        )

    def check_raw(self, method: str, path: str, body: bytes) -> None:
        """Send these exact body bytes as JSON with the token (see `judge`)."""
        logged_before = len(self.output)
        headers = {
            "authorization": f"Bearer {self.process.token}",
            "content-type": "application/json",
        }
        response = httpx.request(
            method, self.process.url + path, content=body, headers=headers, timeout=60
        )
        self.judge(
            f"{method} {path} {body[:200]!r}",
            logged_before,
            response.status_code,
            response.headers.get("content-type", ""),
            response.text,
        )

    def judge(
        self, request: str, logged_before: int, status: int, content_type: str, text: str
    ) -> None:
        """Fail on an internal error, or when serve logged an exception since `logged_before`."""
        reproducer = f"{request}\n-> {status} {text}"
        if status >= 500:
            assert content_type.startswith("application/json"), reproducer
            assert json.loads(text)["code"] != "INTERNAL_ERROR", reproducer
        # uvicorn logs an app's exception before it answers 500, so it is (almost always)
        # read by now; the health test checks the whole log again.
        logged = "".join(self.output[logged_before:])
        assert "Traceback" not in logged, f"{reproducer}\n{logged}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeUnderFuzz]:
    for binding in BINDINGS:
        require_engine(binding.lower())
    with serve_process(tmp_path_factory.mktemp("fuzz")) as process:
        yield ServeUnderFuzz(process)


@published.exclude(path_regex=EXECUTE).parametrize()
@hypothesis.settings(FUZZ_SETTINGS, max_examples=20)
def test_published_schema(case: Case[Any], served: ServeUnderFuzz) -> None:
    served.check(case)


@steered_schema.exclude(path_regex=EXECUTE).parametrize()
@hypothesis.settings(FUZZ_SETTINGS, max_examples=15)
def test_steered_schema(case: Case[Any], served: ServeUnderFuzz) -> None:
    served.check(case)


@steered_schema.include(path_regex=EXECUTE).parametrize()
@hypothesis.settings(FUZZ_SETTINGS, max_examples=5)
def test_steered_executions(case: Case[Any], served: ServeUnderFuzz) -> None:
    served.check(case)


def test_serve_is_healthy_after_the_fuzz(served: ServeUnderFuzz) -> None:
    """After the fuzz tests above (pytest keeps file order): serve answers, its log is clean."""
    health = httpx.get(f"{served.process.url}/v1/health", timeout=30)
    assert health.status_code == 200
    assert health.json()["ok"] is True
    assert served.process.process.poll() is None
    assert "Traceback" not in served.log
    assert "ERROR" not in served.log, served.log


@pytest.fixture(scope="module")
def edge_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeUnderFuzz]:
    """A serve of its own: the known failures below must not dirty the fuzz's log."""
    require_engine("python")
    with serve_process(tmp_path_factory.mktemp("edge")) as process:
        yield ServeUnderFuzz(process)


def surrogate_bug(why: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"lone surrogate: {why}")


ENCODE_REPLY = (
    "the answer echoes the string and workbench/api/transport.py Response.json cannot "
    "UTF-8-encode it (uvicorn's plain-text 500 and a logged traceback)"
)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/v1/sandboxes/edge/execute", b"[" * 50_000, id="deep-array"),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/files",
            b'{"op": "read", "path": ' + b"[" * 100_000,
            id="deep-object-member",
        ),
        pytest.param(
            "POST",
            "/v1/runtimes/PYTHON/execute",
            rb'{"code": "\ud800"}',
            id="surrogate-stateless-code",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/execute",
            rb'{"code": "\ud800", "binding": "PYTHON"}',
            id="surrogate-context-code",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/execute",
            rb'{"code": "1", "contextId": "\ud800"}',
            id="surrogate-context-id",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/contexts",
            rb'{"binding": "\ud800"}',
            id="surrogate-binding",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/env",
            rb'{"envVars": {"\ud800": "x"}}',
            id="surrogate-env-key",
        ),
    ],
)
def test_edge_requests(edge_served: ServeUnderFuzz, method: str, path: str, body: bytes) -> None:
    """Inputs schemathesis does not generate (it never sends lone surrogates, and keeps
    nesting shallow) answer a 4xx, not an internal error, and serve stays healthy."""
    edge_served.check_raw(method, path, body)
    assert httpx.get(f"{edge_served.process.url}/v1/health", timeout=30).status_code == 200


SLOW_ROUTES = [
    "/v1/health",
    "/v1/sandboxes/edge/files",
    "/v1/sandboxes/edge/files/batch",
    "/v1/sandboxes/edge/execute",
    "/v1/runtimes/PYTHON/execute",
]
SLOW_BODIES = strategies.one_of(
    strategies.binary(max_size=512),
    strategies.sampled_from(
        [
            b'{"op": "write", "path": "slow.txt", "content": "' + b"x" * 400 + b'"}',
            b'{"op": "read", "path": "slow.txt"}',
            b'{"entries": [{"op": "read", "path": "slow.txt"}]}',
            b'{"code": "1 + 1", "binding": "PYTHON"}',
        ]
    ),
)
PADDING = 256 * 1024
"""The pieces that take a chunked body past its limit (sent without pauses)."""
EARLY_SECONDS = 5.0
"""How soon an answer that must not wait for the body comes (the machine may be busy)."""


def expected_status(path: str, token: bool, chunked: bool, oversized: bool) -> int | None:
    """What `serve` answers such a request; None: whatever its route says."""
    if not token and path != "/v1/health":
        return 401
    if oversized and (token or not chunked):  # health without the token reads no body
        return 413
    return None


@hypothesis.settings(FUZZ_SETTINGS, max_examples=40)
@hypothesis.given(
    path=strategies.sampled_from(SLOW_ROUTES),
    token=strategies.booleans(),
    body=SLOW_BODIES,
    chunked=strategies.booleans(),
    oversized=strategies.booleans(),
    cuts=strategies.lists(strategies.integers(1, 128), max_size=4),
    pause=strategies.floats(0, 0.05),
)
def test_slow_and_oversized_bodies(
    edge_served: ServeUnderFuzz,
    path: str,
    token: bool,
    body: bytes,
    chunked: bool,
    oversized: bool,
    cuts: list[int],
    pause: float,
) -> None:
    """A body sent in pieces with pauses, or beyond the route's limit: a client without
    the token is answered 401 before its body is sent (and its connection closed), a
    declared length beyond the limit 413 before the body; a body a little past the limit
    is dropped so the 413 can be read; a slow body within the limits is answered as its
    route says, without an internal error or a logged exception."""
    cap = body_cap(path)
    bounds = [0, *itertools.accumulate(cuts), len(body)]
    pieces = [body[start:end] for start, end in itertools.pairwise(bounds) if body[start:end]]
    if oversized and chunked:
        pieces += [b"x" * PADDING] * (cap // PADDING + 1)
    lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "content-type: application/json"]
    if chunked:
        lines.append("transfer-encoding: chunked")
        pieces = [b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces] + [b"0\r\n\r\n"]
    else:
        lines.append(f"content-length: {cap + 1 if oversized else len(body)}")
    if token:
        lines.append(f"authorization: Bearer {edge_served.process.token}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    expected = expected_status(path, token, chunked, oversized)
    early = expected == 401 or (expected == 413 and not chunked)
    logged_before = len(edge_served.output)
    address = urlsplit(edge_served.process.url)
    with socket.create_connection((address.hostname, address.port), timeout=60) as connection:
        connection.sendall(head + (pieces[0] if early and pieces else b""))
        for piece in [] if early else pieces:
            try:
                connection.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break  # refused past the limit: read the answer
            time.sleep(pause if len(piece) < PADDING else 0)
        connection.settimeout(EARLY_SECONDS if early else 60)
        response = http.client.HTTPResponse(connection)
        response.begin()
        text = response.read().decode(errors="replace")
        closes = response.getheader("connection") == "close"
    request = f"POST {path} token={token} chunked={chunked} oversized={oversized} {body[:100]!r}"
    if expected is not None:
        assert response.status == expected, f"{request}\n-> {response.status} {text}"
    if not token or (expected == 413 and early):  # answered with the body unread
        assert closes, request
    edge_served.judge(
        request, logged_before, response.status, response.getheader("content-type", ""), text
    )
