"""Every global function-key binding works while the REPL's code editor has focus."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import textual.screen
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip

from tests.tui.test_file_editing import open_file, write_files
from tests.tui.test_flows import Notifications, make_app
from tour import (
    WorkbenchPilot,
    create_context,
    create_sandbox,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import SandboxClient, ValidationFailedError
from workbench.backends.local import open_local_backend
from workbench.tui.key_bindings import WORKBENCH_BINDINGS
from workbench.tui.palette_commands import workbench_commands
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.create_context_screen import CreateContextScreen
from workbench.tui.screens.create_sandbox_screen import CreateSandboxScreen
from workbench.tui.screens.env_vars_screen import EnvVarsScreen
from workbench.tui.screens.help_screen import HelpScreen
from workbench.tui.screens.profile_picker_screen import ProfilePickerScreen
from workbench.tui.screens.watch_screen import WatchRequest, WatchScreen
from workbench.tui.widgets.code_input import is_function_key
from workbench.tui.widgets.workbench_tabs import INFO_TAB, RUNTIMES_TAB, repl_tab_id

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def opens(pilot: WorkbenchPilot, key: str, screen: type[Screen[Any]]) -> None:
    """`key` opens the dialog `screen`; Escape closes it again."""
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, screen), timeout=5)
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, screen), timeout=5)


async def test_function_keys_work_while_the_editor_has_focus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    app = make_app(tmp_path)
    main = app.main_screen
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        perl_row = [runtime.binding for runtime in main.runtimes].index("PERL")
        main.runtimes_table.move_cursor(row=perl_row)

        async def in_the_editor(check: Callable[[], Awaitable[None]]) -> None:
            main.tabs.active = repl_tab_id(repl.context.id)
            repl.code_input.focus()
            await wait_for(pilot, lambda: repl.code_input.has_focus, timeout=5)
            await check()

        async def f5_refreshes() -> None:
            assert app.backend is not None
            await app.backend.sandbox("made-elsewhere").get_info()  # not through the app
            await pilot.press("f5")
            await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("made-elsewhere"))

        async def f2_creates_and_shows_the_sandbox() -> None:
            await pilot.press("f2")
            await wait_for(pilot, lambda: isinstance(app.screen, CreateSandboxScreen))
            await pilot.press(*"second", "enter")
            await wait_for(pilot, lambda: "second" in main.sandbox_infos)
            await pilot.pause(0.2)
            assert main.tabs.active == INFO_TAB
            assert main.info_panel.info is not None and main.info_panel.info.id == "second"

        async def f7_prepares_the_selected_engine() -> None:
            await pilot.press("f7")
            await wait_for(pilot, lambda: any(t == "Engine prepared" for _, t, _ in notes.calls))

        async def f12_shows_the_runtimes() -> None:
            await pilot.press("f12")
            await pilot.pause(0.2)
            assert main.tabs.active == RUNTIMES_TAB
            assert main.runtimes_table.has_focus  # arrows then pick the runtime for f7

        async def shift_f6_stops_watching() -> None:
            main.start_watch("demo", None, WatchRequest(folder, "/workspace", None))
            await wait_for(pilot, lambda: main.status.watch_state == "watching")
            await pilot.press("shift+f6")
            await wait_for(pilot, lambda: main.folder_watch.active is None, timeout=5)

        checks: dict[str, Callable[[], Awaitable[None]]] = {
            "f1": lambda: opens(pilot, "f1", HelpScreen),
            "f2": f2_creates_and_shows_the_sandbox,
            "f3": lambda: opens(pilot, "f3", CreateContextScreen),
            "f4": lambda: opens(pilot, "f4", EnvVarsScreen),
            "f5": f5_refreshes,
            "f6": lambda: opens(pilot, "f6", WatchScreen),
            "shift+f6": shift_f6_stops_watching,
            "f7": f7_prepares_the_selected_engine,
            "f8": lambda: opens(pilot, "f8", ConfirmScreen),
            "f9": lambda: opens(pilot, "f9", ProfilePickerScreen),
            "f12": f12_shows_the_runtimes,
        }
        function_keys = {
            key
            for binding in WORKBENCH_BINDINGS
            for key in binding.key.split(",")
            if is_function_key(key)
        }
        assert set(checks) == function_keys  # a new function key needs its check here
        for check in checks.values():
            await in_the_editor(check)


async def destroy_question(pilot: WorkbenchPilot, *keys: str) -> str:
    """The question the keys' destroy dialog asks (Escape closes it, destroying nothing)."""
    await pilot.press(*keys)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), timeout=5)
    question = str(pilot.app.screen.question)  # type: ignore[attr-defined]
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, ConfirmScreen), timeout=5)
    return question


async def test_sandbox_keys_act_on_the_tree_cursors_sandbox_while_the_tree_has_focus(
    tmp_path: Path,
) -> None:
    """F8 (as F3, F4, F6 and their palette commands) acts on the sandbox under the tree's
    cursor while the tree has the focus, else on the active REPL's or file's: it took the
    active REPL's over the tree's, and the tree's over an active file's."""
    await write_files(tmp_path, {"notes.txt": b"text"})  # in demo
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        await backend.sandbox("w1").get_info()
    app = make_app(tmp_path)
    main = app.main_screen
    tree = main.sandbox_tree
    palette = ("ctrl+p", *"Destroy sandbox", "enter")

    async def tree_on(sandbox_id: str) -> None:
        tree.focus()
        tree.move_cursor(tree.sandbox_node(sandbox_id))
        await wait_for(pilot, lambda: main.highlighted_sandbox_id == sandbox_id, timeout=5)

    async with app.run_test(size=(140, 40)) as pilot:
        view = await open_file(pilot, app, "notes.txt")
        await tree_on("w1")
        for keys in [("f8",), palette]:
            assert (await destroy_question(pilot, *keys)).startswith("Destroy sandbox w1 ")
        view.focus_content()
        for keys in [("f8",), palette]:
            assert (await destroy_question(pilot, *keys)).startswith("Destroy sandbox demo ")

        await tree_on("demo")
        repl = await create_context(pilot, "PERL")
        assert repl.sandbox_id == "demo"
        await pilot.press("ctrl+t")
        await tree_on("w1")
        for keys in [("f8",), palette]:
            assert (await destroy_question(pilot, *keys)).startswith("Destroy sandbox w1 ")
        repl.code_input.focus()
        for keys in [("f8",), palette]:
            assert (await destroy_question(pilot, *keys)).startswith("Destroy sandbox demo ")

        # On the profile's root the tree names no sandbox: F8 there offered to destroy the
        # one the cursor had just left, whose info the panel still showed.
        await tree_on("demo")
        await wait_for(pilot, lambda: main.info_panel_sandbox == "demo", timeout=5)
        tree.move_cursor(tree.root)
        await wait_for(pilot, lambda: main.highlighted_sandbox_id is None, timeout=5)
        assert main.info_panel.info is None
        await pilot.press("f8")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmScreen)
        assert "Destroy sandbox" not in {command.title for command in workbench_commands(app)}
        await tree_on("demo")
        assert main.info_panel_sandbox == "demo"  # its info, cached, shown again
        assert (await destroy_question(pilot, "f8")).startswith("Destroy sandbox demo ")


async def test_tab_keys_cycle_the_tabs_and_ctrl_t_focuses_the_tree(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        first = await create_context(pilot, "PERL")
        second = await create_context(pilot, "PERL")
        order = [INFO_TAB, RUNTIMES_TAB, repl_tab_id(first.context.id)]
        order.append(repl_tab_id(second.context.id))
        second.code_input.focus()
        await wait_for(pilot, lambda: main.tabs.active == order[3] and second.code_input.has_focus)
        focus_after = [main.sandbox_tree, main.runtimes_table, first.code_input, second.code_input]
        for step in range(len(order)):  # from the last tab on: wraps around to the first
            await pilot.press("ctrl+pagedown")
            await pilot.pause(0.1)
            assert main.tabs.active == order[step], (step, order, main.tabs.active)
            assert focus_after[step].has_focus, (step, app.focused)
        await pilot.press("ctrl+pageup")
        await pilot.pause(0.1)
        assert main.tabs.active == order[2] and first.code_input.has_focus
        await pilot.press("ctrl+t")
        await pilot.pause(0.1)
        assert main.sandbox_tree.has_focus
        titles = {command.title for command in workbench_commands(app)}
        assert {"Show the next tab", "Show the previous tab", "Focus the sandbox tree"} <= titles


def test_every_alt_binding_arrives_as_itself_from_a_terminal() -> None:
    """Terminals that send alt as ESC (xterm, tmux) send `ESC b` for alt+b, which Textual's
    parser reads as ctrl+left (and `ESC f` as ctrl+right): such a binding never fires.
    Each default alt+letter binding must parse back to itself."""
    from textual import constants
    from textual._xterm_parser import XTermParser  # the parser the app reads the terminal with

    for binding in WORKBENCH_BINDINGS:
        for key in binding.key.split(","):
            modifier, _, letter = key.strip().partition("+")
            if modifier != "alt" or len(letter) != 1:
                continue
            parser = XTermParser()
            events = list(parser.feed(f"\x1b{letter}"))
            time.sleep(constants.ESCAPE_DELAY + 0.05)  # past its wait for more of a sequence
            events += list(parser.tick())
            keys = [getattr(event, "key", None) for event in events]
            assert keys == [key.strip()], (binding.id, keys)


async def test_a_sandbox_the_backend_refuses_to_make_is_not_the_one_keys_act_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: after F2 with an id a gateway refused (`..`), F3, F4 and F8 acted on that id
    (F8 offered to destroy it) though no such sandbox existed: it was highlighted before
    it was made. It is now highlighted once made."""
    original = SandboxClient.get_info

    async def refusing(self: SandboxClient) -> Any:
        if self.id == "refused":
            raise ValidationFailedError("Sandbox ID 'refused' cannot travel in a gateway's URL")
        return await original(self)

    monkeypatch.setattr(SandboxClient, "get_info", refusing)
    app = make_app(tmp_path)
    main = app.main_screen
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "kept")
        await pilot.press("f2")
        await pilot.press(*"refused", "enter")
        await wait_for(pilot, lambda: any("Creating refused failed" in e for e in notes.errors()))
        assert main.highlighted_sandbox_id == "kept" and main.selected_sandbox_id == "kept"
        assert (await destroy_question(pilot, "f8")).startswith("Destroy sandbox kept ")


async def test_a_dialog_right_after_a_tab_closed_paints_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Textual paints the screen under a dialog from its last frame's layout, which may
    still hold a tab closed since: F3 right after ctrl+w on a loaded machine crashed the
    app (KeyError from the removed editor's paint). Frames 0.2 s apart make it so here."""
    monkeypatch.setattr(textual.screen, "UPDATE_PERIOD", 0.2)
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "demo")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "our $x = 1")
        await pilot.press("alt+g")  # the inspector beside it
        await wait_for(pilot, lambda: repl.inspector.table.row_count > 0)
        await pilot.pause(0.5)
        editor = repl.code_input
        await main.action_close_tab()
        main.action_create_context()
        await wait_for(pilot, lambda: isinstance(app.screen, CreateContextScreen))
        await pilot.pause(0.5)  # frames of the dialog over the screen without the tab
        assert app.is_running
        # Whether a frame paints it here depends on timing (found in review): painted at
        # any time now, the removed editor is blank, where TextArea raised KeyError.
        assert not editor.is_attached
        assert editor.render_lines(Region(0, 0, 12, 2)) == [Strip.blank(12)] * 2
