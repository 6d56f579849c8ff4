"""A context's transcript: a virtualized log of cells, searchable and copyable."""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple, Self

from rich.console import RenderableType
from textual.geometry import Size
from textual.strip import Strip
from textual.widgets import RichLog

from workbench.config import Prices
from workbench.tui.transcript_cell import TranscriptCell, render_cell

REFLOW_MAX_LINES = 3000
"""Up to this many lines, the transcript is rendered again when its width changes (about
0.3 s at most); a longer one keeps the widths its lines were written at, as rendering it
all again would stall the app on every resize or inspector toggle."""


class FindMatch(NamedTuple):
    """A line found by `Transcript.find_next`: its index, and its place (from 1) among
    the `total` lines that match."""

    line: int
    position: int
    total: int


class Transcript(RichLog):
    """Cells rendered into lines, again when the width changes (up to
    `REFLOW_MAX_LINES`); only the visible lines are painted, so long outputs (10,000+
    lines) stay fast."""

    HELP = """\
## Transcript

Every run of this context: input, stdout, *stderr*, results, errors and a footer
with duration, fuel, memory and execution count. *Find in transcript* searches it;
*Copy cell* / *Copy result* copy the current cell (the last one, or the last match);
*Copy from a cell* picks any cell, with a preview, and copies its code, output or result.
A cell past 12,000 lines or 256 KiB is shown clipped; copies and exports hold all of
it.
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
        self._cell_written: TranscriptCell | None = None
        """The cell the write in progress renders (None: a note)."""
        self._waiting_writes: deque[bool] = deque()
        """For each write waiting for the log's size: whether it is a cell."""
        self._written: list[TranscriptCell | RenderableType | object] = []
        """Every write in order, a cell as itself (rendered again from it)."""
        self._rendered_width = 0
        """The width every line was rendered for (0: none yet)."""
        self._mixed_widths = False
        """Some lines were rendered for another width (the pane was hidden, or narrower)."""
        self._reflow_pending = False

    def add_cell(self, cell: TranscriptCell) -> None:
        self.cells.append(cell)
        self.current_cell_index = len(self.cells) - 1
        self._write_cell(cell)

    def _write_cell(self, cell: TranscriptCell) -> None:
        self._cell_written = cell
        try:
            self.write(
                render_cell(cell, show_measurements=self.show_measurements, prices=self.prices)
            )
        finally:
            self._cell_written = None

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
        writing_cell = self._cell_written is not None
        rendered = len(self.lines) != lines_before
        replayed = rendered and bool(self._waiting_writes)
        if not replayed:
            self._written.append(self._cell_written or content)
        if not rendered:
            self._waiting_writes.append(writing_cell)
            return self
        self._note_width(self.scrollable_content_region.width)
        is_cell = self._waiting_writes.popleft() if replayed else writing_cell
        if is_cell:
            self.cell_start_lines.append(lines_before)
        return self

    def _note_width(self, width: int) -> None:
        """Lines were just rendered for `width` (0: while hidden, at the minimum width,
        which is never the width the transcript is shown at)."""
        if not width:
            self._mixed_widths = True
        elif not self._rendered_width:
            self._rendered_width = width
        elif width != self._rendered_width:
            self._mixed_widths = True

    @property
    def fits_its_width(self) -> bool:
        """Every line is rendered for the width the transcript has now (or it is hidden,
        or past `REFLOW_MAX_LINES`, where lines keep their widths)."""
        width = self.scrollable_content_region.width
        if not width or len(self.lines) > REFLOW_MAX_LINES:
            return True
        return not (self._mixed_widths or self._reflow_pending) and width == self._rendered_width

    def render_line(self, y: int) -> Strip:
        # Painted at a width its lines were not rendered for (a resize, the inspector
        # taking room, a tab shown after a write while hidden): rendered again. A paint is
        # the one sure sign; a Resize is not always delivered when a sibling takes room.
        self._reflow_if_needed()
        return super().render_line(y)

    def _reflow_if_needed(self) -> None:
        width = self.scrollable_content_region.width
        stale = self._mixed_widths or (self._rendered_width and width != self._rendered_width)
        if not width or not stale or self._reflow_pending or len(self.lines) > REFLOW_MAX_LINES:
            return
        self._reflow_pending = True
        self.call_later(self._reflow)

    def _reflow(self) -> None:
        """Render every write again at the current width; the view keeps its end, or its
        place in the cell at its top."""
        self._reflow_pending = False
        width = self.scrollable_content_region.width
        if not width or len(self.lines) > REFLOW_MAX_LINES:
            return
        # At the end, give or take the line a horizontal scrollbar took when it narrowed.
        at_end = self.max_scroll_y - self.scroll_y <= 1
        top = round(self.scroll_y)
        top_cell = self._cell_at_line(top)
        old_span = self._cell_span(top_cell) if top_cell is not None else None
        self._render_again()
        if at_end or top_cell is None or old_span is None:
            self.scroll_end(animate=False, immediate=True)
            return
        old_start, old_length = old_span
        new_start, new_length = self._cell_span(top_cell)
        within = round((top - old_start) * new_length / max(1, old_length))
        self.scroll_to(y=new_start + within, animate=False, immediate=True)

    def _render_again(self) -> None:
        """Render every write again, in order, at the current width (or when the log has
        a size, if it has none yet)."""
        written, self._written = self._written, []
        self.clear()
        self._waiting_writes.clear()
        self.cell_start_lines = []
        self._search_line = -1
        self._rendered_width = self.scrollable_content_region.width
        self._mixed_widths = False
        self._write_again(written)

    def _write_again(self, written: list[TranscriptCell | RenderableType | object]) -> None:
        """Write `written` (earlier writes, in order) again at the current width."""
        for item in written:
            if isinstance(item, TranscriptCell):
                self._write_cell(item)
            else:
                self.write(item, scroll_end=False)

    def insert_before(
        self,
        cell: TranscriptCell | RenderableType | None,
        items: Sequence[TranscriptCell | RenderableType],
    ) -> None:
        """Put `items` (cells and notes) before `cell` (a cell, or a note written), or
        after the last write when `cell` is None or no longer shown; the transcript is
        rendered again from `cell` on (all of it when some lines wait or are at another
        width, or `cell` is a note), its end in view."""
        if cell is not None and not isinstance(cell, TranscriptCell):
            self._insert_before_note(cell, items)
            return
        at = next((index for index, shown in enumerate(self.cells) if shown is cell), None)
        if at is None:
            for item in items:
                if isinstance(item, TranscriptCell):
                    self.add_cell(item)
                else:
                    self.write(item)
            return
        every_cell_rendered = len(self.cell_start_lines) == len(self.cells)
        cells = [item for item in items if isinstance(item, TranscriptCell)]
        self.cells[at:at] = cells
        if self.current_cell_index is not None and self.current_cell_index >= at:
            self.current_cell_index += len(cells)
        where = next(index for index, item in enumerate(self._written) if item is cell)
        self._written[where:where] = items
        if every_cell_rendered and self.fits_its_width and not self._waiting_writes:
            # Cells are inserted before the last run or so: keep the lines above it.
            self._render_from(where, first_line=self.cell_start_lines[at], first_cell=at)
        else:
            self._render_again()
        self.scroll_end(animate=False, immediate=True)

    def cells_from(self, item: TranscriptCell | RenderableType | None) -> list[TranscriptCell]:
        """The cells written from `item` (a cell, or a note written) on; none when `item` is
        None or no longer shown."""
        where = next((index for index, shown in enumerate(self._written) if shown is item), None)
        if item is None or where is None:
            return []
        return [shown for shown in self._written[where:] if isinstance(shown, TranscriptCell)]

    def _insert_before_note(
        self, note: RenderableType, items: Sequence[TranscriptCell | RenderableType]
    ) -> None:
        where = next((index for index, item in enumerate(self._written) if item is note), None)
        if where is None:
            self.insert_before(None, items)
            return
        at = sum(1 for item in self._written[:where] if isinstance(item, TranscriptCell))
        every_cell_rendered = len(self.cell_start_lines) == len(self.cells)
        cells = [item for item in items if isinstance(item, TranscriptCell)]
        self.cells[at:at] = cells
        if self.current_cell_index is not None and self.current_cell_index >= at:
            self.current_cell_index += len(cells)
        self._written[where:where] = items
        # A note's first line is not kept: rendered again from the cell before it.
        before = at - 1
        if before >= 0 and every_cell_rendered and self.fits_its_width and not self._waiting_writes:
            start = next(
                index for index, item in enumerate(self._written) if item is self.cells[before]
            )
            self._render_from(start, first_line=self.cell_start_lines[before], first_cell=before)
        else:
            self._render_again()
        self.scroll_end(animate=False, immediate=True)

    def replace_cell(self, cell: TranscriptCell, new: TranscriptCell) -> None:
        """Show `new` in place of `cell` (rendered again from it on); nothing if `cell` is
        not shown."""
        at = next((index for index, shown in enumerate(self.cells) if shown is cell), None)
        if at is None:
            return
        self.cells[at] = new
        where = next(index for index, item in enumerate(self._written) if item is cell)
        self._written[where] = new
        every_cell_rendered = len(self.cell_start_lines) == len(self.cells)
        if every_cell_rendered and self.fits_its_width and not self._waiting_writes:
            self._render_from(where, first_line=self.cell_start_lines[at], first_cell=at)
        else:
            self._render_again()

    def _render_from(self, where: int, *, first_line: int, first_cell: int) -> None:
        """Render the writes from `where` on again, in place of the lines from
        `first_line` on (where cell `first_cell`, the first of them, starts)."""
        written, self._written = self._written[where:], self._written[:where]
        del self.lines[first_line:]
        del self.cell_start_lines[first_cell:]
        self._line_cache.clear()
        self._search_line = -1
        self._widest_line_width = max((line.cell_length for line in self.lines), default=0)
        self.virtual_size = Size(self._widest_line_width, len(self.lines))
        self._write_again(written)
        self.refresh()

    def _cell_span(self, index: int) -> tuple[int, int]:
        """The first line of cell `index` and how many lines it has."""
        starts = [*self.cell_start_lines, len(self.lines)]
        return starts[index], starts[index + 1] - starts[index]

    @property
    def current_cell(self) -> TranscriptCell | None:
        if self.current_cell_index is None:
            return None
        return self.cells[self.current_cell_index]

    def find_next(self, query: str) -> FindMatch | None:
        """Scroll to the next line containing `query` (wrapping, case-insensitive): that
        line and its place among every matching line, or None."""
        needle = query.casefold()
        if not needle:
            return None
        matches = [index for index, line in enumerate(self.lines) if needle in line.text.casefold()]
        if not matches:
            return None
        position = bisect_right(matches, self._search_line) % len(matches)
        line_index = matches[position]
        self._search_line = line_index
        self.current_cell_index = self._cell_at_line(line_index)
        self.scroll_to(y=max(0, line_index - 2), animate=False)
        return FindMatch(line_index, position + 1, len(matches))

    def _cell_at_line(self, line_index: int) -> int | None:
        found = None
        for index, start in enumerate(self.cell_start_lines):
            if start <= line_index:
                found = index
        return found
