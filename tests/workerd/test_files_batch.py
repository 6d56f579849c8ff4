"""`POST /v1/sandboxes/:id/files/batch` as the gateway Worker answers it in workerd: the
Worker's own part (advertising, body caps, gzip, methods). What each entry answers is
the behavioural suite's (tests/api/test_files_batch.py runs on this gateway too)."""

from __future__ import annotations

import gzip
import json

import httpx

from tests.workerd.test_gateway import assert_error, fresh_id

BATCH_CAP = 8 * 1024 * 1024


def test_health_advertises_the_batch_with_the_workers_limits(anonymous: httpx.Client) -> None:
    health = anonymous.get("/v1/health").json()
    assert health["features"] == ["files-batch"]  # the other only to a request that asks
    asked = anonymous.get("/v1/health", headers={"x-sandbox-must-exist": "1"}).json()
    assert asked["features"] == ["files-batch", "sandbox-must-exist"]
    assert health["filesBatch"] == {"maxEntries": 400, "maxBytes": BATCH_CAP}


def test_batch_bodies_gzip_and_caps(client: httpx.Client) -> None:
    sandbox_id = fresh_id()
    path = f"/v1/sandboxes/{sandbox_id}/files/batch"
    try:
        entries = [
            {"op": "write", "path": f"f{n}.txt", "content": "text " * 4000} for n in range(5)
        ]
        plain = json.dumps({"entries": entries}).encode()
        gzipped = {"content-encoding": "gzip", "content-type": "application/json"}
        answer = client.post(path, content=gzip.compress(plain), headers=gzipped)
        assert answer.status_code == 200, answer.text
        assert [result["ok"] for result in answer.json()["results"]] == [True] * 5
        listed = client.post(
            f"/v1/sandboxes/{sandbox_id}/files", json={"op": "read", "path": "f4.txt"}
        )
        assert listed.json()["content"] == "text " * 4000

        bomb = gzip.compress(b'{"entries": [' + b" " * (BATCH_CAP + 1) + b"]}")
        assert_error(
            client.post(path, content=bomb, headers=gzipped),
            413,
            "VALIDATION_FAILED",
            "Request too large",
        )
        assert_error(
            client.post(path, content=plain[:64], headers=gzipped),
            400,
            "VALIDATION_FAILED",
            "Invalid gzip body",
        )
        assert_error(
            client.post(path, content=plain, headers={"content-encoding": "br"}),
            415,
            "VALIDATION_FAILED",
            "Content-Encoding must be gzip or identity",
        )
        over = b'{"entries": [], "pad": "' + b"x" * BATCH_CAP + b'"}'
        assert_error(client.post(path, content=over), 413, "VALIDATION_FAILED", "Request too large")
        for body, message in ((b"{", "Invalid JSON"), (b"[]", "Expected an object")):
            assert_error(client.post(path, content=body), 400, "VALIDATION_FAILED", message)
        wrong = client.get(path)
        assert_error(wrong, 405, "VALIDATION_FAILED", "Method not allowed")
        assert wrong.headers["allow"] == "POST"
        assert sandbox_id in [
            entry["id"] for entry in client.get("/v1/sandboxes").json()["sandboxes"]
        ]
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")
