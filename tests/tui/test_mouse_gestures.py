"""Mouse gestures that ended the workbench through bugs of Textual 8.2.8 (mended in
`workbench.tui.app`): a click on a widget removed since the last paint, and a copy of a
selection dragged from the blank row after a text that ends in a newline."""

from __future__ import annotations

import asyncio

from textual import events
from textual.widget import Widget
from textual.widgets import Static
from textual.widgets._toast import Toast

from tests.tui.test_crafted_text import Files, read_of
from workbench.api import FileVersion
from workbench.transcripts.outcomes import Outcome
from workbench.tui.messages import CellRerun
from workbench.tui.screens.diff_screen import DiffScreen
from workbench.tui.widgets.file_view import FileView
from workbench.tui.widgets.workbench_tabs import WorkbenchTabs


def mouse_down(x: int, y: int) -> events.MouseDown:
    """A terminal's mouse-down at (x, y), as the app hands it to its screen."""
    return events.MouseDown(None, x, y, 0, 0, 1, False, False, False, screen_x=x, screen_y=y)


async def removed(widget: Widget) -> None:
    """Let the removal run, with no paint in between (Pilot waits for one: a terminal's
    events do not)."""
    for _ in range(500):
        if widget.parent is None:
            return
        await asyncio.sleep(0)
    raise AssertionError("the widget was never removed")


async def test_a_click_on_a_widget_removed_since_the_last_paint_is_ignored() -> None:
    """The compositor's map still held a closed file tab's header (alt+w) or a toast the
    click before dismissed: a mouse-down on it raised AttributeError (Textual issue 6643)."""
    app = Files()
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        tabs = app.query_one(WorkbenchTabs)
        view = FileView("demo", read_of("/workspace/report.py", "print(1)\n"), FileVersion(9, "t"))
        await tabs.add_file(view)
        await pilot.pause()
        header = view.query_one("#file-header", Static)
        x, y = header.region.x + 2, header.region.y
        tabs.close_file(view)
        await removed(header)
        app.screen._forward_event(mouse_down(x, y))
        await pilot.pause()
        assert app.is_running

        app.notify("Saved /workspace/report.py")
        await pilot.pause(0.1)
        toast = app.screen.query_one(Toast)
        x, y = toast.region.x + 3, toast.region.y + 1
        toast._expire()  # what a click on it does
        await removed(toast)
        app.screen._forward_event(mouse_down(x, y))
        await pilot.pause()
        assert app.is_running


async def test_copying_a_drag_from_the_blank_row_after_a_diff_side_copies_nothing() -> None:
    """Each side of the rerun's diff ends in a newline, so a blank row: a drag from it,
    then ctrl+c, raised IndexError (Textual issue 6708)."""
    app = Files()
    rerun = CellRerun(
        number="1",
        here="local",
        profile="staging",
        recorded=Outcome(stdout=("hello",)),
        observed=Outcome(stdout=("hello", "world")),
        earlier=0,
        earlier_diverged=0,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(DiffScreen(rerun))
        await pilot.pause()
        side = app.screen.query_one("#diff-here")
        last = side.region.height - 1
        await pilot.mouse_down(side, offset=(0, last))
        await pilot.hover(side, offset=(3, last))
        await pilot.mouse_up(side, offset=(3, last))
        await pilot.pause()
        assert app.screen.selections  # the drag selected, from past the text's end
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, DiffScreen)
