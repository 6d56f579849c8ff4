"""A context's transcript: a virtualized log of cells, searchable and copyable."""

from __future__ import annotations

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
        self.current_cell_index: int | None = None
        self._search_line = -1

    def add_cell(self, cell: TranscriptCell) -> None:
        self.cell_start_lines.append(len(self.lines))
        self.cells.append(cell)
        self.current_cell_index = len(self.cells) - 1
        self.write(render_cell(cell, show_measurements=self.show_measurements, prices=self.prices))

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
