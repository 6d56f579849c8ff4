"""Deleting a context's checkpoints from the TUI: Delete in the `alt+z` picker and the
palette's command, each confirmed in a dialog naming the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from tests.tui.test_flows import Notifications, make_app
from tour import WorkbenchPilot, create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.tui.app import WorkbenchApp
from workbench.tui.palette_commands import workbench_commands
from workbench.tui.screens.checkpoint_picker_screen import CheckpointPickerScreen
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.widgets.repl_pane import ReplPane

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def checkpoint_names(app: WorkbenchApp, repl: ReplPane) -> list[str]:
    assert app.backend is not None
    interpreter = app.backend.sandbox(repl.sandbox_id).interpreter
    listed = await interpreter.list_checkpoints(repl.context.id)
    return [checkpoint.name for checkpoint in listed.checkpoints]


async def confirm_question(pilot: WorkbenchPilot, app: WorkbenchApp) -> str:
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    return str(app.screen.query_one(".dialog-question", Static).render())


async def test_delete_in_the_picker_and_the_palette_deletes_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "our $n = 1")
        assert app.backend is not None
        interpreter = app.backend.sandbox(repl.sandbox_id).interpreter
        for name in ("first", "second"):
            await interpreter.save_checkpoint(repl.context.id, name)

        # Delete in the restore picker: the highlighted one (the newest), after asking.
        await pilot.press("alt+z")
        await wait_for(pilot, lambda: isinstance(app.screen, CheckpointPickerScreen))
        picker = app.screen
        assert "checkpoints.delete" in {
            active.binding.id for active in picker.active_bindings.values()
        }
        await pilot.press("delete")
        question = await confirm_question(pilot, app)
        assert "Delete checkpoint second of PERL" in question
        await pilot.press("escape")  # no: nothing is deleted, the picker is back
        await wait_for(pilot, lambda: app.screen is picker)
        assert await checkpoint_names(app, repl) == ["first", "second"]
        await pilot.press("delete")
        await confirm_question(pilot, app)
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: any(t == "Checkpoint deleted" for _, t, _ in notes.calls))
        assert await checkpoint_names(app, repl) == ["first"]
        assert not isinstance(app.screen, CheckpointPickerScreen | ConfirmScreen)

        # The palette's command: a picker whose Enter deletes, after asking.
        repl.code_input.focus()
        assert "Delete one of the context's checkpoints…" in {
            command.title for command in workbench_commands(app)
        }
        await pilot.press("ctrl+p")
        await pilot.press(*"Delete one of the context", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CheckpointPickerScreen))
        await pilot.press("enter")
        assert "Delete checkpoint first of PERL" in await confirm_question(pilot, app)
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: len([t for _, t, _ in notes.calls if "deleted" in t]) == 2)
        assert await checkpoint_names(app, repl) == []
        assert not notes.errors()
