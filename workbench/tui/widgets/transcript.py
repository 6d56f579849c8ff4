"""A context's transcript: a virtualized log of cells, searchable and copyable."""

from __future__ import annotations

from collections import deque
from typing import Self

from rich.console import RenderableType
from textual.events import Resize
from textual.timer import Timer
from textual.widgets import RichLog

from workbench.config import Prices
from workbench.tui.transcript_cell import TranscriptCell, render_cell

REFLOW_DELAY_S = 0.2
"""How long the width of a long transcript must stay put before its lines are rendered
again for it (a short one is rendered again at once)."""
LONG_TRANSCRIPT_LINES = 2000
"""From this many lines, rendering again waits for the width to stay put (while a
terminal is dragged wider, every step would render it all again)."""


class Transcript(RichLog):
    """Cells rendered into lines, again only when the width changes; only the visible
    lines are painted, so long outputs (10,000+ lines) stay fast."""

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
        self._written: list[tuple[RenderableType | object, bool]] = []
        """Every write (and whether it is a cell), to render again at another width."""
        self._rendered_width = 0
        """The width the lines were rendered for."""
        self._reflow_timer: Timer | None = None

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
        replayed = bool(self._waiting_writes)
        super().write(content, width, expand, shrink, scroll_end, animate)
        if len(self.lines) == lines_before:
            self._waiting_writes.append(self._writing_cell)
            self._written.append((content, self._writing_cell))
            return self
        self._rendered_width = self.scrollable_content_region.width
        is_cell = self._waiting_writes.popleft() if replayed else self._writing_cell
        if not replayed:
            self._written.append((content, is_cell))
        if is_cell:
            self.cell_start_lines.append(lines_before)
        return self

    def on_resize(self, event: Resize) -> None:
        # RichLog's own handler runs too (Textual calls each class's): the first size
        # renders the waiting writes.
        if not self._rendered_width or self.scrollable_content_region.width == self._rendered_width:
            return
        if self._reflow_timer is not None:
            self._reflow_timer.stop()
            self._reflow_timer = None
        if len(self.lines) < LONG_TRANSCRIPT_LINES:
            self.call_after_refresh(self._reflow)
        else:
            self._reflow_timer = self.set_timer(REFLOW_DELAY_S, self._reflow)

    def _reflow(self) -> None:
        """Render every write again at the current width (the lines keep the width they
        were rendered at: wider ones were cut, narrower ones left room)."""
        self._reflow_timer = None
        if self.scrollable_content_region.width == self._rendered_width:
            return
        # At the end, give or take the line a horizontal scrollbar took when it narrowed.
        at_end = self.max_scroll_y - self.scroll_y <= 1
        top_cell = self._cell_at_line(round(self.scroll_y))
        written, self._written = self._written, []
        self.clear()
        self.cell_start_lines = []
        self._search_line = -1
        for content, is_cell in written:
            self._writing_cell = is_cell
            self.write(content, scroll_end=False)
        self._writing_cell = False
        if at_end or top_cell is None:
            self.scroll_end(animate=False, immediate=True)
        else:  # the cell read at the top stays there
            self.scroll_to(y=self.cell_start_lines[top_cell], animate=False, immediate=True)

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
