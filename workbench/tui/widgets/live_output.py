"""The running cell under the transcript: its prompt and code from the start, then its
output as the guest writes it; the finished cell replaces it."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widgets import RichLog

from workbench.tui.transcript_cell import cell_input
from workbench.tui.untrusted import SHOWN_CHARS, shown

MAX_LINES = 2000
"""Lines kept while a cell runs (the output limit stops a guest long before)."""
STDERR_STYLE = "#d08770 italic"
"""The transcript's stderr colour."""


class LiveOutput(RichLog):
    """Hidden while no cell runs; stderr lines in the transcript's stderr colour."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            wrap=True, markup=False, highlight=False, auto_scroll=True, max_lines=MAX_LINES, id=id
        )

    def start_cell(self, language: str, code: str, label: str | None = None) -> None:
        """Show the cell that starts running (`In [*]`, as the transcript will show it)."""
        self.clear()
        self.add_class("-visible")
        self.write(Group(*cell_input("*", language, code, label)))

    def add_lines(self, lines: list[tuple[str, str]]) -> None:
        """(stream, line) pairs, in the order the guest wrote them (a line past
        `SHOWN_CHARS` is cut: the finished cell shows the rest, or says it left it out)."""
        shown_lines = [
            shown(line[:SHOWN_CHARS], STDERR_STYLE if stream == "stderr" else "")
            for stream, line in lines[-MAX_LINES:]
        ]
        self.add_class("-visible")
        self.write(Text("\n").join(shown_lines))

    def clear_lines(self) -> None:
        self.clear()
        self.remove_class("-visible")
