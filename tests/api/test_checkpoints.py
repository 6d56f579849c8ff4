"""Checkpoints (an extension of serve and the local backend): a context's state kept under
a name, listed, restored (also after a restart) and deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.conftest import TTL_MS, WITH_RUBY_CONTEXTS, fresh_id
from tests.api.test_context_fork import STATE, value_of
from tests.api.test_contexts import raises
from workbench.api import CHECKPOINTS_FEATURE, Backend, SandboxClient
from workbench.backends.local import open_local_backend, sandbox_state

RESTORE_NOTE = {"JAVASCRIPT": "// restored checkpoint one"}


@pytest.mark.usefixtures("all_engines")
@pytest.mark.parametrize("binding", STATE)
async def test_save_list_restore_and_delete(
    backend: Backend, sandbox: SandboxClient, binding: str
) -> None:
    define, change, read = STATE[binding]
    interpreter = sandbox.interpreter
    if backend.name == "workerd":
        if binding != "PERL":
            pytest.skip("the Worker gateway keeps no checkpoints: checked once, with PERL")
        context = await interpreter.create_code_context(binding)
        await interpreter.run_code(define, context=context)
        error = await raises(interpreter.save_checkpoint(context, "one"))
        assert (error.code, error.context) == ("NOT_SUPPORTED", {"feature": CHECKPOINTS_FEATURE})
        return
    assert CHECKPOINTS_FEATURE in (await backend.health())["features"]
    context = await interpreter.create_code_context(binding)
    unsaved = await raises(interpreter.save_checkpoint(context, "one"))
    assert unsaved.message.endswith("has no snapshot to keep yet: run a cell first")
    await interpreter.run_code(define, context=context)
    saved = await interpreter.save_checkpoint(context, "one")
    assert (saved.name, saved.context_id, saved.executions) == ("one", context.id, 1)
    assert saved.bytes > 0

    await interpreter.run_code(change, context=context)
    assert await value_of(sandbox, context.id, read) == "100"
    await interpreter.save_checkpoint(context, "two")
    listed = await interpreter.list_checkpoints(context)
    assert [item.name for item in listed.checkpoints] == ["one", "two"]
    assert listed.sandbox_bytes == sum(item.bytes for item in listed.checkpoints)
    assert listed.budget_bytes == 256 << 20

    restored = await interpreter.restore_checkpoint(context, "one")
    assert restored.name == "one"
    assert await value_of(sandbox, context.id, read) == "41"
    history = [entry.code for entry in await interpreter.history(context)]
    assert history[-2:] == [RESTORE_NOTE.get(binding, "# restored checkpoint one"), read]
    await interpreter.restore_checkpoint(context, "two")
    assert await value_of(sandbox, context.id, read) == "100"

    await interpreter.delete_checkpoint(context, "one")
    assert [item.name for item in (await interpreter.list_checkpoints(context)).checkpoints] == [
        "two"
    ]
    missing = await raises(interpreter.restore_checkpoint(context, "one"))
    assert (missing.http_status, missing.message) == (
        404,
        f"Code context '{context.id}' has no checkpoint 'one'",
    )


async def test_names_limits_and_unknown_contexts(backend: Backend) -> None:
    if backend.name == "workerd":
        pytest.skip("the Worker gateway keeps no checkpoints (see the test above)")
    sandbox = backend.sandbox(fresh_id())
    interpreter = sandbox.interpreter
    try:
        unknown = await raises(interpreter.list_checkpoints("nope"))
        assert unknown.code == "CONTEXT_NOT_FOUND"
        context = await interpreter.create_code_context("PERL")
        await interpreter.run_code("our $n = 1", context=context)
        for bad in ("", "../x", "a/b", "-x", "x" * 65, "é"):
            refused = await raises(interpreter.save_checkpoint(context, bad))
            assert refused.code == "VALIDATION_FAILED", bad
        # No checkpoint has such a name (`..` in a URL blamed the sandbox id; QA).
        for bad in (".", "..", "../x", "a/b"):
            for call in (interpreter.restore_checkpoint, interpreter.delete_checkpoint):
                missing = await raises(call(context, bad))
                assert (missing.http_status, missing.message) == (
                    404,
                    f"Code context '{context.id}' has no checkpoint '{bad}'",
                ), bad
        for index in range(16):
            await interpreter.save_checkpoint(context, f"c{index}")
        again = await interpreter.save_checkpoint(context, "c3")  # replacing is no new one
        assert again.name == "c3"
        full = await raises(interpreter.save_checkpoint(context, "c16"))
        assert full.message == "Cannot keep more than 16 checkpoints of a context; delete one"
        await interpreter.delete_code_context(context)
        gone = await raises(interpreter.list_checkpoints(context))
        assert gone.code == "CONTEXT_NOT_FOUND"
    finally:
        await sandbox.destroy()


@pytest.mark.usefixtures("all_engines")
@pytest.mark.parametrize("binding", STATE)
async def test_a_checkpoint_restores_the_saved_state_after_a_restart(
    tmp_path: Path, binding: str
) -> None:
    define, change, read = STATE[binding]

    def opened() -> Backend:
        return open_local_backend(
            tmp_path / "data", ttl_ms=TTL_MS, settings=WITH_RUBY_CONTEXTS, embedded=True
        )

    async with opened() as backend:
        sandbox = backend.sandbox("kept")
        context = await sandbox.interpreter.create_code_context(binding)
        await sandbox.interpreter.run_code(define, context=context)
        await sandbox.interpreter.save_checkpoint(context, "defined")
        await sandbox.interpreter.run_code(change, context=context)
    async with opened() as backend:  # a new process would open the store the same way
        sandbox = backend.sandbox("kept")
        assert await value_of(sandbox, context.id, read) == "100"
        await sandbox.interpreter.restore_checkpoint(context, "defined")
    async with opened() as backend:
        sandbox = backend.sandbox("kept")
        assert await value_of(sandbox, context.id, read) == "41"
        await sandbox.destroy()


async def test_a_save_past_the_sandbox_budget_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, perl_engine: None
) -> None:
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        interpreter = backend.sandbox("budget").interpreter
        context = await interpreter.create_code_context("PERL")
        await interpreter.run_code("our $n = 1", context=context)
        first = await interpreter.save_checkpoint(context, "first")
        monkeypatch.setattr(sandbox_state, "CHECKPOINT_BUDGET_BYTES", first.bytes * 3 // 2)
        await interpreter.save_checkpoint(context, "first")  # replacing it: still within
        refused = await raises(interpreter.save_checkpoint(context, "second"))
        assert refused.code == "VALIDATION_FAILED"
        assert refused.message == (
            f"The sandbox's checkpoints would hold {2 * first.bytes} bytes, past their "
            f"budget of {first.bytes * 3 // 2}; delete some"
        )
        listed = await interpreter.list_checkpoints(context)
        assert [item.name for item in listed.checkpoints] == ["first"]  # nothing kept
        assert listed.sandbox_bytes == first.bytes


async def test_a_checkpoint_names_the_run_its_memory_is_of(
    tmp_path: Path, perl_engine: None
) -> None:
    """A run that stored no snapshot (here: one past its time limit) counts in the context,
    not in a checkpoint saved after it: that holds the memory of the run before."""
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        interpreter = backend.sandbox("labels").interpreter
        context = await interpreter.create_code_context("PERL")
        await interpreter.run_code("our $n = 1", context=context)
        stopped = await interpreter.run_code("1 while 1;", context=context, timeout=0.5)
        assert stopped.error is not None and stopped.execution_count == 2
        saved = await interpreter.save_checkpoint(context, "after-the-limit")
        assert saved.executions == 1


async def test_the_execution_count_goes_on_through_a_restore(
    backend: Backend, sandbox: SandboxClient, perl_engine: None
) -> None:
    """A checkpoint notes the run it was saved at, but a restore does not put the count
    back: the restore is an entry of the history with the next number, so no number is
    ever given twice (the README said a checkpoint kept "its execution count")."""
    if backend.name == "workerd":
        pytest.skip("the Worker gateway keeps no checkpoints")
    interpreter = sandbox.interpreter
    context = await interpreter.create_code_context("PERL")
    await interpreter.run_code("our $n = 1", context=context)
    await interpreter.run_code("$n = 2", context=context)
    saved = await interpreter.save_checkpoint(context, "two")
    assert saved.executions == 2
    assert (await interpreter.run_code("$n = 3", context=context)).execution_count == 3

    await interpreter.restore_checkpoint(context, "two")
    after = await interpreter.run_code("$n", context=context)

    assert (after.execution_count, after.results[-1].text) == (5, "2")
    history = await interpreter.history(context)
    assert [(entry.seq, entry.code) for entry in history[-3:]] == [
        (3, "$n = 3"),
        (4, "# restored checkpoint two"),
        (5, "$n"),
    ]
