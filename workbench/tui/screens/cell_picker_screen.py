"""Pick any cell of a transcript, with a preview, and copy its code, output or result."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from workbench.config import Prices
from workbench.tui.transcript_cell import CellPart, TranscriptCell, render_cell
from workbench.tui.untrusted import cut, shown_content

SUMMARY_WIDTH = 40
KEYS_HINT = "Enter whole cell · c code · o output · r result · Esc cancel"


@dataclass(frozen=True)
class CellCopyRequest:
    cell: TranscriptCell
    part: CellPart


def one_line(text: str) -> str:
    """`text`'s first line, stripped, cut to `SUMMARY_WIDTH` (a guest names its errors:
    one named with 20,000 lines took the picker 7 s to open)."""
    return cut(text[: SUMMARY_WIDTH * 4].strip().split("\n", 1)[0], SUMMARY_WIDTH)


def cell_summary(cell: TranscriptCell) -> str:
    """`[3] first line of the code…  ✗ NameError` for the cell list; a labelled cell (a
    watch's run) by its label: its code is generated."""
    lines = cell.code[: 64 * SUMMARY_WIDTH].splitlines()
    summary = f"[{cell.shown_number}] " + (
        f"⟳ {cell.label}"
        if cell.label
        else one_line(next((line for line in lines if line.strip()), ""))
    )
    error = cell.result.error if cell.result is not None else None
    if error is not None:
        summary += f"  ✗ {one_line(error.name)}"
    elif cell.failure is not None:
        summary += "  ✗ failed"
    return summary


PREVIEW_LINES = 500
"""Lines of a cell the preview renders (again at every move through the list)."""


class CellPickerScreen(ModalScreen[CellCopyRequest | None]):
    """The cells oldest first, `current` highlighted; the highlighted one is previewed."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel"),
        Binding("c", "copy('code')", "Copy code", id="cells.copy_code"),
        Binding("o", "copy('output')", "Copy output", id="cells.copy_output"),
        Binding("r", "copy('result')", "Copy result", id="cells.copy_result"),
    ]

    def __init__(
        self,
        cells: list[TranscriptCell],
        current: int | None,
        *,
        show_measurements: bool,
        prices: Prices | None = None,
    ) -> None:
        super().__init__()
        self.cells = cells
        self.current = current if current is not None else len(cells) - 1
        self.show_measurements = show_measurements
        self.prices = prices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide", id="cell-picker"):
            yield Label("Copy from a cell", classes="dialog-title")
            with Horizontal(id="cell-picker-body"):
                yield OptionList(
                    *[
                        Option(shown_content(cell_summary(cell)), id=str(index))
                        for index, cell in enumerate(self.cells)
                    ],
                    id="cell-list",
                )
                with VerticalScroll(id="cell-preview-scroll"):
                    yield Static("", id="cell-preview")
            yield Static(KEYS_HINT, id="cell-picker-keys", markup=False)

    def on_mount(self) -> None:
        cell_list = self.query_one("#cell-list", OptionList)
        cell_list.highlighted = self.current
        cell_list.focus()

    @property
    def highlighted_cell(self) -> TranscriptCell | None:
        index = self.query_one("#cell-list", OptionList).highlighted
        return self.cells[index] if index is not None else None

    @on(OptionList.OptionHighlighted, "#cell-list")
    def show_preview(self, event: OptionList.OptionHighlighted) -> None:
        cell = self.cells[event.option_index]
        preview = render_cell(
            cell,
            show_measurements=self.show_measurements,
            prices=self.prices,
            shown_lines=PREVIEW_LINES,
        )
        self.query_one("#cell-preview", Static).update(preview)
        self.query_one("#cell-preview-scroll", VerticalScroll).scroll_home(animate=False)

    @on(OptionList.OptionSelected, "#cell-list")
    def copy_whole_cell(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(CellCopyRequest(self.cells[event.option_index], "cell"))

    def action_copy(self, part: CellPart) -> None:
        cell = self.highlighted_cell
        if cell is not None:
            self.dismiss(CellCopyRequest(cell, part))
