"""A context's transcript: a virtualized log of cells, searchable and copyable."""

from __future__ import annotations

from collections import deque
from typing import Self

from rich.console import RenderableType
from textual.widgets import RichLog

from workbench.config import Prices
from workbench.tui.transcript_cell import TranscriptCell, render_cell


class Transcript(RichLog):
    """Cells rendered once into lines; only the visible lines are painted, so long
    outputs (10,000+ lines) stay fast."""

    HELP = """\
## Transcript

Every run of this context: input, stdout, *stderr*, results, errors and a footer
with duration, fuel, memory and execution count. *Find in transcript* searches it;
*Copy cell* / *Copy result* copy the current cell (the last one, or the last match);
*Copy from a cell* picks any cell, with a preview, and copies its code, output or result.
"""

    def __init__(
        self, *, show_measurements: bool, prices: Prices | None = None, id: str | None = None
    ) -> None:
        super().__init__(
            wrap=True, min_width=20, markup=False, highlight=False, auto_scroll=True, id=id
        )
        self.can_focus = True
        self.show_measurements = show_measurements
        self.prices = prices
        """What a cell's footer estimates its cost on Workers with (None: no estimate)."""
        self.cells: list[TranscriptCell] = []
        self.cell_start_lines: list[int] = []
        """The first line of each rendered cell (a cell written before the log has a
        size is rendered, and gets its line, when the size is known)."""
        self.current_cell_index: int | None = None
        self._search_line = -1
        self._writing_cell = False
        self._waiting_writes: deque[bool] = deque()
        """For each write waiting for the log's size: whether it is a cell."""

    def add_cell(self, cell: TranscriptCell) -> None:
        self.cells.append(cell)
        self.current_cell_index = len(self.cells) - 1
        self._writing_cell = True
        try:
            self.write(
                render_cell(cell, show_measurements=self.show_measurements, prices=self.prices)
            )
        finally:
            self._writing_cell = False

    def write(
        self,
        content: RenderableType | object,
        width: int | None = None,
        expand: bool = False,
        shrink: bool = True,
        scroll_end: bool | None = None,
        animate: bool = False,
    ) -> Self:
        """RichLog's write, noting where a cell's lines start once they exist. A write
        adds at least one line when rendered and none when it waits for the size; the
        waiting writes are rendered in order, before any later one."""
        lines_before = len(self.lines)
        super().write(content, width, expand, shrink, scroll_end, animate)
        if len(self.lines) == lines_before:
            self._waiting_writes.append(self._writing_cell)
            return self
        is_cell = self._waiting_writes.popleft() if self._waiting_writes else self._writing_cell
        if is_cell:
            self.cell_start_lines.append(lines_before)
        return self

    @property
    def current_cell(self) -> TranscriptCell | None:
        if self.current_cell_index is None:
            return None
        return self.cells[self.current_cell_index]

    def find_next(self, query: str) -> int | None:
        """Scroll to the next line containing `query` (wrapping); its line or None."""
        needle = query.casefold()
        total = len(self.lines)
        if not needle or not total:
            return None
        for offset in range(1, total + 1):
            line_index = (self._search_line + offset) % total
            if needle in self.lines[line_index].text.casefold():
                self._search_line = line_index
                self.current_cell_index = self._cell_at_line(line_index)
                self.scroll_to(y=max(0, line_index - 2), animate=False)
                return line_index
        return None

    def _cell_at_line(self, line_index: int) -> int | None:
        found = None
        for index, start in enumerate(self.cell_start_lines):
            if start <= line_index:
                found = index
        return found
