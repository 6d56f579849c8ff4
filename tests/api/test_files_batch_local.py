"""`POST /files/batch` on the local gateway: one SQLite transaction for the whole batch, so
a commit that fails leaves memory equal to SQLite; gzip bodies, bounded after decoding."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.security.test_files_input import SANDBOX, call, memory_view, stored_view
from workbench.backends.local import LocalGateway, open_local_gateway
from workbench.protocol.http import Request

BATCH = f"/v1/sandboxes/{SANDBOX}/files/batch"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[LocalGateway]:
    opened = open_local_gateway(tmp_path / "data", ttl_ms=0)
    try:
        yield opened
    finally:
        opened.close()


async def send(gateway: LocalGateway, body: bytes, headers: dict[str, str]) -> Any:
    response = await gateway.handle(Request("POST", BATCH, body, headers))
    return response.status, json.loads(response.body)


async def test_a_batch_that_cannot_commit_changes_nothing(gateway: LocalGateway) -> None:
    status, _ = await call(
        gateway,
        "POST",
        BATCH,
        {
            "entries": [
                {"op": "mkdir", "path": "dir"},
                {"op": "write", "path": "dir/a.txt", "content": "alpha"},
                {"op": "write", "path": "b.txt", "content": "beta"},
            ]
        },
    )
    assert status == 200
    with sqlite3.connect(gateway.store.path) as other:  # a real SQLite refusal, mid-commit
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON files WHEN NEW.path = '/workspace/last.txt' "
            "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
        )
    before = await memory_view(gateway)
    entries = [
        {"op": "write", "path": "dir/a.txt", "content": "changed"},
        {"op": "delete", "path": "b.txt"},
        {"op": "rename", "path": "dir", "newPath": "moved"},
        {"op": "write", "path": "nope/x.txt", "content": "fails on its own"},
        {"op": "write", "path": "last.txt", "content": "refused at the commit"},
    ]
    status, answer = await call(gateway, "POST", BATCH, {"entries": entries})
    assert (status, answer["code"]) == (500, "INTERNAL_ERROR")
    assert "refused by a trigger" in answer["message"]
    after = await memory_view(gateway)
    assert after == before == stored_view(gateway)
    assert list(after) == list(before)  # the listing order is restored too
    status, answer = await call(gateway, "POST", BATCH, {"entries": entries[:3]})
    assert status == 200 and all(result["ok"] for result in answer["results"])
    assert await memory_view(gateway) == stored_view(gateway)
    assert set(stored_view(gateway)) == {"/workspace/moved", "/workspace/moved/a.txt"}


async def test_gzip_bodies_are_decoded_within_the_cap(gateway: LocalGateway) -> None:
    entries = [{"op": "write", "path": f"f{n}.txt", "content": "text " * 2000} for n in range(50)]
    plain = json.dumps({"entries": entries}).encode()
    packed = gzip.compress(plain)
    assert len(packed) * 20 < len(plain)
    status, answer = await send(gateway, packed, {"content-encoding": "gzip"})
    assert status == 200 and len(answer["results"]) == 50

    # A bomb: 64 KiB on the wire, 16 MiB of zeros once decoded. Refused, nothing applied.
    bomb = gzip.compress(b'{"entries": [' + b" " * (16 * 1024 * 1024) + b"]}")
    assert len(bomb) < 65_536
    status, answer = await send(gateway, bomb, {"content-encoding": "gzip"})
    assert (status, answer["message"]) == (413, "Request too large")

    for body, headers, expected in (
        (plain[:100], {"content-encoding": "gzip"}, (400, "Invalid gzip body")),
        (packed[:-8], {"content-encoding": "gzip"}, (400, "Invalid gzip body")),
        (packed + b"junk", {"content-encoding": "gzip"}, (400, "Invalid gzip body")),
        (packed, {"content-encoding": "br"}, (415, "Content-Encoding must be gzip or identity")),
        (plain, {"content-encoding": "identity"}, (200, None)),
    ):
        status, answer = await send(gateway, body, headers)
        assert (status, answer.get("message")) == expected
