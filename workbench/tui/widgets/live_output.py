"""The running cell under the transcript: its prompt and code from the start, then its
output as the guest writes it; the finished cell replaces it."""

from __future__ import annotations

from collections import deque
from typing import Self

from rich.console import Group, RenderableType
from rich.text import Text
from textual import events
from textual.widgets import RichLog

from workbench.tui.transcript_cell import cell_input
from workbench.tui.untrusted import SHOWN_CHARS, shown

MAX_LINES = 2000
"""Lines kept while a cell runs (the output limit stops a guest long before)."""
STDERR_STYLE = "#d08770 italic"
"""The transcript's stderr colour."""


class LiveOutput(RichLog):
    """Hidden while no cell runs; stderr lines in the transcript's stderr colour. Written
    again when its width changes (a log keeps its lines as they were wrapped: a resize
    during a run cut them until the cell ended; QA)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            wrap=True,
            min_width=20,  # as the transcript (a log wraps at 78 columns at least)
            markup=False,
            highlight=False,
            auto_scroll=True,
            max_lines=MAX_LINES,
            id=id,
        )
        self._cell: RenderableType | None = None
        """The running cell's prompt and code."""
        self._lines: deque[Text] = deque(maxlen=MAX_LINES)
        """Its newest output lines, as many as the log keeps (a resize writes them again:
        2,000 writes of 2,000 lines each took 8 s; review)."""
        self._written_width = 0

    def start_cell(self, language: str, code: str, label: str | None = None) -> None:
        """Show the cell that starts running (`In [*]`, as the transcript will show it)."""
        self.clear()
        self.add_class("-visible")
        self._cell = Group(*cell_input("*", language, code, label))
        self.write(self._cell)

    def on_resize(self, event: events.Resize) -> None:
        """Before the log's own handler, which writes what waited for a first size."""
        width = self.scrollable_content_region.width
        if self._size_known and self._cell is not None and width != self._written_width:
            super().clear()
            self.write(self._cell)
            if self._lines:
                self.write(Text("\n").join(self._lines))
        self._written_width = width

    def clear(self) -> Self:
        self._cell = None
        self._lines.clear()
        return super().clear()

    def add_lines(self, lines: list[tuple[str, str]]) -> None:
        """(stream, line) pairs, in the order the guest wrote them. Only the newest
        `SHOWN_CHARS` characters are kept and shown (the finished cell shows the rest, or
        says it left it out): a log keeps 2,000 lines anyway, and a batch of 4 MiB took
        8 s to write, and as long at each resize (a helper)."""
        shown_lines = [
            shown(line[:SHOWN_CHARS], STDERR_STYLE if stream == "stderr" else "")
            for stream, line in lines[-MAX_LINES:]
        ]
        self._lines.extend(shown_lines)
        self.add_class("-visible")
        kept = sum(len(line) for line in self._lines)
        while kept > SHOWN_CHARS:
            oldest = self._lines.popleft()
            if kept - len(oldest) < SHOWN_CHARS:  # cut to fit, its end kept
                self._lines.appendleft(oldest[kept - SHOWN_CHARS :])
                kept = SHOWN_CHARS
            else:
                kept -= len(oldest)
        if sum(len(line) for line in shown_lines) > SHOWN_CHARS:
            super().clear()  # what the log shows goes too, for the batch's newest part
            if self._cell is not None:
                self.write(self._cell)
            self.write(Text("\n").join(self._lines))
        else:
            self.write(Text("\n").join(shown_lines))

    def clear_lines(self) -> None:
        self.clear()
        self.remove_class("-visible")
