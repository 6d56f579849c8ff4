"""The gateway Worker's own behaviour, in workerd (`wrangler dev`, local mode).

The Workers run as `gateway init` renders them (routing, auth, registry Durable Object,
error mapping, the runtime Workers' entry points, the version check); only the unpublished
packages are the stand-ins of tests/workerd/standins/, which keep their state in a
`sandbox-workbench serve` process.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import require_engine
from tests.workerd.harness import TEMPLATE, TEMPLATES, WorkerdGateway
from workbench import __version__
from workbench.deploy.versions import load_versions

SMALL_BODY_CAP = 98_304
FILES_BODY_CAP = 2 * 1024 * 1024


def fresh_id() -> str:
    return f"wd-{uuid.uuid4().hex[:16]}"


def assert_error(response: httpx.Response, status: int, code: str, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"code", "message", "context", "httpStatus", "timestamp"}
    assert body["code"] == code
    assert body["message"] == message
    assert body["context"] == {}
    assert body["httpStatus"] == status
    datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00"))


def listed_ids(client: httpx.Client) -> list[str]:
    response = client.get("/v1/sandboxes")
    assert response.status_code == 200, response.text
    return [entry["id"] for entry in response.json()["sandboxes"]]


# ----- health and authentication ------------------------------------------------------


def test_health_needs_no_token_and_reports_every_version(anonymous: httpx.Client) -> None:
    response = anonymous.get("/v1/health")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    health = response.json()
    manifest = json.loads((TEMPLATE / "package.json").read_text())
    # The gateway's own version is its package.json version; the core's, the pin there.
    assert {key: health[key] for key in ("ok", "version", "protocol")} == {
        "ok": True,
        "version": manifest["version"],
        "protocol": 1,
    }
    assert manifest["version"] == __version__
    assert health["core"] == {
        "name": "@sandbox-workers/core",
        "version": manifest["peerDependencies"]["@sandbox-workers/core"],
        "interpreterProtocol": 1,
    }
    # Each binding as its runtime Worker answers GET /interpreter.
    assert [(entry["binding"], entry["protocol"]) for entry in health["runtimes"]] == [
        ("JAVASCRIPT", 1),
        ("PYTHON", 1),
        ("PERL", 1),
        ("RUBY", 1),
    ]
    assert "unavailable" not in health


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/runtimes"),
        ("POST", "/v1/runtimes/PYTHON/execute"),
        ("GET", "/v1/sandboxes"),
        ("GET", "/v1/sandboxes/some-box"),
        ("DELETE", "/v1/sandboxes/some-box"),
        ("POST", "/v1/sandboxes/some-box/execute"),
        ("GET", "/v1/no-such-route"),
    ],
)
def test_every_other_route_needs_the_token(anonymous: httpx.Client, method: str, path: str) -> None:
    response = anonymous.request(method, path, json={"code": "1"} if method == "POST" else None)
    assert_error(response, 401, "UNAUTHORIZED", "Missing or invalid bearer token")
    assert response.headers["www-authenticate"] == "Bearer"


def _wrong_tokens(token: str) -> list[str]:
    return [
        token[:-1],  # a strict prefix
        token[:1],  # a one-character prefix
        token + "x",  # the token plus a suffix
        token + token,  # twice as long
        token[:-1] + ("y" if token[-1] != "y" else "z"),  # same length, last character off
        ("y" if token[0] != "y" else "z") + token[1:],  # same length, first character off
        token.upper(),
        "x" * 4096,  # much longer
    ]


def test_wrong_tokens_of_any_length_are_refused(
    gateway: WorkerdGateway, anonymous: httpx.Client
) -> None:
    headers = [f"Bearer {wrong}" for wrong in _wrong_tokens(gateway.token)] + [
        "Bearer",
        gateway.token,  # no scheme
        f"Basic {gateway.token}",
        f"Bearer {gateway.token} extra",
        f"Bearer{gateway.token}",
    ]
    for header in headers:
        response = anonymous.get("/v1/sandboxes", headers={"authorization": header})
        assert_error(response, 401, "UNAUTHORIZED", "Missing or invalid bearer token")


def test_the_right_token_is_accepted(gateway: WorkerdGateway, anonymous: httpx.Client) -> None:
    for header in (
        f"Bearer {gateway.token}",
        f"Bearer  {gateway.token}",
        f"bearer {gateway.token}",
    ):
        response = anonymous.get("/v1/sandboxes", headers={"authorization": header})
        assert response.status_code == 200, (header, response.text)


def test_tokens_are_compared_in_constant_time() -> None:
    """Timing cannot be measured reliably here, so check the code path: both the presented
    and the expected token are hashed to fixed-length SHA-256 digests, the digests are
    compared with an OR-accumulated XOR over every byte (no early exit), and the check runs
    before (not instead of) the emptiness checks, so a missing header takes the same path.
    The behaviour for tokens of every length and prefix is covered above."""
    source = (TEMPLATE / "src" / "index.ts").read_text()
    equal = re.search(r"async function tokensEqual\(.*?\n}\n", source, re.S)
    assert equal is not None
    body = equal.group(0)
    assert "sha256(presented), sha256(expected)" in body
    assert re.search(r"for \(let i = 0; i < a\.length; i\+\+\) difference \|=", body)
    assert "return difference === 0;" in body
    assert "return false" not in body and "break" not in body
    authenticate = re.search(r"async function authenticate\(.*?\n}\n", source, re.S)
    assert authenticate is not None
    code = authenticate.group(0)
    assert code.index("await tokensEqual(presented, expected)") < code.index('presented === ""')
    assert "presented === expected" not in source and "presented == expected" not in source


# ----- runtimes -----------------------------------------------------------------------


def test_runtimes_come_from_the_bound_runtime_workers(client: httpx.Client) -> None:
    response = client.get("/v1/runtimes")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert "unavailable" not in body
    assert [entry["binding"] for entry in body["runtimes"]] == [
        "JAVASCRIPT",
        "PYTHON",
        "PERL",
        "RUBY",
    ]
    for entry in body["runtimes"]:
        assert set(entry) == {"binding", "language", "engine", "contexts", "protocol"}
        assert entry["language"] == entry["binding"].lower()
        assert entry["protocol"] == 1
        # The Ruby runtime is rendered stateless, as the real one is (spec 1.4).
        assert entry["contexts"] is (entry["language"] != "ruby")
    pinned = load_versions(TEMPLATES)
    assert body["core"] == {
        "name": "@sandbox-workers/core",
        "version": pinned.core,
        "interpreterProtocol": pinned.interpreter_protocol,
    }


def test_stateless_execution_is_relayed(client: httpx.Client) -> None:
    require_engine("python")
    response = client.post("/v1/runtimes/PYTHON/execute", json={"code": "print(6 * 7)"})
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    assert response.json()["logs"]["stdout"] == ["42"]


def test_unknown_binding(client: httpx.Client) -> None:
    response = client.post("/v1/runtimes/NOPE/execute", json={"code": "1"})
    assert_error(response, 400, "VALIDATION_FAILED", "Unknown binding 'NOPE'")
    # A percent-encoded binding name is decoded before it is looked up and reported.
    response = client.post("/v1/runtimes/NO%20PE/execute", json={"code": "1"})
    assert_error(response, 400, "VALIDATION_FAILED", "Unknown binding 'NO PE'")


def test_stateless_execution_validation(client: httpx.Client) -> None:
    response = client.post(
        "/v1/runtimes/PYTHON/execute", content=b"code", headers={"content-type": "text/plain"}
    )
    assert_error(response, 415, "VALIDATION_FAILED", "Content-Type must be application/json")
    response = client.post(
        "/v1/runtimes/PYTHON/execute", headers={"content-type": "application/json"}
    )
    assert_error(response, 400, "VALIDATION_FAILED", "JSON body required")


# ----- methods and unknown routes -----------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/v1/health", "GET"),
        ("POST", "/v1/runtimes", "GET"),
        ("GET", "/v1/runtimes/PYTHON/execute", "POST"),
        ("PUT", "/v1/runtimes/NOPE/execute", "POST"),
        ("DELETE", "/v1/sandboxes", "GET"),
        ("PUT", "/v1/sandboxes/some-box", "GET, DELETE"),
        ("GET", "/v1/sandboxes/some-box/execute", "POST"),
        ("PUT", "/v1/sandboxes/some-box/contexts", "GET, POST"),
        ("GET", "/v1/sandboxes/some-box/contexts/some-context", "DELETE"),
        ("GET", "/v1/sandboxes/some-box/env", "POST"),
        ("GET", "/v1/sandboxes/some-box/files", "POST"),
    ],
)
def test_wrong_methods_answer_405(
    client: httpx.Client, method: str, path: str, allowed: str
) -> None:
    response = client.request(method, path)
    assert_error(response, 405, "VALIDATION_FAILED", "Method not allowed")
    assert response.headers["allow"] == allowed


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/v2/health"),
        ("GET", "/v1/sandboxes/some-box/nope"),
        ("POST", "/v1/sandboxes/some-box/cancel"),
        ("GET", "/v1/sandboxes/some-box/contexts/some-context/history"),
    ],
)
def test_unknown_routes_and_local_only_extensions_answer_404(
    client: httpx.Client, method: str, path: str
) -> None:
    assert_error(client.request(method, path), 404, "VALIDATION_FAILED", "Not found")


def test_invalid_sandbox_ids_are_refused_before_the_sandbox(client: httpx.Client) -> None:
    response = client.get("/v1/sandboxes/-leading")
    assert_error(
        response,
        400,
        "VALIDATION_FAILED",
        'Invalid sandbox id "-leading": cannot start or end with a hyphen',
    )
    response = client.get("/v1/sandboxes/Admin")
    assert_error(
        response,
        400,
        "VALIDATION_FAILED",
        "Invalid sandbox id \"Admin\": 'Admin' is a reserved name",
    )
    response = client.get("/v1/sandboxes/a%2Fb")
    assert_error(
        response,
        400,
        "VALIDATION_FAILED",
        'Invalid sandbox id "a/b": must match /^[A-Za-z0-9._-]{1,63}$/',
    )


# ----- registry -----------------------------------------------------------------------


def test_registry_lists_created_sandboxes_and_forgets_destroyed_ones(
    client: httpx.Client,
) -> None:
    require_engine("python")
    first, second = fresh_id(), fresh_id()
    assert first not in listed_ids(client)

    info = client.get(f"/v1/sandboxes/{first}")
    assert info.status_code == 200, info.text
    ran = client.post(
        f"/v1/sandboxes/{second}/execute", json={"code": "x = 1", "binding": "PYTHON"}
    )
    assert ran.status_code == 200, ran.text

    response = client.get("/v1/sandboxes")
    assert response.headers["cache-control"] == "no-store"
    entries = {entry["id"]: entry for entry in response.json()["sandboxes"]}
    assert {first, second} <= set(entries)
    entry = entries[first]
    assert set(entry) == {"id", "createdAt", "lastUsed", "expiresAt"}
    assert entry["createdAt"] == info.json()["createdAt"]
    assert entry["expiresAt"] == info.json()["expiresAt"]
    assert entries[second]["expiresAt"] == ran.json()["context"]["expiresAt"]
    before = entries[first]["lastUsed"]

    # A later success moves lastUsed; createdAt stays.
    assert (
        client.post(f"/v1/sandboxes/{first}/env", json={"envVars": {"A": "1"}}).status_code == 200
    )
    entry = {e["id"]: e for e in client.get("/v1/sandboxes").json()["sandboxes"]}[first]
    assert entry["lastUsed"] >= before
    assert entry["createdAt"] == info.json()["createdAt"]

    # A failed request does not create an entry.
    failed_id = fresh_id()
    failed = client.post(f"/v1/sandboxes/{failed_id}/env", json={"envVars": "not an object"})
    assert failed.status_code == 400, failed.text
    assert failed_id not in listed_ids(client)

    destroyed = client.delete(f"/v1/sandboxes/{first}")
    assert destroyed.status_code == 200
    assert destroyed.json() == {"success": True}
    ids = listed_ids(client)
    assert first not in ids
    assert second in ids
    assert client.delete(f"/v1/sandboxes/{second}").status_code == 200
    assert second not in listed_ids(client)


# ----- body caps ----------------------------------------------------------------------


def _execute_body(size: int) -> bytes:
    """A JSON execute body of exactly `size` bytes (trailing whitespace as padding: the
    code itself is capped at 64 KiB by the Sandbox)."""
    body = json.dumps({"code": "pass", "binding": "PYTHON"}).encode()
    return body + b" " * (size - len(body))


def _chunks(body: bytes, size: int = 16_384) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_execute_bodies_over_96_kib_are_refused(client: httpx.Client) -> None:
    require_engine("python")
    sandbox_id = fresh_id()
    headers = {"content-type": "application/json"}
    path = f"/v1/sandboxes/{sandbox_id}/execute"
    try:
        # Declared content-length over the cap.
        response = client.post(path, content=_execute_body(SMALL_BODY_CAP + 1), headers=headers)
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        # Streamed (chunked, no content-length) over the cap.
        response = client.post(
            path, content=_chunks(_execute_body(SMALL_BODY_CAP + 1)), headers=headers
        )
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        response = client.post(
            "/v1/runtimes/PYTHON/execute",
            content=_execute_body(SMALL_BODY_CAP + 1),
            headers=headers,
        )
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        # Exactly at the cap is accepted (and the gateway still answers after the 413s).
        response = client.post(path, content=_execute_body(SMALL_BODY_CAP), headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["logs"] == {"stdout": [], "stderr": []}
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")


def test_file_bodies_over_2_mib_are_refused(client: httpx.Client) -> None:
    sandbox_id = fresh_id()
    path = f"/v1/sandboxes/{sandbox_id}/files"
    content = "x" * FILES_BODY_CAP
    body: dict[str, Any] = {"op": "write", "path": "/workspace/big.txt", "content": content}
    try:
        response = client.post(path, json=body)
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        response = client.post(
            path,
            content=_chunks(json.dumps(body).encode()),
            headers={"content-type": "application/json"},
        )
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        # A 1 MiB file passes the gateway (over the 96 KiB cap of the other routes).
        body["content"] = "x" * (1024 * 1024)
        response = client.post(path, json=body)
        assert response.status_code == 200, response.text
        read = client.post(path, json={"op": "read", "path": "/workspace/big.txt"})
        assert read.status_code == 200, read.text
        assert read.json()["content"] == body["content"]
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")


def test_contexts_and_env_share_the_small_cap(client: httpx.Client) -> None:
    sandbox_id = fresh_id()
    big = {"envVars": {"A": "x" * SMALL_BODY_CAP}}
    try:
        response = client.post(f"/v1/sandboxes/{sandbox_id}/env", json=big)
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        response = client.post(
            f"/v1/sandboxes/{sandbox_id}/contexts", json={"binding": "PYTHON", **big}
        )
        assert_error(response, 413, "VALIDATION_FAILED", "Request too large")
        assert sandbox_id not in listed_ids(client)
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")
