"""The running cell's output as the guest writes it, under the transcript; the finished
cell replaces it."""

from __future__ import annotations

from textual.widgets import RichLog

from workbench.tui.untrusted import shown

MAX_LINES = 2000
"""Lines kept while a cell runs (the output limit stops a guest long before)."""


class LiveOutput(RichLog):
    """Hidden until a line arrives; stderr lines in the transcript's stderr colour."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            wrap=True, markup=False, highlight=False, auto_scroll=True, max_lines=MAX_LINES, id=id
        )

    def add_line(self, stream: str, line: str) -> None:
        self.add_class("-visible")
        self.write(shown(line, "#d08770 italic") if stream == "stderr" else shown(line))

    def clear_lines(self) -> None:
        self.clear()
        self.remove_class("-visible")
