"""`run_code`'s line callbacks are told of output as the guest writes it where the server
streams (the local backend, `serve`: an NDJSON answer the client asks for with `Accept`),
and of every line once, in order, where it does not (the Worker gateway answers at the end).
The result is the same either way."""

from __future__ import annotations

import time

import pytest

from workbench.api import Backend, SandboxClient

CODE = (
    "import sys, time\n"
    "print('first')\n"
    "time.sleep(1.5)\n"
    "print('second', file=sys.stderr)\n"
    "print('third')\n"
    "'done'"
)


async def test_output_lines_are_told_as_the_guest_writes_them(
    sandbox: SandboxClient, backend: Backend, request: pytest.FixtureRequest
) -> None:
    streams = request.node.callspec.params["backend"] != "workerd"
    context = await sandbox.interpreter.create_code_context("PYTHON")
    told: list[tuple[str, str, float]] = []
    result = await sandbox.interpreter.run_code(
        CODE,
        context=context,
        on_stdout=lambda line: told.append(("stdout", line, time.monotonic())),
        on_stderr=lambda line: told.append(("stderr", line, time.monotonic())),
    )
    ended = time.monotonic()
    assert result.error is None
    assert result.stdout == ["first", "third"] and result.stderr == ["second"]
    lines = [(stream, text) for stream, text, _ in told]
    if streams:
        assert lines == [("stdout", "first"), ("stderr", "second"), ("stdout", "third")]
        assert ended - told[0][2] > 1.0, "the first line waited for the end of the run"
    else:
        assert lines == [("stdout", "first"), ("stdout", "third"), ("stderr", "second")]


async def test_async_callbacks_are_awaited_before_run_code_returns(
    sandbox: SandboxClient,
) -> None:
    context = await sandbox.interpreter.create_code_context("PYTHON")
    seen: list[str] = []

    async def keep(line: str) -> None:
        seen.append(line)

    result = await sandbox.interpreter.run_code(
        "for i in range(3): print(i)", context=context, on_stdout=keep
    )
    assert seen == ["0", "1", "2"] == result.stdout
