"""Sandbox ids, `SandboxInfo`, listing, env vars and destroy (spec 8.1, 8.2, 8.4, 2.4.3)."""

from __future__ import annotations

import re

import pytest

from tests.api.conftest import fresh_id
from workbench.api import (
    Backend,
    ContextNotFoundError,
    SandboxClient,
    SandboxError,
    ValidationFailedError,
    parse_iso,
)
from workbench.protocol.http import parse_json_response
from workbench.protocol.timestamps import ms_from_iso


@pytest.mark.parametrize(
    ("sandbox_id", "message"),
    [
        ("", 'Invalid sandbox id "": must match /^[A-Za-z0-9._-]{1,63}$/'),
        ("a" * 64, f'Invalid sandbox id "{"a" * 64}": must match /^[A-Za-z0-9._-]{{1,63}}$/'),
        ("has space", 'Invalid sandbox id "has space": must match /^[A-Za-z0-9._-]{1,63}$/'),
        ("slash/id", 'Invalid sandbox id "slash/id": must match /^[A-Za-z0-9._-]{1,63}$/'),
        ("-lead", 'Invalid sandbox id "-lead": cannot start or end with a hyphen'),
        ("trail-", 'Invalid sandbox id "trail-": cannot start or end with a hyphen'),
        ("admin", "Invalid sandbox id \"admin\": 'admin' is a reserved name"),
        ("WWW", "Invalid sandbox id \"WWW\": 'WWW' is a reserved name"),
        ("Cloudflare", "Invalid sandbox id \"Cloudflare\": 'Cloudflare' is a reserved name"),
    ],
)
def test_invalid_sandbox_ids_raise_on_the_client(
    backend: Backend, sandbox_id: str, message: str
) -> None:
    with pytest.raises(SandboxError) as caught:
        backend.sandbox(sandbox_id)  # synchronous, no request
    assert caught.value.message == message
    assert isinstance(caught.value, ValidationFailedError)
    assert caught.value.http_status == 400


@pytest.mark.parametrize("sandbox_id", ["-lead", "root", "a" * 64])
async def test_invalid_sandbox_ids_are_rejected_by_the_server(
    backend: Backend, sandbox_id: str
) -> None:
    response = await backend.transport.request("GET", f"/v1/sandboxes/{sandbox_id}")
    with pytest.raises(ValidationFailedError) as caught:
        parse_json_response(response)
    assert response.status == 400
    with pytest.raises(SandboxError) as expected:
        backend.sandbox(sandbox_id)
    assert caught.value.message == expected.value.message


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sandboxes/"),
        ("POST", "/v1/sandboxes//execute"),
        ("DELETE", "/v1/sandboxes/"),
        ("POST", "/v1/runtimes//execute"),
        ("POST", "/v1/runtimes/PYTHON/x/execute"),
    ],
)
async def test_an_empty_id_or_binding_segment_is_an_unknown_route(
    backend: Backend, method: str, path: str
) -> None:
    """Every gateway answers 404 `Not found` (the Worker's routes take one segment, not
    empty, for `:id` and `:binding`; serve answered 400 for an invalid id)."""
    body = {"code": "1", "binding": "PYTHON"} if method == "POST" else None
    response = await backend.transport.request(method, path, body)
    with pytest.raises(SandboxError) as caught:
        parse_json_response(response)
    assert (response.status, caught.value.message) == (404, "Not found")


async def test_valid_ids_and_normalization(backend: Backend) -> None:
    longest = "a" * 63
    for sandbox_id in (longest, "A.b_c-d", "0", "a-b", "user-42"):
        assert backend.sandbox(sandbox_id).id == sandbox_id
    assert backend.sandbox("MiXeD-Id", normalize_id=True).id == "mixed-id"
    with pytest.raises(SandboxError) as caught:
        backend.sandbox("ADMIN", normalize_id=True)
    assert caught.value.message == "Invalid sandbox id \"admin\": 'admin' is a reserved name"

    # ids are case-sensitive: two spellings are two sandboxes
    base = fresh_id()
    upper, lower = backend.sandbox(base.upper()), backend.sandbox(base)
    try:
        await upper.write_file("a.txt", "upper")
        assert not (await lower.exists("a.txt")).exists
    finally:
        await upper.destroy()
        await lower.destroy()


async def test_info_of_a_fresh_sandbox(sandbox: SandboxClient) -> None:
    info = await sandbox.get_info()
    assert info.id == sandbox.id
    iso = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
    assert iso.fullmatch(info.created_at)
    assert iso.fullmatch(info.last_used)
    assert ms_from_iso(info.last_used) >= ms_from_iso(info.created_at)
    assert info.env_vars == {}
    assert info.contexts == []
    assert (info.workspace_files, info.workspace_bytes) == (0, 0)
    assert info.file_api is True
    assert isinstance(info.expires_at, int)
    assert info.expires_at > ms_from_iso(info.last_used)

    raw = (await sandbox.get_info()).to_json()
    assert set(raw) == {
        "id",
        "createdAt",
        "lastUsed",
        "envVars",
        "contexts",
        "workspace",
        "fileApi",
        "expiresAt",
    }


async def test_info_counts_files_and_directories(sandbox: SandboxClient) -> None:
    await sandbox.mkdir("d/e", recursive=True)
    await sandbox.write_file("d/e/f.txt", "12345")
    await sandbox.write_file("g.bin", b"\x00" * 10)
    info = await sandbox.get_info()
    assert (info.workspace_files, info.workspace_bytes) == (4, 15)


async def test_info_reports_the_snapshot_after_a_run(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    """The snapshot record appears in `GET /` right after the run (stored with it)."""
    context = await sandbox.interpreter.create_code_context("PERL", cwd="sub")
    idle = await sandbox.interpreter.create_code_context("PERL")
    assert (await sandbox.get_info()).contexts[0].snapshot is None
    for _ in range(2):
        result = await sandbox.interpreter.run_code("our $x = 1; 1", context=context)
        assert result.error is None
    info = await sandbox.get_info()
    assert [(row.id, row.cwd, row.executions) for row in info.contexts] == [
        (context.id, "/workspace", 2),  # the missing cwd falls back to /workspace
        (idle.id, "/workspace", 0),
    ]
    assert info.contexts[0].created_at == context.created_at
    assert info.contexts[0].last_used >= context.last_used
    assert info.contexts[1].snapshot is None
    snapshot = info.contexts[0].snapshot
    assert snapshot is not None
    assert snapshot.bytes == snapshot.pages * 65536
    assert snapshot.stored_bytes % 1048576 == 0
    assert snapshot.stored_bytes >= snapshot.bytes
    assert snapshot.stale is False
    assert len(snapshot.build) == 64


async def test_set_env_vars(sandbox: SandboxClient) -> None:
    await sandbox.set_env_vars({"A": "1", "B": "2", "_c9": "x"})
    assert (await sandbox.get_info()).env_vars == {"A": "1", "B": "2", "_c9": "x"}
    await sandbox.set_env_vars({"A": None, "B": "3", "MISSING": None})
    assert (await sandbox.get_info()).env_vars == {"B": "3", "_c9": "x"}
    await sandbox.set_env_vars({})
    assert (await sandbox.get_info()).env_vars == {"B": "3", "_c9": "x"}


@pytest.mark.parametrize("key", ["1A", "A-B", "", "has space", "é"])
async def test_set_env_vars_rejects_invalid_keys(sandbox: SandboxClient, key: str) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        await sandbox.set_env_vars({"OK": "1", key: "v"})
    assert caught.value.message == f"Invalid envVars key: {key}"
    assert (caught.value.code, caught.value.http_status) == ("VALIDATION_FAILED", 400)
    assert (await sandbox.get_info()).env_vars == {}  # nothing applied


async def test_set_env_vars_rejects_non_string_values(sandbox: SandboxClient) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        await sandbox.set_env_vars({"A": 1})  # type: ignore[dict-item]
    assert caught.value.message == "envVars values must be strings"


async def test_list_sandboxes(backend: Backend) -> None:
    first, second = backend.sandbox(fresh_id("la")), backend.sandbox(fresh_id("lb"))
    await first.write_file("a.txt", "x")
    await second.get_info()  # any touch creates the sandbox
    listed = {summary.id: summary for summary in await backend.list_sandboxes()}
    assert {first.id, second.id} <= set(listed)
    summary = listed[first.id]
    parse_iso(summary.created_at)
    parse_iso(summary.last_used)
    assert isinstance(summary.expires_at, int)

    await first.destroy()
    remaining = {summary.id for summary in await backend.list_sandboxes()}
    assert first.id not in remaining
    assert second.id in remaining
    await second.destroy()
    assert second.id not in {summary.id for summary in await backend.list_sandboxes()}


async def test_a_failing_files_request_makes_no_sandbox(backend: Backend) -> None:
    """Spec 8.3: a failing file operation does not touch. It made the sandbox all the
    same, with no idle deadline, so a typo'd id stayed listed for good."""
    typo = backend.sandbox(fresh_id("typo"))
    with pytest.raises(SandboxError):
        await typo.read_file("missing.txt")
    with pytest.raises(SandboxError):
        await typo.delete_file("missing.txt")
    assert typo.id not in {summary.id for summary in await backend.list_sandboxes()}
    await typo.write_file("a.txt", "x")  # one that succeeds makes it, with its deadline
    listed = {summary.id: summary for summary in await backend.list_sandboxes()}
    assert isinstance(listed[typo.id].expires_at, int)
    await typo.destroy()


async def test_a_run_that_fails_before_it_runs_makes_no_sandbox(
    backend: Backend, perl_engine: None
) -> None:
    """A REPL tab of a destroyed sandbox ran in its context again: the run made the
    sandbox anew and failed with a 404 all the same, and the destroyed sandbox came back
    in the list. Nor does an unknown binding make one (the Worker gateway lists a
    sandbox after a request that succeeded only)."""
    sandbox = backend.sandbox(fresh_id("gone"))
    context = await sandbox.interpreter.create_code_context("PERL")
    await sandbox.destroy()
    with pytest.raises(ContextNotFoundError):
        await sandbox.interpreter.run_code("1", context=context.id)
    with pytest.raises(ValidationFailedError):
        await sandbox.interpreter.run_code("1", binding="NO_SUCH_BINDING")
    assert sandbox.id not in {summary.id for summary in await backend.list_sandboxes()}
    result = await sandbox.interpreter.run_code("6 * 7", binding="PERL")  # a run makes it
    assert result.error is None
    assert sandbox.id in {summary.id for summary in await backend.list_sandboxes()}
    await sandbox.destroy()


async def test_destroy_wipes_everything(sandbox: SandboxClient, perl_engine: None) -> None:
    await sandbox.set_env_vars({"KEEP": "no"})
    await sandbox.mkdir("d")
    await sandbox.write_file("d/f.txt", "data")
    context = await sandbox.interpreter.create_code_context("PERL")
    result = await sandbox.interpreter.run_code("our $v = 41; $v + 1", context=context)
    assert result.error is None
    before = await sandbox.get_info()

    await sandbox.destroy()
    await sandbox.destroy()  # destroying an absent sandbox is fine too

    info = await sandbox.get_info()  # a brand-new sandbox
    assert info.env_vars == {}
    assert info.contexts == []
    assert (info.workspace_files, info.workspace_bytes) == (0, 0)
    assert ms_from_iso(info.created_at) >= ms_from_iso(before.created_at)
    assert await sandbox.interpreter.list_code_contexts() == []
    assert not (await sandbox.exists("d")).exists
    rerun = await sandbox.interpreter.run_code("defined $v ? 'kept' : 'gone'", binding="PERL")
    assert [entry.text for entry in rerun.results] == ["gone"]
    assert rerun.execution_count == 1
