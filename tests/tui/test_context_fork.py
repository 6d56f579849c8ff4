"""Forking the open REPL's context from the TUI (`alt+k`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.test_flows import make_app
from tour import create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.tui.screens.main_screen import MainScreen

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def test_alt_k_forks_the_open_context_beside_it(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        origin = await create_context(pilot, "PERL")
        await run_cell(pilot, origin, "our $n = 41")
        await pilot.press("alt+k")
        await wait_for(pilot, lambda: main.active_repl not in (None, origin))
        fork = main.active_repl
        assert fork is not None and fork.context.id != origin.context.id
        assert fork.context.binding == "PERL"
        await wait_for(pilot, lambda: len(fork.transcript.cells) == 1)
        assert fork.history == ["our $n = 41"]  # its history came along
        both = {origin.context.id, fork.context.id}
        await wait_for(pilot, lambda: listed_context_ids(main, origin.sandbox_id) == both)

        await run_cell(pilot, fork, "$n += 1")
        result = fork.transcript.cells[-1].result
        assert result is not None and result.results[0].text == "42"
        assert result.execution_count == 2
        main.open_context(origin.sandbox_id, origin.context)
        await wait_for(pilot, lambda: main.active_repl is origin)
        await run_cell(pilot, origin, "$n")
        kept = origin.transcript.cells[-1].result
        assert kept is not None and kept.results[0].text == "41"


def listed_context_ids(main: MainScreen, sandbox_id: str) -> set[str]:
    """The ids of the contexts the sandbox's loaded info lists."""
    info = main.sandbox_infos.get(sandbox_id)
    return set() if info is None else {context.id for context in info.contexts}
