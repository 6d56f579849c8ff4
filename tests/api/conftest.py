"""Fixtures for the behavioural suite of the public API (spec 2.4-10, 13).

Every test here talks only to `Backend` / `SandboxClient`, so the same tests run
against each backend kind in `BACKEND_KINDS`: `local` (real engines on wasmtime over a
real SQLite file in a fresh temp dir per test) and `remote` (the remote backend over
HTTP to one real `sandbox-workbench serve` process on loopback for the session; tests
use their own sandbox ids) and `workerd` (the remote backend over HTTP to the gateway
Worker template running in workerd via `wrangler dev`, in front of its own serve process;
see tests/workerd/harness.py; skipped only when node/npm are missing).

The local and serve backends run with Ruby code contexts on (the local extension), so
that Ruby is covered in contexts too; tests/api/test_local_settings.py covers the
default, which runs Ruby statelessly as the deployed system does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.serve_process import ServeProcess, serve_process
from tests.workerd.harness import session_gateway
from workbench.api import Backend, SandboxClient
from workbench.backends.local import open_local_backend
from workbench.backends.remote import open_remote_backend
from workbench.config import RUBY_CONTEXTS_ENV, LocalSettings
from workbench.protocol.http import parse_json_response

BACKEND_KINDS = ["local", "remote", "workerd"]
WORKERD_SKIPS = {
    "test_cancel_stops_a_running_loop": "POST /v1/sandboxes/:id/cancel is a serve/local-only "
    "extension; the Worker gateway answers 404 (docs/gateway-protocol.md, Extensions)",
    "test_a_cancel_that_names_a_context_leaves_another_contexts_run": "the same extension",
}
"""Tests that depend on a serve-only extension the Worker gateway does not relay."""
TTL_MS = 86_400_000
"""The default TTL pinned, so a developer's SANDBOX_WORKBENCH_IDLE_TTL_MS cannot leak in."""
WITH_RUBY_CONTEXTS = LocalSettings(ruby_contexts=True)


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(
        tmp_path_factory.mktemp("served"),
        env={"SANDBOX_WORKBENCH_IDLE_TTL_MS": str(TTL_MS), RUBY_CONTEXTS_ENV: "1"},
    ) as process:
        yield process


@pytest.fixture(params=BACKEND_KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind = request.param
    if kind == "local":
        opened = open_local_backend(
            tmp_path / "data", ttl_ms=TTL_MS, settings=WITH_RUBY_CONTEXTS, embedded=True
        )
    elif kind == "workerd":
        reason = WORKERD_SKIPS.get(request.function.__name__)
        if reason is not None:
            pytest.skip(f"not through the Worker gateway: {reason}")
        gateway = session_gateway(request)
        opened = gateway.backend("workerd")
    else:
        server: ServeProcess = request.getfixturevalue("served")
        opened = open_remote_backend("served", server.url, server.token)
    try:
        yield opened
    finally:
        await opened.aclose()


def fresh_id(prefix: str = "t") -> str:
    """A sandbox id unique to one test (the remote backend's sandboxes outlive tests)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


@pytest.fixture
async def sandbox(backend: Backend) -> AsyncIterator[SandboxClient]:
    client = backend.sandbox(fresh_id())
    try:
        yield client
    finally:
        await client.destroy()


async def raw_call(backend: Backend, sandbox_id: str, method: str, path: str, body: Any) -> Any:
    """Send a gateway-protocol request the typed client would never build (to check the
    server-side rules, e.g. a `cwd` key on execute or a `null` context env value)."""
    response = await backend.transport.request(
        method, f"/v1/sandboxes/{quote(sandbox_id, safe='')}{path}", body
    )
    return parse_json_response(response)
