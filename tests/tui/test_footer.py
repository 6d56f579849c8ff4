"""The footer shows the keys that fit whole, at any width (at 80 columns Textual's own
footer ended in the middle of a word); the rest are in the palette and the help."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._footer import FooterKey

from tests.tui.test_flows import make_app
from tour import WorkbenchPilot, create_sandbox, main_screen, until_connected, wait_for
from workbench.tui.messages import ContextOpened
from workbench.tui.widgets.workbench_footer import WorkbenchFooter, key_width

pytestmark = pytest.mark.usefixtures("tui_dirs")


def shown_keys(footer: WorkbenchFooter) -> list[str]:
    return [key.key_display for key in footer.query(FooterKey)]


async def footer_with_a_sandbox(pilot: WorkbenchPilot) -> WorkbenchFooter:
    """The footer once a sandbox is open and its keys are shown."""
    await until_connected(pilot)
    await create_sandbox(pilot)
    footer = main_screen(pilot).query_one(WorkbenchFooter)
    await wait_for(pilot, lambda: "f8" in shown_keys(footer))
    return footer


async def test_the_footer_keeps_only_whole_keys(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 30)) as pilot:
        footer = await footer_with_a_sandbox(pilot)
        wide = shown_keys(footer)
        assert wide == ["^q", "f1", "f2", "f3", "f4", "f5", "f8", "f9", "^l", "^p"]

        await pilot.resize_terminal(80, 24)
        await wait_for(
            pilot, lambda: footer.composed_width == 80 and "f8" not in shown_keys(footer)
        )
        await pilot.pause()
        narrow = shown_keys(footer)
        assert narrow == ["^q", "f1", "f2", "f3", "f4", "^p"]
        keys = list(footer.query(FooterKey))
        assert sum(key_width(key) for key in keys) <= 80
        # Each key as wide as it was counted: none is cut.
        assert [key.outer_size.width for key in keys] == [key_width(key) for key in keys]

        await pilot.resize_terminal(160, 30)
        await wait_for(pilot, lambda: shown_keys(footer) == wide)


async def test_the_footer_rebuilds_its_keys_only_when_they_change(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 30)) as pilot:
        footer = await footer_with_a_sandbox(pilot)
        keys = list(footer.query(FooterKey))

        # What a change of focus does: the screen's bindings are announced again.
        app.main_screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert list(footer.query(FooterKey)) == keys
        assert all(key.is_attached for key in keys)

        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: "f8" not in shown_keys(footer))
        assert not any(key.is_attached for key in keys)


async def test_with_a_repl_open_its_run_and_cancel_keys_come_first(tmp_path: Path) -> None:
    """A REPL's run and cancel keys come right after Quit and Help: behind the sandbox's
    keys they were cut off at 120 columns, so a running cell's cancel key was nowhere on
    screen."""
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        footer = await footer_with_a_sandbox(pilot)
        assert app.backend is not None
        context = await app.backend.sandbox("demo").interpreter.create_code_context("PERL")
        await app.main_screen.context_opened(ContextOpened("demo", context, []))
        await wait_for(pilot, lambda: "^g" in shown_keys(footer))
        assert shown_keys(footer)[:4] == ["^q", "f1", "^r", "^g"]
