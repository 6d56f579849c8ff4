"""Requests carried out only if their sandbox exists (`x-sandbox-must-exist`, an extension
of every server: docs/gateway-protocol.md): where spec 2.4 makes a sandbox on first touch,
such a request answers 404 `SANDBOX_NOT_FOUND` and makes nothing. The same tests on every
backend kind (the Worker gateway knows sandboxes by its registry); the local gateway's
atomicity and a backend without the feature are tested below them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import fresh_id
from tests.cli import cli_env
from tests.serve_process import serve_process
from workbench.api import (
    SANDBOX_MUST_EXIST_FEATURE,
    Backend,
    MockTransport,
    NotSupportedError,
    Request,
    Response,
    SandboxClient,
    SandboxError,
    SandboxNotFoundError,
    sandboxes_must_exist,
)
from workbench.backends.daemon import probe, socket_path
from workbench.backends.local import LocalTransport, open_local_backend
from workbench.backends.remote import open_remote_backend
from workbench.protocol.http import parse_json

Call = Callable[[SandboxClient], Awaitable[Any]]

CALLS: dict[str, Call] = {
    "info": lambda sandbox: sandbox.get_info(),
    "execute": lambda sandbox: sandbox.interpreter.run_code("1", binding="PERL"),
    "create a context": lambda sandbox: sandbox.interpreter.create_code_context("PERL"),
    "list contexts": lambda sandbox: sandbox.interpreter.list_code_contexts(),
    "delete a context": lambda sandbox: sandbox.interpreter.delete_code_context("c"),
    "history": lambda sandbox: sandbox.interpreter.history("c"),
    "checkpoint usage": lambda sandbox: sandbox.interpreter.checkpoint_usage(["c"]),
    "set env vars": lambda sandbox: sandbox.set_env_vars({"KEY": "value"}),
    "write a file": lambda sandbox: sandbox.write_file("/workspace/a.txt", "a"),
    "list files": lambda sandbox: sandbox.list_files(),
    "mkdir in a batch": lambda sandbox: sandbox.mkdir("/workspace/d"),
    "destroy": lambda sandbox: sandbox.destroy(),
}


async def listed(backend: Backend) -> set[str]:
    return {summary.id for summary in await backend.list_sandboxes()}


async def test_health_offers_it(backend: Backend) -> None:
    assert SANDBOX_MUST_EXIST_FEATURE in (await backend.health())["features"]


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
async def test_a_request_for_a_sandbox_that_does_not_exist_makes_none(
    backend: Backend, call: Call
) -> None:
    sandbox_id = fresh_id()
    with pytest.raises(SandboxNotFoundError) as raised:
        await call(backend.sandbox(sandbox_id, must_exist=True))
    error = raised.value
    assert (error.code, error.http_status) == ("SANDBOX_NOT_FOUND", 404)
    assert error.message == f"Sandbox '{sandbox_id}' not found"
    assert error.context == {"sandboxId": sandbox_id}
    assert sandbox_id not in await listed(backend)


async def test_a_sandbox_destroyed_is_not_made_again(backend: Backend) -> None:
    """It exists: requests are carried out as without the header; destroyed, they are
    refused, and it stays gone."""
    sandbox_id = fresh_id()
    await backend.sandbox(sandbox_id).write_file("/workspace/a.txt", "a")
    existing = backend.sandbox(sandbox_id, must_exist=True)
    assert (await existing.read_file("/workspace/a.txt")).content == "a"
    context = await existing.interpreter.create_code_context("PERL")
    await existing.destroy()
    with pytest.raises(SandboxNotFoundError):
        await existing.interpreter.run_code("1", context=context)
    with pytest.raises(SandboxNotFoundError):
        await existing.write_file("/workspace/a.txt", "again")
    assert sandbox_id not in await listed(backend)


async def test_a_scope_asks_it_of_every_client_but_one_that_makes_its_sandbox(
    backend: Backend,
) -> None:
    sandbox_id = fresh_id()
    with sandboxes_must_exist():
        with pytest.raises(SandboxNotFoundError):
            await backend.sandbox(sandbox_id).get_info()
        assert sandbox_id not in await listed(backend)
        made = backend.sandbox(sandbox_id, must_exist=False)
        try:
            assert (await made.get_info()).id == sandbox_id  # New sandbox makes it
            assert sandbox_id in await listed(backend)
        finally:
            await made.destroy()
    assert sandbox_id not in await listed(backend)


# ----- the local gateway (the daemon's and serve's): atomic with destroys -------------


async def test_a_destroy_queued_between_the_check_and_the_request_cannot_be_undone(
    tmp_path: Path, perl_engine: None
) -> None:
    """The check is made in the sandbox's turn: a destroy queued before the request, while
    the sandbox still existed, runs first, and the request then finds nothing to act on
    (checked before its turn, it passed and made the sandbox again, empty)."""
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        await backend.sandbox("demo").write_file("/workspace/a.txt", "a")
        assert isinstance(backend.transport, LocalTransport)
        demo = backend.transport.gateway.sandbox("demo")

        async def until_queued(count: int) -> None:
            """Until `count` requests wait for demo's turn (asyncio's lock is FIFO)."""
            while len(demo._queue._waiters or ()) < count:
                await asyncio.sleep(0.001)

        async with demo.turn():  # another request of demo is under way
            destroy = asyncio.create_task(backend.sandbox("demo").destroy())
            await until_queued(1)
            run = asyncio.create_task(
                backend.sandbox("demo", must_exist=True).interpreter.run_code("1", binding="PERL")
            )
            await until_queued(2)
            assert demo.exists  # what a check before the turn found
        await destroy
        with pytest.raises(SandboxNotFoundError):
            await run
        assert "demo" not in await listed(backend)


async def test_the_daemon_and_a_serve_in_front_of_it_pass_it_on(
    tmp_path: Path, perl_engine: None
) -> None:
    """Through the daemon's socket and through `serve` as a front of that daemon (which
    passes each request on as it came), as in the daemon's own gateway."""
    data = tmp_path / "data"
    async with open_local_backend(data) as daemon:
        await daemon.sandbox("kept").write_file("/workspace/a.txt", "a")
        with serve_process(data, env=cli_env(tmp_path)) as served:
            owner = probe(socket_path(data))
            assert owner is not None and owner.pid != served.process.pid  # a front
            async with open_remote_backend("front", served.url, served.token) as front:
                for backend in (daemon, front):
                    with pytest.raises(SandboxNotFoundError):
                        await backend.sandbox("gone", must_exist=True).write_file(
                            "/workspace/b", ""
                        )
                    kept = backend.sandbox("kept", must_exist=True)
                    assert (await kept.read_file("/workspace/a.txt")).content == "a"
                assert await listed(daemon) == {"kept"}


# ----- a gateway without the feature ---------------------------------------------------


async def test_health_lists_it_only_to_a_request_that_carries_the_header(
    backend: Backend,
) -> None:
    """So a server in between that drops the header (an older `serve`) hides the feature."""
    bare = parse_json((await backend.transport.request("GET", "/v1/health")).body)
    assert SANDBOX_MUST_EXIST_FEATURE not in bare["features"]
    assert "files-batch" in bare["features"]


async def test_a_gateway_that_does_not_offer_it_is_sent_nothing(tmp_path: Path) -> None:
    """A server that would not pass the header on (here a front that passes on none, as an
    older `serve` would), or an older gateway that ignores it, would make the sandbox: the
    client refuses before sending anything naming it, and says why."""
    sent: list[Request] = []
    async with open_local_backend(tmp_path / "data", embedded=True) as local:

        async def older_front(request: Request) -> Response:
            sent.append(request)
            return await local.transport.request(
                request.method, request.path, parse_json(request.body) if request.body else None
            )

        backend = Backend(MockTransport(older_front), name="older")
        with pytest.raises(NotSupportedError) as raised:
            await backend.sandbox("demo", must_exist=True).get_info()
        assert raised.value.context == {"feature": SANDBOX_MUST_EXIST_FEATURE}
        assert [request.path for request in sent] == ["/v1/health"]
        assert "demo" not in await listed(local)


async def test_a_health_request_that_fails_is_not_taken_for_a_missing_feature() -> None:
    """It was reported as NOT_SUPPORTED, which callers read as "this backend has no such
    route" (a checkpoint listing then said the sandbox keeps none)."""
    sent: list[str] = []

    async def waking_gateway(request: Request) -> Response:
        sent.append(request.path)
        return Response.json(503, {"code": "INTERNAL_ERROR", "message": "waking up"})

    backend = Backend(MockTransport(waking_gateway), name="waking")
    with pytest.raises(SandboxError) as raised:
        await backend.sandbox("demo", must_exist=True).get_info()
    assert not isinstance(raised.value, NotSupportedError)
    assert (raised.value.code, raised.value.message) == ("INTERNAL_ERROR", "waking up")
    assert sent == ["/v1/health"]
