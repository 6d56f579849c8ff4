"""One REPL cell (input and outcome) and its Rich rendering for the transcript.

A guest error is shown once, as documents write it (`workbench.transcripts.documents`).

Everything the guest or the backend wrote is rendered through `shown` (control
characters as `\\xNN`); the plain text for copying and exporting stays exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from rich.console import Group, RenderableType
from rich.highlighter import JSONHighlighter
from rich.syntax import Syntax
from rich.text import Text

from workbench.api import neutralise
from workbench.config import Prices
from workbench.transcripts.documents import (
    DocumentCell,
    error_header,
    error_traceback,
    result_text,
    shown_stderr,
)
from workbench.tui.formatting import execution_footer
from workbench.tui.untrusted import shown

PYGMENTS_LEXERS = {"python": "python", "javascript": "javascript", "ruby": "ruby", "perl": "perl"}

CellPart = Literal["cell", "code", "output", "result"]
"""What can be copied from a cell: all of it, its code, everything below the code, or
its result values."""


@dataclass(frozen=True)
class TranscriptCell(DocumentCell):
    """A run in the REPL's transcript."""

    label: str | None = None
    """Shown next to the prompt when the cell ran by itself (e.g. a watch run)."""
    from_another_client: bool = False
    """Another client ran it in the context (the history showed it): a dim note says so."""

    @property
    def output_text(self) -> str:
        """stdout, stderr, results and error as plain text (for copying and search)."""
        lines: list[str] = []
        if self.result is not None:
            lines.extend(self.result.stdout)
            lines.extend(shown_stderr(self.result))
            lines.extend(result_text(self.result))
            if self.result.error is not None:
                lines.extend(error_header(self.result.error))
                lines.extend(error_traceback(self.result.error))
        if self.failure is not None:
            lines.append(self.failure)
        return "\n".join(lines)

    @property
    def full_text(self) -> str:
        return f"{self.code}\n{self.output_text}".rstrip("\n")

    def part_text(self, part: CellPart) -> str:
        """The text of `part` ("" when the cell has none, e.g. no result)."""
        if part == "cell":
            return self.full_text
        if part == "code":
            return self.code
        if part == "output":
            return self.output_text
        return "\n".join(result_text(self.result)) if self.result is not None else ""


def json_text(value: object) -> Text:
    """`value` pretty-printed and highlighted like `rich.json.JSON` does. JSON escapes C0
    characters in strings (`\\u001b`) but not DEL and C1 ones: those are neutralised."""
    text = JSONHighlighter()(neutralise(json.dumps(value, indent=2, ensure_ascii=False)))
    text.no_wrap = True
    text.overflow = None
    return text


FROM_ANOTHER_CLIENT = "⇄ from another client"


def cell_input(
    number: str, language: str, code: str, label: str | None = None, *, foreign: bool = False
) -> list[RenderableType]:
    """A cell's prompt (`In [number]`, `*` while it runs; `foreign`: noting that another
    client ran it) and code."""
    prompt = Text.assemble((f"In [{number}] ", "bold cyan"), shown(language, "dim"))
    if label:
        prompt.append_text(shown(f"  ⟳ {label}", "bold magenta"))
    if foreign:
        prompt.append(f"  {FROM_ANOTHER_CLIENT}", style="dim")
    parts: list[RenderableType] = [prompt]
    if not label:  # a labelled cell's code is generated (a watch's runner): the label says it
        parts.append(
            Syntax(
                neutralise(code),  # may be history recalled from a shared `serve`
                PYGMENTS_LEXERS.get(language, "text"),
                background_color="default",
                word_wrap=True,
            )
        )
    return parts


def render_cell(
    cell: TranscriptCell, *, show_measurements: bool, prices: Prices | None = None
) -> RenderableType:
    """The cell as the transcript shows it: prompt and code, then each kind of output."""
    parts = cell_input(
        str(cell.number), cell.language, cell.code, cell.label, foreign=cell.from_another_client
    )
    result = cell.result
    if result is not None:
        if result.session is not None:
            for note in result.session.boot_notes:
                parts.append(shown(f"ⓘ {note}", "bold yellow"))
        if result.stdout:
            parts.append(shown("\n".join(result.stdout)))
        stderr = shown_stderr(result)
        if stderr:
            parts.append(shown("\n".join(stderr), "#d08770 italic"))
        for entry in result.results:
            if entry.is_json:
                parts.append(json_text(entry.json))
            else:
                parts.append(shown(entry.text or "", "bold green"))
        if result.error is not None:
            parts.append(shown("\n".join(error_header(result.error)), "bold red"))
            traceback = error_traceback(result.error)
            if traceback:
                parts.append(shown("\n".join(traceback), "red"))
        if result.session is not None:
            for note in result.session.reset_notes:  # what the error above did
                parts.append(shown(f"ⓘ {note}", "bold yellow"))
        footer = execution_footer(result, show_measurements=show_measurements, prices=prices)
        parts.append(Text(footer, style="dim"))
    if cell.failure is not None:
        parts.append(shown(cell.failure, "bold red"))
    parts.append(Text(""))
    return Group(*parts)
