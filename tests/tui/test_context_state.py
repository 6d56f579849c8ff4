"""Forking the open REPL's context (`alt+k`) and saving and restoring its checkpoints
(`alt+p`, `alt+z`) from the TUI."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_execution import BUSY_TWO_SECONDS
from tests.tui.test_flows import Notifications, make_app, panel_text
from tour import (
    WorkbenchPilot,
    create_context,
    create_sandbox,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import Interpreter
from workbench.protocol.errors import ErrorCode, make_error
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.checkpoint_picker_screen import CheckpointPickerScreen
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.main_screen import MainScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.widgets.repl_pane import ReplPane
from workbench.tui.widgets.workbench_tabs import INFO_TAB, repl_tab_id

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def test_alt_k_forks_the_open_context_beside_it(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        origin = await create_context(pilot, "PERL")
        other = await create_context(pilot, "PERL")  # a tab after the origin's
        main.open_context(origin.sandbox_id, origin.context)
        await wait_for(pilot, lambda: main.active_repl is origin)
        await run_cell(pilot, origin, "our $n = 41")
        await pilot.press("alt+k")
        await wait_for(pilot, lambda: main.active_repl not in (None, origin))
        fork = main.active_repl
        assert fork is not None and fork.context.id != origin.context.id
        # Its tab opens beside its origin's, as the README says (it opened last; QA).
        order = [tab for tab in main.tabs.tab_ids() if tab.startswith("repl-")]
        assert order == [repl_tab_id(pane.context.id) for pane in (origin, fork, other)]
        assert fork.context.binding == "PERL"
        await wait_for(pilot, lambda: len(fork.transcript.cells) == 1)
        assert fork.history == ["our $n = 41"]  # its history came along
        every = {origin.context.id, fork.context.id, other.context.id}
        await wait_for(pilot, lambda: listed_context_ids(main, origin.sandbox_id) == every)

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


async def test_alt_b_saves_a_checkpoint_and_alt_z_goes_back_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await pilot.press("alt+z")
        await wait_for(pilot, lambda: any("No checkpoints" in title for _, title, _ in notes.calls))
        await run_cell(pilot, repl, "our $n = 41")

        await pilot.press("alt+p")
        await wait_for(pilot, lambda: isinstance(app.screen, NameScreen))
        await pilot.press(*"../x")
        accept = app.screen.query_one("#accept")
        assert accept.disabled  # checked as typed: not a checkpoint name
        app.screen.query_one("#name-input").value = ""  # type: ignore[attr-defined]
        await pilot.press(*"before", "enter")
        await wait_for(
            pilot, lambda: any(title == "Checkpoint saved" for _, title, _ in notes.calls)
        )
        saved = [message for message, title, _ in notes.calls if title == "Checkpoint saved"]
        assert saved[0].startswith("before · saved ") and " UTC · run 1 · " in saved[0]

        # The sandbox info says what the checkpoints hold of their budget.
        main = app.main_screen
        main.show_tab(INFO_TAB)
        main.connection.load_sandbox_info(repl.sandbox_id)
        usage = main.info_panel.checkpoints
        await wait_for(pilot, lambda: usage.get(repl.sandbox_id, "").startswith("1, "))
        assert usage[repl.sandbox_id].endswith(" of a 256.0 MiB budget (local and serve only)")
        assert "Checkpoints  1, " in panel_text(app)
        main.open_context(repl.sandbox_id, repl.context)
        await wait_for(pilot, lambda: main.active_repl is repl)

        repl.code_input.focus()
        await run_cell(pilot, repl, "$n = 7")
        await pilot.press("alt+z")
        await wait_for(pilot, lambda: isinstance(app.screen, CheckpointPickerScreen))
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, CheckpointPickerScreen))
        await wait_for(
            pilot,
            lambda: any(
                "restored checkpoint before" in line.text for line in repl.transcript.lines
            ),
        )
        repl.code_input.focus()
        await run_cell(pilot, repl, "$n")
        result = repl.transcript.cells[-1].result
        assert result is not None and result.results[0].text == "41"
        assert not notes.errors()


async def test_saving_under_a_checkpoint_s_name_asks_before_replacing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: alt+p under the name of a checkpoint the context had replaced it silently
    (restore and delete ask first). It now asks; no keeps the one there."""
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "our $n = 1")

        async def save_as(name: str) -> None:
            await pilot.press("alt+p")
            await wait_for(pilot, lambda: isinstance(app.screen, NameScreen))
            await pilot.press(*name, "enter")

        def saved() -> list[str]:
            return [message for message, title, _ in notes.calls if title == "Checkpoint saved"]

        await save_as("dup")
        await wait_for(pilot, lambda: len(saved()) == 1)
        repl.code_input.focus()
        await run_cell(pilot, repl, "$n = 2")
        for answer, count in (("escape", 1), ("y", 2)):  # no, then yes
            await save_as("dup")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            question = str(app.screen.question)  # type: ignore[attr-defined]
            assert question.startswith("The context has a checkpoint dup already (dup · saved ")
            assert " · run 1 · " in question
            await pilot.press(answer)
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            await wait_for(pilot, lambda count=count: len(saved()) == count)
            repl.code_input.focus()
        assert " · run 2 · " in saved()[-1]
        backend = app.main_screen.backend
        assert backend is not None
        listed = await backend.sandbox(repl.sandbox_id).interpreter.list_checkpoints(
            repl.context.id
        )
        assert [(saved.name, saved.executions) for saved in listed.checkpoints] == [("dup", 2)]


async def checkpointed_repl(
    pilot: WorkbenchPilot, app: WorkbenchApp
) -> tuple[ReplPane, Interpreter]:
    """A Perl context's tab that ran `our $a = 1` and has that state as checkpoint
    `start`, and the context's sandbox's interpreter (another client's, in the tests)."""
    await until_connected(pilot)
    await create_sandbox(pilot)
    repl = await create_context(pilot, "PERL")
    await run_cell(pilot, repl, "our $a = 1")
    backend = app.main_screen.backend
    assert backend is not None
    interpreter = backend.sandbox(repl.sandbox_id).interpreter
    await interpreter.save_checkpoint(repl.context.id, "start")
    return repl, interpreter


async def test_another_client_s_run_before_a_restore_is_shown_before_its_note(
    tmp_path: Path,
) -> None:
    """Another client ran in the context, then this tab restored a checkpoint: that run
    showed after the restore's note, as if it ran on the checkpoint (QA). It shows before
    it, in the history's order, and its input is recalled before the later ones."""
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        repl, interpreter = await checkpointed_repl(pilot, app)  # run 1: our $a = 1
        await interpreter.run_code("our $a = 7; $a", context=repl.context.id)  # another client

        main.connection.restore_checkpoint(repl.sandbox_id, repl.context, "start")
        await wait_for(
            pilot, lambda: any("restored checkpoint" in line.text for line in repl.transcript.lines)
        )
        await run_cell(pilot, repl, "$a")
        await wait_for(pilot, lambda: len(repl.transcript.cells) == 3)
        lines = [line.text for line in repl.transcript.lines]
        other = next(index for index, line in enumerate(lines) if "our $a = 7" in line)
        restored = next(index for index, line in enumerate(lines) if "restored checkpoint" in line)
        last = next(index for index, line in enumerate(lines) if line.strip() == "$a")
        assert other < restored < last, lines
        assert [cell.number for cell in repl.transcript.cells] == [1, 2, 4]
        result = repl.transcript.cells[-1].result
        assert result is not None and result.results[0].text == "1"
        assert repl.history == ["our $a = 1", "our $a = 7; $a", "$a"]


async def test_a_restore_whose_entry_is_never_read_takes_no_later_one_s_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-up that would have read this tab's first restore failed; its note then
    took the second restore's entry, and another client's later run showed before this
    tab's own earlier cell (found in review)."""
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 50)) as pilot:
        repl, interpreter = await checkpointed_repl(pilot, app)  # run 1: our $a = 1

        def restored() -> int:
            return sum("restored checkpoint" in line.text for line in repl.transcript.lines)

        main.connection.restore_checkpoint(repl.sandbox_id, repl.context, "start")  # run 2
        await wait_for(pilot, lambda: restored() == 1)
        catch_up = main.connection.catch_up
        monkeypatch.setattr(main.connection, "catch_up", lambda *args, **kwargs: None)
        await run_cell(pilot, repl, "'mine'")  # run 3: the catch-up of run 2 is lost
        monkeypatch.setattr(main.connection, "catch_up", catch_up)
        await interpreter.run_code("our $a = 9; 'other'", context=repl.context.id)  # run 4
        main.connection.restore_checkpoint(repl.sandbox_id, repl.context, "start")  # run 5
        await wait_for(pilot, lambda: restored() == 2)
        await run_cell(pilot, repl, "$a")  # run 6: the catch-up reads runs 4 and 5
        await wait_for(pilot, lambda: len(repl.transcript.cells) == 4)
        lines = [line.text for line in repl.transcript.lines]

        def at(text: str) -> list[int]:
            return [index for index, line in enumerate(lines) if text in line]

        first, second = at("restored checkpoint")
        (mine,) = at("'mine'")
        (other,) = at("'other'")
        assert first < mine < other < second, lines
        assert repl.history == ["our $a = 1", "'mine'", "our $a = 9; 'other'", "$a"]


async def test_a_cell_typed_while_a_restore_waits_comes_after_its_note(tmp_path: Path) -> None:
    """A restore waiting behind another client's run, and a cell typed meanwhile: the
    note came only after that cell (it waited for an info read queued behind the cell),
    and the restore then showed as another client's run (found in review)."""
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 50)) as pilot:
        repl, interpreter = await checkpointed_repl(pilot, app)  # run 1: our $a = 1
        other = asyncio.ensure_future(
            interpreter.run_code(BUSY_TWO_SECONDS, context=repl.context.id)  # run 2
        )
        await asyncio.sleep(0.3)
        main.connection.restore_checkpoint(repl.sandbox_id, repl.context, "start")  # run 3
        await pilot.pause(0.2)
        await run_cell(pilot, repl, "'mine'")  # run 4, typed while the restore waits
        await other
        await run_cell(pilot, repl, "$a")  # run 5: the catch-up reads runs 2 to 4
        await wait_for(pilot, lambda: len(repl.transcript.cells) >= 4)
        await pilot.pause(0.3)
        lines = [line.text for line in repl.transcript.lines]
        restored = [index for index, line in enumerate(lines) if "restored checkpoint" in line]
        mine = [index for index, line in enumerate(lines) if "'mine'" in line]
        assert len(restored) == 1 and len(mine) == 1 and restored[0] < mine[0], lines
        assert not [cell for cell in repl.transcript.cells if "restored" in cell.code]


async def test_a_restore_whose_info_read_fails_is_still_said_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The info read after a restore failed, and the tab said "Restoring the checkpoint
    failed" though the context was restored (found in review)."""
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(120, 50)) as pilot:
        repl, interpreter = await checkpointed_repl(pilot, app)
        await interpreter.run_code("our $a = 7", context=repl.context.id)
        sandbox_type = type(app.backend.sandbox(repl.sandbox_id))  # type: ignore[union-attr]

        async def unreadable(self: Any) -> Any:
            raise make_error(ErrorCode.INTERNAL_ERROR, "no info now")

        monkeypatch.setattr(sandbox_type, "get_info", unreadable)
        main.connection.restore_checkpoint(repl.sandbox_id, repl.context, "start")
        await wait_for(
            pilot, lambda: any("restored checkpoint" in line.text for line in repl.transcript.lines)
        )
        await pilot.pause(0.3)
        assert not notes.errors()
        monkeypatch.undo()
        await run_cell(pilot, repl, "$a")
        result = repl.transcript.cells[-1].result
        assert result is not None and result.results[0].text == "1"
