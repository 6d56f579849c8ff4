"""The gateway protocol as `serve` speaks it, checked with raw HTTP requests."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serve_process import ServeProcess, serve_process
from workbench.backends.remote import open_remote_backend, rootless_tls_context
from workbench.protocol.types import BatchEntry


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(tmp_path_factory.mktemp("serve")) as process:
        yield process


@pytest.fixture
def http(server: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.url,
        headers={"authorization": f"Bearer {server.token}"},
        verify=rootless_tls_context(),  # plain http: no roots to parse for each test
    ) as client:
        yield client


def assert_error(response: httpx.Response, status: int, code: str, message: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["code"] == code
    assert body["message"] == message
    assert body["httpStatus"] == status
    assert isinstance(body["timestamp"], str)
    assert isinstance(body["context"], dict)


def test_health_needs_no_token(server: ServeProcess) -> None:
    response = httpx.get(f"{server.url}/v1/health")
    assert response.status_code == 200
    assert response.json()["ok"] is True
    assert response.json()["protocol"] == 1


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer nope"}, {"authorization": "Basic abc"}, {"authorization": ""}],
)
def test_every_other_route_needs_the_token(server: ServeProcess, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=server.url, verify=rootless_tls_context()) as client:
        for method, path in [
            ("GET", "/v1/runtimes"),
            ("GET", "/v1/sandboxes"),
            ("GET", "/v1/sandboxes/demo"),
            ("POST", "/v1/sandboxes/demo/execute"),
            ("GET", "/v1/nowhere"),
        ]:
            response = client.request(method, path, headers=headers)
            assert_error(response, 401, "UNAUTHORIZED", "Missing or invalid bearer token")


def test_runtimes_lists_the_local_bindings(http: httpx.Client) -> None:
    runtimes = http.get("/v1/runtimes").json()["runtimes"]
    assert {runtime["binding"] for runtime in runtimes} == {"JAVASCRIPT", "PYTHON", "PERL", "RUBY"}
    for runtime in runtimes:
        assert set(runtime) == {"binding", "language", "engine", "contexts", "protocol"}
        assert runtime["language"] == runtime["binding"].lower()


def test_unknown_route_and_wrong_method(http: httpx.Client) -> None:
    assert_error(http.get("/v1/nowhere"), 404, "VALIDATION_FAILED", "Not found")
    assert_error(http.get("/v1/sandboxes/demo/nowhere"), 404, "VALIDATION_FAILED", "Not found")
    assert_error(http.post("/v1/sandboxes"), 405, "VALIDATION_FAILED", "Method not allowed")
    assert_error(http.delete("/v1/runtimes"), 405, "VALIDATION_FAILED", "Method not allowed")


WRONG_METHODS = [
    ("POST", "/v1/health", "GET"),
    ("DELETE", "/v1/runtimes", "GET"),
    ("GET", "/v1/runtimes/PYTHON/execute", "POST"),
    ("PUT", "/v1/sandboxes", "GET"),
    ("PUT", "/v1/sandboxes/demo", "GET, POST, DELETE"),
    ("PATCH", "/v1/sandboxes/demo/execute", "GET, POST, DELETE"),
    ("OPTIONS", "/v1/sandboxes/demo/files", "GET, POST, DELETE"),
]
"""A method a route does not take, and the `Allow` its 405 gives (spec 2.7: what the
gateway passes on to a sandbox is GET, POST and DELETE)."""


@pytest.mark.parametrize(("method", "path", "allowed"), WRONG_METHODS)
def test_a_405_names_the_methods_its_route_takes(
    http: httpx.Client, method: str, path: str, allowed: str
) -> None:
    response = http.request(method, path)
    assert_error(response, 405, "VALIDATION_FAILED", "Method not allowed")
    assert response.headers["allow"] == allowed


def test_a_405_names_the_methods_also_in_front_of_a_daemon(tmp_path: Path) -> None:
    """A second `serve` of the data dir passes requests on to the first (its daemon)."""
    with serve_process(tmp_path) as daemon, serve_process(tmp_path) as front:
        assert daemon.url != front.url
        headers = {"authorization": f"Bearer {front.token}"}
        with httpx.Client(base_url=front.url, headers=headers) as client:
            for method, path, allowed in WRONG_METHODS:
                response = client.request(method, path)
                assert_error(response, 405, "VALIDATION_FAILED", "Method not allowed")
                assert response.headers["allow"] == allowed, (method, path)


def test_invalid_sandbox_id(http: httpx.Client) -> None:
    assert_error(
        http.get("/v1/sandboxes/-bad"),
        400,
        "VALIDATION_FAILED",
        'Invalid sandbox id "-bad": cannot start or end with a hyphen',
    )
    assert_error(
        http.get("/v1/sandboxes/admin"),
        400,
        "VALIDATION_FAILED",
        "Invalid sandbox id \"admin\": 'admin' is a reserved name",
    )


def test_malformed_json_and_non_objects(http: httpx.Client) -> None:
    headers = {"content-type": "application/json"}
    assert_error(
        http.post("/v1/sandboxes/demo/contexts", content=b"{nope", headers=headers),
        400,
        "VALIDATION_FAILED",
        "Invalid JSON",
    )
    assert_error(
        http.post("/v1/sandboxes/demo/env", content=b"[1, 2]", headers=headers),
        400,
        "VALIDATION_FAILED",
        "Expected an object",
    )


def test_stateless_execute_validation_order(http: httpx.Client) -> None:
    assert_error(
        http.post(
            "/v1/runtimes/PERL/execute",
            content=b'{"code": "1"}',
            headers={"content-type": "text/plain"},
        ),
        415,
        "VALIDATION_FAILED",
        "Content-Type must be application/json",
    )
    assert_error(
        http.post(
            "/v1/runtimes/PERL/execute", content=b"", headers={"content-type": "application/json"}
        ),
        400,
        "VALIDATION_FAILED",
        "JSON body required",
    )
    assert_error(
        http.post("/v1/runtimes/PERL/execute", json={"code": "1", "input": 1}),
        400,
        "VALIDATION_FAILED",
        "input is no longer supported; pass data with envVars",
    )
    assert_error(
        http.post("/v1/runtimes/PERL/execute", json={"code": "1", "language": "ruby"}),
        400,
        "VALIDATION_FAILED",
        "Unsupported language 'ruby' on this runtime (perl)",
    )
    assert_error(  # `ts` is TypeScript, which runs on JavaScript's runtime only
        http.post("/v1/runtimes/PERL/execute", json={"code": "1", "language": "ts"}),
        400,
        "VALIDATION_FAILED",
        "Unsupported language 'ts' on this runtime (perl)",
    )
    for name in ("perl", "PERL"):
        accepted = http.post("/v1/runtimes/PERL/execute", json={"code": "1", "language": name})
        assert accepted.status_code == 200, accepted.text
    assert_error(
        http.post("/v1/runtimes/PERL/execute", json={"code": " \n"}),
        400,
        "VALIDATION_FAILED",
        "Non-empty code is required",
    )
    assert_error(
        http.post("/v1/runtimes/NOPE/execute", json={"code": "1"}),
        400,
        "VALIDATION_FAILED",
        "Unknown binding 'NOPE'",
    )


def test_oversized_bodies(http: httpx.Client) -> None:
    big = "x" * 100_000
    assert_error(
        http.post("/v1/runtimes/PERL/execute", json={"code": big}),
        413,
        "VALIDATION_FAILED",
        "Request too large",
    )
    assert_error(
        http.post("/v1/sandboxes/demo/execute", json={"code": big, "binding": "PERL"}),
        413,
        "VALIDATION_FAILED",
        "Request too large",
    )
    huge = {"op": "write", "path": "a", "content": "y" * (2 * 1024 * 1024 + 10)}
    assert_error(
        http.post("/v1/sandboxes/demo/files", json=huge),
        413,
        "VALIDATION_FAILED",
        "Request too large",
    )


def test_code_over_64_kib(http: httpx.Client) -> None:
    code = "#" * 65_537
    assert_error(
        http.post("/v1/runtimes/PERL/execute", json={"code": code}),
        413,
        "VALIDATION_FAILED",
        "Code exceeds 64 KiB",
    )


def test_sandbox_routes_round_trip(http: httpx.Client) -> None:
    created = http.post("/v1/sandboxes/proto-rt/contexts", json={"binding": "PERL"})
    assert created.status_code == 201
    context = created.json()
    assert set(context) == {"id", "binding", "language", "cwd", "createdAt", "lastUsed"}
    listed = http.get("/v1/sandboxes").json()["sandboxes"]
    assert "proto-rt" in [entry["id"] for entry in listed]
    missing = http.delete("/v1/sandboxes/proto-rt/contexts/nope")
    assert_error(missing, 404, "CONTEXT_NOT_FOUND", "Code context 'nope' not found")
    assert missing.json()["context"] == {"contextId": "nope"}
    assert http.delete("/v1/sandboxes/proto-rt").json() == {"success": True}
    listed = http.get("/v1/sandboxes").json()["sandboxes"]
    assert "proto-rt" not in [entry["id"] for entry in listed]


def test_openapi_document_lists_every_route() -> None:
    import json

    document = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "gateway-openapi.json").read_text()
    )
    assert document["info"]["version"] == "1"
    paths = set(document["paths"])
    assert {
        "/v1/health",
        "/v1/runtimes",
        "/v1/runtimes/{binding}/execute",
        "/v1/sandboxes",
        "/v1/sandboxes/{id}",
        "/v1/sandboxes/{id}/execute",
        "/v1/sandboxes/{id}/contexts",
        "/v1/sandboxes/{id}/contexts/{contextId}",
        "/v1/sandboxes/{id}/env",
        "/v1/sandboxes/{id}/files",
        "/v1/sandboxes/{id}/files/batch",
        "/v1/sandboxes/{id}/cancel",
        "/v1/sandboxes/{id}/contexts/{contextId}/history",
    } == paths
    markdown = (Path(__file__).resolve().parents[2] / "docs" / "gateway-protocol.md").read_text()
    for path in paths:
        assert path.replace("{", ":").replace("}", "") in markdown, path


# ----- files/batch: bodies up to 8 MiB, gzip accepted and bounded -----------------------


def test_files_batch_bodies_are_capped_at_8_mib_also_after_gzip(http: httpx.Client) -> None:
    path = "/v1/sandboxes/proto-batch/files/batch"
    entry = {"op": "write", "path": "big.txt", "content": "x" * 1_000_000}
    eight = json.dumps({"entries": [entry] * 8}).encode()  # 8.0 MB: over /files' 2 MiB
    nine = json.dumps({"entries": [entry] * 9}).encode()  # 9.0 MB: over 8 MiB
    answer = http.post(path, content=eight, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert [result["ok"] for result in answer.json()["results"]] == [True] * 8
    assert_error(http.post(path, content=nine), 413, "VALIDATION_FAILED", "Request too large")
    single = json.dumps({"op": "write", "path": "a.txt", "content": "x" * 3_000_000})
    assert_error(
        http.post("/v1/sandboxes/proto-batch/files", content=single.encode()),
        413,
        "VALIDATION_FAILED",
        "Request too large",
    )
    gzipped = {"content-encoding": "gzip"}
    answer = http.post(path, content=gzip.compress(eight), headers=gzipped)
    assert answer.status_code == 200, answer.text
    bomb = gzip.compress(nine)  # 9 KB on the wire
    assert_error(
        http.post(path, content=bomb, headers=gzipped),
        413,
        "VALIDATION_FAILED",
        "Request too large",
    )
    assert_error(
        http.post(path, content=eight[:50], headers=gzipped),
        400,
        "VALIDATION_FAILED",
        "Invalid gzip body",
    )
    assert_error(
        http.post(path, content=eight, headers={"content-encoding": "deflate"}),
        415,
        "VALIDATION_FAILED",
        "Content-Encoding must be gzip or identity",
    )


class Recorder(httpx.AsyncBaseTransport):
    """Records the headers and sizes of the requests the remote backend sends."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[str, str | None, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        self.sent.append((request.url.path, request.headers.get("content-encoding"), len(body)))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_remote_backend_gzips_large_text_batches_only(server: ServeProcess) -> None:
    recorder = Recorder()
    backend = open_remote_backend("served", server.url, server.token, transport=recorder)
    sandbox = backend.sandbox("proto-gzip")
    try:
        text = [BatchEntry.write(f"t{n}.txt", f"line {n}\n" * 2000) for n in range(20)]
        noise = [BatchEntry.write(f"r{n}.bin", os.urandom(20_000)) for n in range(4)]
        small = [BatchEntry.write("small.txt", "hello")]
        for entries in (text, noise, small):
            result = await sandbox.files_batch(entries)
            assert all(entry.ok for entry in result.results)
        sent = [
            (encoding, size) for path, encoding, size in recorder.sent if path.endswith("/batch")
        ]
        assert [encoding for encoding, _ in sent] == ["gzip", None, None]
        assert sent[0][1] * 20 < sum(len(entry.content or "") for entry in text)
        assert (await sandbox.read_file("t3.txt")).content == "line 3\n" * 2000
    finally:
        await sandbox.destroy()
        await backend.aclose()
