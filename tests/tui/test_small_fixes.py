"""Small review fixes: the info panel's file count, one Quit in the palette (the
workbench's), preparing the active REPL's engine from the palette, the focus of a context
just opened, and the env vars' count."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widgets import OptionList, Static, TextArea

from tests.tui.test_file_editing import write_files
from tests.tui.test_flows import Notifications, make_app, panel_text
from tour import WorkbenchPilot, create_context, create_sandbox, until_connected, wait_for
from workbench.api import short_id
from workbench.api.display import human_bytes
from workbench.tui.app import WorkbenchApp
from workbench.tui.messages import ContextOpened
from workbench.tui.palette_commands import workbench_commands
from workbench.tui.screens.create_context_screen import CreateContextScreen
from workbench.tui.widgets.env_vars_input import EnvVarsInput
from workbench.tui.widgets.workbench_tabs import INFO_TAB

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def palette_entries(pilot: WorkbenchPilot, app: WorkbenchApp) -> list[str]:
    """What the command palette lists before anything is typed (title, then help)."""
    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
    options = app.screen.query_one(OptionList)
    await wait_for(pilot, lambda: options.option_count > 5)
    await pilot.pause(0.3)
    entries = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
    await pilot.press("escape")
    return entries


async def test_the_info_panel_counts_entries_as_entries(tmp_path: Path) -> None:
    """The workspace's count is of files and directories (spec 8): QA saw an empty folder
    counted as "1 file"."""
    await write_files(tmp_path, {"only.txt": b"x"})
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        main.connection.load_sandbox_info("demo")
        main.show_tab(INFO_TAB)
        await wait_for(pilot, lambda: main.info_panel.info is not None)
        text = panel_text(app)
        assert "Workspace  1 entry, 1 B" in text
        assert main.backend is not None
        await main.backend.sandbox("demo").mkdir("/workspace/empty")
        main.connection.load_sandbox_info("demo")
        await wait_for(pilot, lambda: "Workspace  2 entries, 1 B" in panel_text(app))


async def test_a_context_s_snapshot_shows_its_size_as_the_cli_does(tmp_path: Path) -> None:
    """QA: the info panel showed each snapshot's `storedBytes` (the same for every one),
    `contexts list` its `bytes`."""
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        assert main.backend is not None
        await main.backend.sandbox("demo").interpreter.run_code("1", context=repl.context)
        main.connection.load_sandbox_info("demo")
        main.show_tab(INFO_TAB)
        info = main.info_panel
        await wait_for(pilot, lambda: info.info is not None and info.info.contexts[0].snapshot)
        assert info.info is not None
        snapshot = info.info.contexts[0].snapshot
        assert snapshot is not None and snapshot.bytes != snapshot.stored_bytes
        row = next(
            line for line in panel_text(app).splitlines() if short_id(repl.context.id) in line
        )
        assert row.rstrip().endswith(human_bytes(snapshot.bytes))
        assert human_bytes(snapshot.stored_bytes) not in row


async def test_the_palette_lists_one_quit_the_workbenchs(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 60)) as pilot:
        await until_connected(pilot)
        entries = await palette_entries(pilot, app)
        quits = [entry for entry in entries if entry.splitlines()[0] == "Quit"]
        assert quits == ["Quit\n^q · app.quit"]


async def test_prepare_engine_on_a_repl_tab_prepares_its_language(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    main = app.main_screen
    prepared: list[str] = []
    monkeypatch.setattr(
        main.connection, "prepare_engine", lambda backend, language: prepared.append(language)
    )
    async with app.run_test(size=(120, 60)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: main.runtimes_table.row_count > 1)
        bindings = [runtime.binding for runtime in main.runtimes]
        main.runtimes_table.move_cursor(row=bindings.index("JAVASCRIPT"))
        titles = [command.title for command in workbench_commands(app)]
        assert "Prepare the local engine of the selected runtime JAVASCRIPT (javascript)" in titles

        await pilot.press("f2", *"demo", "enter")
        await wait_for(pilot, lambda: "demo" in main.sandbox_infos)
        await create_context(pilot, "PERL")
        commands = {command.title: command for command in workbench_commands(app)}
        assert "Prepare the local engine of the PERL tab (perl)" in commands
        await commands["Prepare the local engine of the PERL tab (perl)"].callback()
        assert prepared == ["perl"]


async def test_the_sidebar_hides_and_the_tabs_take_its_room(tmp_path: Path) -> None:
    """At 80 columns the tree leaves a REPL little room: ctrl+b hides it (the focus goes to
    the tabs' content), ctrl+b or ctrl+t (which also focuses it) shows it again."""
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(80, 24)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        tabs_width = main.tabs.size.width
        main.sandbox_tree.focus()
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert not main.sandbox_tree.display
        assert main.tabs.size.width > tabs_width
        assert repl.code_input.has_focus
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert main.sandbox_tree.display and main.tabs.size.width == tabs_width
        await pilot.press("ctrl+b", "ctrl+t")
        await pilot.pause()
        assert main.sandbox_tree.display and main.sandbox_tree.has_focus


async def test_an_opened_context_has_the_focus_as_soon_as_its_editor_shows(
    tmp_path: Path,
) -> None:
    """Keys typed the moment the editor appears land in it: the focus moves in the same
    step that shows the tab, not on a later message (tmux typed into the tree)."""
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        main.sandbox_tree.focus()
        await pilot.pause()
        assert app.backend is not None
        context = await app.backend.sandbox("demo").interpreter.create_code_context("PERL")
        await main.context_opened(ContextOpened("demo", context, []))
        repl = main.tabs.repl_for(context.id)
        assert repl is not None and main.active_repl is repl
        assert app.focused is repl.code_input  # where keys go (has_focus follows an event)

        # Asked again before the first answer came (a double Enter): the open tab is shown
        # and focused, and nothing is added or raised.
        main.sandbox_tree.focus()
        await pilot.pause()
        await app.backend.sandbox("demo").interpreter.run_code("1", context=context.id)
        past = await app.backend.sandbox("demo").interpreter.history(context.id)
        assert past
        await main.context_opened(ContextOpened("demo", context, [], past))
        assert main.tabs.repl_for(context.id) is repl and app.focused is repl.code_input
        assert len(main.tabs.repls) == 1


async def test_the_env_vars_count_says_variable_or_variables(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, CreateContextScreen))
        env_input = app.screen.query_one(EnvVarsInput)
        count = env_input.query_one(".env-problems", Static)
        assert str(count.render()) == "✓ 0 variables"
        env_input.query_one(TextArea).text = "ONE=1"
        await wait_for(pilot, lambda: str(count.render()) == "✓ 1 variable")
        env_input.query_one(TextArea).text = "ONE=1\nTWO=2"
        await wait_for(pilot, lambda: str(count.render()) == "✓ 2 variables")
        # Thousands of bad lines (pasted hostile values): five named, the rest counted,
        # where every problem was laid out at every key (1.5 s a key for 5,000 lines).
        env_input.query_one(TextArea).text = "\n".join(f"{n}=bad" for n in range(5000))
        await wait_for(pilot, lambda: "more problems" in str(count.render()))
        lines = str(count.render()).splitlines()
        assert lines[0] == "line 1: key '0' must match ^[A-Za-z_][A-Za-z0-9_]*$"
        assert len(lines) == 6 and lines[5] == "… 4,995 more problems"


async def test_f2_with_the_id_of_a_sandbox_that_exists_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It selected the sandbox and said nothing, as if it had made a new one (found by
    QA)."""
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "demo")
        assert not any("exists already" in message for message, _, _ in notes.calls)
        await pilot.press("f2")
        await pilot.press(*"demo", "enter")
        await wait_for(pilot, lambda: any("exists already" in m for m, _, _ in notes.calls))
        assert app.main_screen.selected_sandbox_id == "demo"
