"""The context inspector beside a REPL (`alt+g`): the names after every cell, read from a
copy of the context, and one value in full (Enter), a page at a time (`m`); on a Worker
gateway, only when asked (`alt+a`), as a run of the context."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import TextArea

from tests.api.conftest import fresh_id
from tests.tui.test_flows import Notifications, make_app
from tests.tui.test_other_clients import embedded_app, other_client_runs
from tests.workerd.harness import session_gateway
from tour import create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.api.inspector import PAGE_CHARS
from workbench.config import Config, RemoteProfile
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.checkpoint_picker_screen import CheckpointPickerScreen
from workbench.tui.screens.value_screen import ValueScreen
from workbench.tui.widgets.inspector_panel import RUN_CODE_HINT, InspectorPanel

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def listed(panel: InspectorPanel) -> list[tuple[str, ...]]:
    """(name, type, value) of each row the panel shows."""
    table = panel.table
    rows = []
    for row_key in table.rows:
        name, kind, _, value = table.get_row(row_key)
        cells = (name, kind, value)
        rows.append(tuple(cell.plain if isinstance(cell, Text) else str(cell) for cell in cells))
    return rows


async def test_the_inspector_follows_each_cell_and_pages_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        panel = repl.inspector
        assert not repl.inspector_shown
        await run_cell(pilot, repl, "our $n = 41; our @list = (1, 2, 3)")
        await pilot.press("alt+g")
        await wait_for(pilot, lambda: repl.inspector_shown and len(listed(panel)) == 2)
        assert listed(panel) == [("@list", "array", "[1,2,3]"), ("$n", "number", "41")]
        state = str(panel.query_one("#inspector-state").render())
        assert state == "2 names · after run 1 · a copy, nothing ran"

        # Each cell refreshes the names; inspecting counted no run.
        repl.code_input.focus()
        await run_cell(pilot, repl, 'our $long = "ab" x 10000; $n + 1')
        result = repl.transcript.cells[-1].result
        assert result is not None and result.execution_count == 2
        await wait_for(pilot, lambda: len(listed(panel)) == 3)
        assert listed(panel)[1][0] == "$long"

        # Enter on a name shows its whole value; `m` fetches the next page.
        panel.table.focus()
        panel.table.move_cursor(row=1)
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: isinstance(app.screen, ValueScreen) and bool(app.screen.query(TextArea))
        )
        screen = app.screen
        assert isinstance(screen, ValueScreen)
        text = screen.query_one(TextArea)
        assert len(text.text) == PAGE_CHARS and text.text.startswith('"abab')
        while len(text.text) < 20002:  # `m` fetches the next page, until the last
            shown = len(text.text)
            await pilot.press("m")
            await wait_for(pilot, lambda shown=shown: len(text.text) > shown)
        assert len(text.text) == 20002
        assert text.text.endswith('abab"')
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ValueScreen))

        repl.code_input.focus()
        await run_cell(pilot, repl, "$n")
        after = repl.transcript.cells[-1].result
        assert after is not None and after.execution_count == 3  # the inspections did not count
        await pilot.press("alt+g")
        assert not repl.inspector_shown
        assert not notes.errors()


@pytest.mark.usefixtures("python_engine")
async def test_a_name_holding_a_newline_is_listed_on_one_line(tmp_path: Path) -> None:
    """QA: a table cell shows the first line of its text, so `two\\nlines` read `two`."""
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PYTHON")
        await run_cell(pilot, repl, 'globals()["two\\nlines"] = "a\\tb"')
        await pilot.press("alt+g")
        await wait_for(pilot, lambda: bool(listed(repl.inspector)))
        assert listed(repl.inspector) == [("two\\x0alines", "str", "'a\\tb'")]


async def test_the_inspector_follows_a_checkpoint_restored_and_another_client_s_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: after alt+z, or another client's run shown by F5, the inspector kept the
    names of the run before."""
    app = embedded_app(tmp_path / "data")
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")
        panel = repl.inspector
        backend = app.main_screen.backend
        assert backend is not None
        await run_cell(pilot, repl, "our $n = 1")
        await backend.sandbox("shared").interpreter.save_checkpoint(repl.context, "first")
        await run_cell(pilot, repl, "our $m = 2")
        await pilot.press("alt+g")
        await wait_for(pilot, lambda: [row[0] for row in listed(panel)] == ["$m", "$n"])

        repl.code_input.focus()
        await pilot.press("alt+z")
        await wait_for(pilot, lambda: isinstance(app.screen, CheckpointPickerScreen))
        await pilot.press("enter")
        await wait_for(pilot, lambda: [row[0] for row in listed(panel)] == ["$n"])

        await other_client_runs(backend, "shared", repl, "our $z = 3")
        await pilot.press("f5")
        await wait_for(pilot, lambda: [row[0] for row in listed(panel)] == ["$n", "$z"])
        assert not notes.errors()


async def test_on_a_worker_gateway_the_inspector_runs_only_when_asked(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway Worker template in workerd cannot inspect a copy: the panel says that
    inspecting counts as a run, and runs the inspector in the context only on `alt+a`."""
    gateway = session_gateway(request)
    config = Config(
        profiles={"edge": RemoteProfile("edge", gateway.url, token_env="EDGE_TOKEN")},
        path=tmp_path / "config" / "config.toml",
    )
    config.save()
    app = WorkbenchApp(
        "edge",
        tmp_path / "data",
        backend_factory=lambda name: gateway.backend(name),
        config=config,
    )
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        main = app.main_screen
        await wait_for(pilot, lambda: not main.connection.inspects_copies)
        await create_sandbox(pilot, fresh_id())
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "our $n = 41")
        await pilot.press("alt+g")
        panel = repl.inspector
        assert repl.inspector_shown and listed(panel) == []
        assert str(panel.query_one("#inspector-state").render()) == RUN_CODE_HINT
        assert panel.query_one("#inspector-run").display

        await pilot.press("alt+a")
        await wait_for(pilot, lambda: listed(panel) == [("$n", "number", "41")])
        state = str(panel.query_one("#inspector-state").render())
        assert state == "1 names · after run 2 · the inspector ran as run 2"
        assert any("run 2 was the context inspector" in line.text for line in repl.transcript.lines)
        repl.code_input.focus()
        await run_cell(pilot, repl, "$n + 1")
        result = repl.transcript.cells[-1].result
        assert result is not None and result.execution_count == 3  # the inspection counted
        stale = str(panel.query_one("#inspector-state").render())
        assert stale.startswith(RUN_CODE_HINT) and "of an earlier run" in stale
        assert listed(panel) == [("$n", "number", "41")]  # not read again by itself
        assert not notes.errors()
