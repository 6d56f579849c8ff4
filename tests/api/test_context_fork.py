"""Forking a context (an extension of serve and the local backend): a new context that
starts from a copy of another's state, then evolves on its own."""

from __future__ import annotations

import pytest

from tests.api.conftest import fresh_id
from tests.api.test_contexts import assert_context_not_found, raises
from workbench.api import CONTEXT_FORK_FEATURE, Backend, SandboxClient

STATE = {  # binding: (define, change, read)
    "PERL": ("our $n = 41", "$n = 100", "$n"),
    "PYTHON": ("n = 41", "n = 100", "n"),
    "JAVASCRIPT": ("var n = 41", "n = 100", "n"),
    "RUBY": ("$n = 41", "$n = 100", "$n"),
}


async def value_of(sandbox: SandboxClient, context_id: str, code: str) -> str | None:
    result = await sandbox.interpreter.run_code(code, context=context_id)
    assert result.error is None, result.error
    return result.results[-1].text if result.results else None


@pytest.mark.usefixtures("all_engines")
@pytest.mark.parametrize("binding", STATE)
async def test_a_fork_starts_from_the_state_and_diverges_both_ways(
    backend: Backend, sandbox: SandboxClient, binding: str
) -> None:
    define, change, read = STATE[binding]
    if backend.name == "workerd":
        if binding != "PERL":
            pytest.skip("the Worker gateway cannot fork: checked once, with PERL")
        origin = await sandbox.interpreter.create_code_context(binding)
        error = await raises(sandbox.interpreter.fork_code_context(origin))
        assert (error.code, error.http_status) == ("NOT_SUPPORTED", 403)
        assert error.context == {"feature": CONTEXT_FORK_FEATURE}
        assert "cannot fork" in error.message
        return
    assert CONTEXT_FORK_FEATURE in (await backend.health())["features"]
    await sandbox.mkdir("/workspace/sub")
    origin = await sandbox.interpreter.create_code_context(binding, cwd="/workspace/sub")
    await sandbox.interpreter.run_code(define, context=origin)
    fork = await sandbox.interpreter.fork_code_context(origin.id)
    assert fork.id != origin.id
    assert (fork.binding, fork.language, fork.cwd) == (binding, origin.language, "/workspace/sub")

    first = await sandbox.interpreter.run_code(read, context=fork)
    assert first.error is None and first.results[-1].text == "41"
    assert first.execution_count == 2  # the count goes on from the origin's
    history = await sandbox.interpreter.history(fork)
    assert [entry.code for entry in history] == [define, read]

    # Each side's changes stay its own.
    await sandbox.interpreter.run_code(change, context=fork)
    assert await value_of(sandbox, origin.id, read) == "41"
    await sandbox.interpreter.run_code(change.replace("100", "7"), context=origin)
    assert await value_of(sandbox, fork.id, read) == "100"
    assert await value_of(sandbox, origin.id, read) == "7"
    assert [entry.code for entry in await sandbox.interpreter.history(origin)] == [
        define,
        read,
        change.replace("100", "7"),
        read,
    ]
    info = await sandbox.get_info()
    assert {context.id for context in info.contexts} == {origin.id, fork.id}

    # Deleting the origin leaves the fork whole (their snapshot blocks are shared).
    await sandbox.interpreter.delete_code_context(origin)
    assert await value_of(sandbox, fork.id, read) == "100"


async def test_forking_an_unknown_context_or_past_the_limit(backend: Backend) -> None:
    if backend.name == "workerd":
        pytest.skip("the Worker gateway cannot fork (see the test above)")
    sandbox = backend.sandbox(fresh_id())
    try:
        missing = await raises(sandbox.interpreter.fork_code_context("nope"))
        assert_context_not_found(missing, "nope")
        origin = await sandbox.interpreter.create_code_context("PERL")
        for _ in range(7):
            await sandbox.interpreter.fork_code_context(origin)
        refused = await raises(sandbox.interpreter.fork_code_context(origin))
        assert refused.code == "VALIDATION_FAILED"
        assert refused.message == "Cannot create more than 8 code contexts"
    finally:
        await sandbox.destroy()
