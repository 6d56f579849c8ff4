"""One context, three clients taking turns: the TUI (Pilot), `run --context` and
`watch --once --run` in processes of their own, all through the one daemon that owns
the context. Each run adds one to a counter the context keeps: every run must see the
one before it, 50 times, in every language with contexts (issue 21)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tests.cli import cli_env, run_cli
from tests.daemon import wait_for_a_run
from tour import create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.config import RUBY_CONTEXTS_ENV
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.confirm_screen import ConfirmScreen

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("all_engines")]

RUNS = 50
COUNTERS = {
    "PYTHON": (
        "main.py",
        "import builtins\nbuiltins.counter = getattr(builtins, 'counter', 0) + 1\n"
        "print(builtins.counter)",
    ),
    "PERL": ("main.pl", 'our $counter; $counter++; print "$counter\\n";'),
    "JAVASCRIPT": (
        "main.js",
        "var counter = (typeof counter === 'undefined' ? 0 : counter) + 1; console.log(counter);",
    ),
    "RUBY": ("main.rb", "$counter = ($counter || 0) + 1; puts $counter"),
}
"""Per binding: the entry file `watch` runs, and the same code as a cell: print the
context's counter after adding one (Python's entry runs in a namespace of its own, so
the counter lives where both see it)."""


@pytest.mark.parametrize("binding", list(COUNTERS))
async def test_three_clients_take_turns_in_one_context_and_lose_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binding: str
) -> None:
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_RUBY_CONTEXTS="1")  # Ruby's is an extension
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR", RUBY_CONTEXTS_ENV):
        monkeypatch.setenv(name, env[name])
    monkeypatch.chdir(tmp_path)
    entry, code = COUNTERS[binding]
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / entry).write_text(code)
    app = WorkbenchApp(data_dir=tmp_path / "data")  # the local profile: its daemon
    async with app.run_test(size=(160, 45)) as pilot:
        await until_connected(pilot)
        assert " · daemon pid " in app.main_screen.status.detail
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, binding)
        context_id = repl.context.id
        seen = []
        for step in range(1, RUNS + 1):
            if step % 3 == 1:
                await run_cell(pilot, repl, code)
                result = repl.transcript.cells[-1].result
                assert result is not None and result.error is None, result
                printed = result.stdout
            elif step % 3 == 2:
                ran = await asyncio.to_thread(
                    run_cli,
                    env,
                    "run",
                    "-s",
                    "shared",
                    "--context",
                    context_id,
                    "--json",
                    "-c",
                    code,
                )
                assert ran.returncode == 0, ran.stderr
                printed = json.loads(ran.stdout)["logs"]["stdout"]
            else:
                watched = await asyncio.to_thread(
                    run_cli,
                    env,
                    "watch",
                    str(folder),
                    "--sandbox",
                    "shared",
                    "--once",
                    "--run",
                    entry,
                    "--context",
                    context_id,
                    "--json",
                )
                assert watched.returncode == 0, watched.stderr
                (event,) = [
                    line
                    for line in map(json.loads, watched.stdout.splitlines())
                    if line["event"] == "run"
                ]
                printed = event["logs"]["stdout"]
            seen.append(printed)
        assert seen == [[str(step)] for step in range(1, RUNS + 1)]  # no update lost


async def test_closing_a_tab_cancels_its_running_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_RUBY_CONTEXTS="1")  # Ruby's is an extension
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR", RUBY_CONTEXTS_ENV):
        monkeypatch.setenv(name, env[name])
    app = WorkbenchApp(data_dir=tmp_path / "data")
    async with app.run_test(size=(160, 45)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "closing")
        repl = await create_context(pilot, "PYTHON")
        context_id = repl.context.id
        await run_cell(pilot, repl, "x = 41")
        repl.code_input.focus()
        repl.set_code("import time\ntime.sleep(600)")
        await pilot.press("ctrl+r")
        await asyncio.to_thread(wait_for_a_run, env)
        await app.action_close_tab()
        await wait_for(  # it asks first
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen) and bool(app.screen.query("#confirm")),
        )
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: app.main_screen.tabs.repl_for(context_id) is None)
        started = time.monotonic()
        after = await asyncio.to_thread(
            run_cli, env, "run", "-s", "closing", "--context", context_id, "-c", "x + 1"
        )
        assert (after.returncode, after.stdout) == (0, "42\n"), after.stderr
        assert time.monotonic() - started < 10  # not behind the abandoned sleep
