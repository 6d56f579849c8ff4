"""Code contexts through the client (spec 2.4.1, 2.4.2, 7.1-7.3, 7.9, 10)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.api.conftest import fresh_id, raw_call
from workbench.api import (
    Backend,
    ContextNotFoundError,
    SandboxClient,
    SandboxError,
    ValidationFailedError,
    parse_iso,
)

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def raises(call: Any) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        await call
    return caught.value


def assert_validation(error: SandboxError, message: str, status: int = 400) -> None:
    assert type(error) is ValidationFailedError
    assert (error.code, error.http_status, error.message) == ("VALIDATION_FAILED", status, message)


def assert_context_not_found(error: SandboxError, context_id: str) -> None:
    assert type(error) is ContextNotFoundError
    assert (error.code, error.http_status) == ("CONTEXT_NOT_FOUND", 404)
    assert error.message == f"Code context '{context_id}' not found"
    assert error.context == {"contextId": context_id}


async def test_create_context(sandbox: SandboxClient) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    assert UUID.fullmatch(context.id)
    assert (context.binding, context.language, context.cwd) == ("PERL", "perl", "/workspace")
    assert context.created_at == context.last_used
    assert context.created_at.endswith("Z")
    parse_iso(context.created_at)

    info = await sandbox.get_info()
    [row] = info.contexts
    assert (row.id, row.binding, row.language, row.cwd) == (
        context.id,
        "PERL",
        "perl",
        "/workspace",
    )
    assert row.engine.startswith("Perl ")
    assert (row.executions, row.snapshot) == (0, None)


async def test_create_context_with_cwd_and_env(sandbox: SandboxClient) -> None:
    relative = await sandbox.interpreter.create_code_context("PERL", cwd="sub/dir")
    assert relative.cwd == "/workspace/sub/dir"  # existence is not checked
    absolute = await sandbox.interpreter.create_code_context(
        "PERL", cwd="/workspace/a/../b", env_vars={"X": "1"}
    )
    assert absolute.cwd == "/workspace/b"
    assert not (await sandbox.exists("sub")).exists  # creating a context makes no directory


async def test_create_context_validation(backend: Backend, sandbox: SandboxClient) -> None:
    interpreter = sandbox.interpreter
    assert_validation(await raises(interpreter.create_code_context("")), "binding is required")
    assert_validation(
        await raises(raw_call(backend, sandbox.id, "POST", "/contexts", {})), "binding is required"
    )
    assert_validation(
        await raises(interpreter.create_code_context("PERL", cwd="")),
        "cwd must be a non-empty string",
    )
    assert_validation(
        await raises(interpreter.create_code_context("PERL", cwd="../elsewhere")),
        "Path escapes /workspace: ../elsewhere",
    )
    assert_validation(
        await raises(interpreter.create_code_context("PERL", cwd="/tmp")),
        "Path escapes /workspace: /tmp",
    )
    assert_validation(
        await raises(interpreter.create_code_context("PERL", env_vars={"9LIVES": "x"})),
        "Invalid envVars key: 9LIVES",
    )
    # null is not accepted in context env vars (the client drops None, so send it raw)
    assert_validation(
        await raises(
            raw_call(
                backend,
                sandbox.id,
                "POST",
                "/contexts",
                {"binding": "PERL", "envVars": {"A": None}},
            )
        ),
        "envVars values must be strings",
    )
    assert_validation(
        await raises(
            raw_call(backend, sandbox.id, "POST", "/contexts", {"binding": "PERL", "envVars": []})
        ),
        "envVars must be an object",
    )
    for binding in ("NOPE", "perl", "bad-name", "1PERL"):
        assert_validation(
            await raises(interpreter.create_code_context(binding)), f"Unknown binding '{binding}'"
        )
    assert await interpreter.list_code_contexts() == []


async def test_at_most_eight_contexts(sandbox: SandboxClient) -> None:
    interpreter = sandbox.interpreter
    created = [await interpreter.create_code_context("PERL") for _ in range(8)]
    assert len({context.id for context in created}) == 8
    error = await raises(interpreter.create_code_context("PERL"))
    assert_validation(error, "Cannot create more than 8 code contexts")
    # the cap is across bindings, and checked before the binding is probed
    assert_validation(
        await raises(interpreter.create_code_context("PYTHON")),
        "Cannot create more than 8 code contexts",
    )
    assert_validation(
        await raises(interpreter.create_code_context("NOPE")),
        "Cannot create more than 8 code contexts",
    )
    # a default context counts too
    assert_validation(
        await raises(interpreter.run_code("1", binding="PYTHON")),
        "Cannot create more than 8 code contexts",
    )
    await interpreter.delete_code_context(created[0])
    assert (await interpreter.create_code_context("PERL")).binding == "PERL"


async def test_list_is_sorted_by_creation(sandbox: SandboxClient) -> None:
    interpreter = sandbox.interpreter
    created = [
        await interpreter.create_code_context("PERL", cwd=f"/workspace/c{index}")
        for index in range(5)
    ]
    listed = await interpreter.list_code_contexts()
    assert [context.id for context in listed] == [context.id for context in created]
    assert listed == created
    info = await sandbox.get_info()
    assert [row.id for row in info.contexts] == [context.id for context in created]


async def test_delete_context(sandbox: SandboxClient) -> None:
    interpreter = sandbox.interpreter
    keep = await interpreter.create_code_context("PERL")
    gone = await interpreter.create_code_context("PERL")
    await sandbox.write_file("still-here.txt", "x")
    await interpreter.delete_code_context(gone.id)
    assert [context.id for context in await interpreter.list_code_contexts()] == [keep.id]
    assert (await sandbox.exists("still-here.txt")).exists  # /workspace untouched

    assert_context_not_found(await raises(interpreter.delete_code_context(gone.id)), gone.id)
    odd = "no such/context?"
    assert_context_not_found(await raises(interpreter.delete_code_context(odd)), odd)
    # executing in a deleted context
    assert_context_not_found(await raises(interpreter.run_code("1", context=gone)), gone.id)


async def test_contexts_belong_to_their_sandbox(backend: Backend, sandbox: SandboxClient) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    other = backend.sandbox(fresh_id())
    try:
        error = await raises(other.interpreter.run_code("1", context=context))
        assert_context_not_found(error, context.id)
        error = await raises(other.interpreter.delete_code_context(context))
        assert_context_not_found(error, context.id)
        assert await other.interpreter.list_code_contexts() == []
    finally:
        await other.destroy()
    assert [c.id for c in await sandbox.interpreter.list_code_contexts()] == [context.id]


async def test_execute_request_validation(backend: Backend, sandbox: SandboxClient) -> None:
    interpreter = sandbox.interpreter
    assert_validation(await raises(interpreter.run_code("1")), "Pass a context or a binding")
    assert_validation(
        await raises(interpreter.run_code("   \n\t", binding="PERL")), "Non-empty code is required"
    )
    assert_validation(
        await raises(interpreter.run_code("1;" + " " * 65535, binding="PERL")),
        "Code exceeds 64 KiB",
        413,
    )
    assert_validation(
        await raises(interpreter.run_code("1", binding="PERL", env_vars={"A-B": "x"})),
        "Invalid envVars key: A-B",
    )
    assert_validation(
        await raises(interpreter.run_code("1", binding="PERL", env_vars={"A": 5})),  # type: ignore[dict-item]
        "envVars values must be strings",
    )
    assert_validation(
        await raises(interpreter.run_code("1", context="")), "contextId must be a non-empty string"
    )
    assert_validation(
        await raises(interpreter.run_code("1", binding="")), "binding must be a non-empty string"
    )
    assert_validation(
        await raises(interpreter.run_code("1", binding="NOPE")), "Unknown binding 'NOPE'"
    )
    assert_validation(
        await raises(
            raw_call(
                backend,
                sandbox.id,
                "POST",
                "/execute",
                {"code": "1", "binding": "PERL", "cwd": "/workspace"},
            )
        ),
        "cwd is a context property; pass it to createCodeContext",
    )
    missing = "00000000-0000-4000-8000-000000000000"
    assert_context_not_found(await raises(interpreter.run_code("1", context=missing)), missing)
    # `binding` is ignored when a contextId is given
    assert_context_not_found(
        await raises(interpreter.run_code("1", context=missing, binding="PERL")), missing
    )
    error = await raises(interpreter.run_code("1", binding="PERL", env_vars={"BIG": "x" * 98_304}))
    assert_validation(error, "Request too large", 413)
    # none of the failures created a context
    assert await interpreter.list_code_contexts() == []
