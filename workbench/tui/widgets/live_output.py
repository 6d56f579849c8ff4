"""The running cell's output as the guest writes it, under the transcript; the finished
cell replaces it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from workbench.tui.untrusted import shown

MAX_LINES = 2000
"""Lines kept while a cell runs (the output limit stops a guest long before)."""
STDERR_STYLE = "#d08770 italic"
"""The transcript's stderr colour."""


class LiveOutput(RichLog):
    """Hidden until a line arrives; stderr lines in the transcript's stderr colour."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            wrap=True, markup=False, highlight=False, auto_scroll=True, max_lines=MAX_LINES, id=id
        )

    def add_lines(self, lines: list[tuple[str, str]]) -> None:
        """(stream, line) pairs, in the order the guest wrote them."""
        shown_lines = [
            shown(line, STDERR_STYLE) if stream == "stderr" else shown(line)
            for stream, line in lines[-MAX_LINES:]
        ]
        self.add_class("-visible")
        self.write(Text("\n").join(shown_lines))

    def clear_lines(self) -> None:
        self.clear()
        self.remove_class("-visible")
