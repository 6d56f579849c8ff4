"""One REPL cell (input and outcome) and its Rich rendering for the transcript.

A guest error is shown once, as documents write it (`workbench.transcripts.documents`).

Everything the guest or the backend wrote is rendered through `shown` (control
characters as `\\xNN`); the plain text for copying and exporting stays exact.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
from workbench.tui.highlighting import lexer_by_name
from workbench.tui.untrusted import (
    HIGHLIGHTED_CHARS,
    SHOWN_LINES,
    ShownBudget,
    clipped,
    shown,
    shown_part,
)

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


def _json_head(value: object, chars: int) -> tuple[str, bool]:
    """`value` pretty-printed, and whether that is all of it: printing stops once past
    `chars` (a 16 MiB answer took 9 s to print whole before it was clipped)."""
    pieces: list[str] = []
    length = 0
    for piece in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(value):
        pieces.append(piece)
        length += len(piece)
        if length > chars:
            return "".join(pieces), False
    return "".join(pieces), True


def json_text(value: object, budget: ShownBudget | None = None) -> list[RenderableType]:
    """`value` pretty-printed and highlighted like `rich.json.JSON` does, clipped. JSON
    escapes C0 characters in strings (`\\u001b`) but not DEL and C1 ones: those are
    neutralised."""
    if budget is not None and budget.spent:
        budget.skipped += 1
        return []
    pretty, whole = _json_head(value, (budget or ShownBudget()).chars)
    head, note = clipped(pretty, budget)
    if not whole:  # its length is not known: it was not printed to the end
        note = "… the rest of the value not shown (a copy has all)"
    text = JSONHighlighter()(neutralise(head))
    text.no_wrap = True
    text.overflow = None
    return [text] if note is None else [text, Text(note, "dim")]


FROM_ANOTHER_CLIENT = "⇄ from another client"


def cell_input(
    number: str,
    language: str,
    code: str,
    label: str | None = None,
    *,
    foreign: bool = False,
    budget: ShownBudget | None = None,
) -> list[RenderableType]:
    """A cell's prompt (`In [number]`, `*` while it runs; `foreign`: noting that another
    client ran it) and code, clipped to `budget`."""
    prompt = Text.assemble((f"In [{number}] ", "bold cyan"), shown(language, "dim"))
    if label:
        prompt.append_text(shown(f"  ⟳ {label}", "bold magenta"))
    if foreign:
        prompt.append(f"  {FROM_ANOTHER_CLIENT}", style="dim")
    parts: list[RenderableType] = [prompt]
    if label:  # a labelled cell's code is generated (a watch's runner): the label says it
        return parts
    lines_left = budget.lines if budget is not None else SHOWN_LINES
    if len(code) > HIGHLIGHTED_CHARS or code.count("\n") >= lines_left:
        return parts + shown_part(code, budget=budget)
    clipped(code, budget)  # short enough to show whole: it still takes its share
    parts.append(
        Syntax(
            neutralise(code),  # may be history recalled from a shared `serve`
            lexer_by_name(PYGMENTS_LEXERS.get(language, "text")) or "text",
            background_color="default",
            word_wrap=True,
        )
    )
    return parts


SHOWN_NOTES = 10
"""Notes on a run's REPL state shown (a runtime gives one or two; a gateway any number)."""


def session_notes(notes: Sequence[str]) -> list[RenderableType]:
    """Notes on where a run's REPL state came from, each clipped to a few lines."""
    parts: list[RenderableType] = []
    for note in notes[:SHOWN_NOTES]:
        parts += shown_part(f"ⓘ {note}", "bold yellow", ShownBudget(lines=5, chars=2000))
    if len(notes) > SHOWN_NOTES:
        parts.append(Text(f"… {len(notes) - SHOWN_NOTES:,} more notes not shown", "dim"))
    return parts


def render_cell(
    cell: TranscriptCell,
    *,
    show_measurements: bool,
    prices: Prices | None = None,
    shown_lines: int = SHOWN_LINES,
) -> RenderableType:
    """The cell as the transcript shows it: prompt and code, then each kind of output,
    `shown_lines` lines of them at most (its error's header always shows)."""
    budget = ShownBudget(lines=shown_lines)
    parts = cell_input(
        cell.shown_number,
        cell.language,
        cell.code,
        cell.label,
        foreign=cell.from_another_client,
        budget=budget,
    )
    result = cell.result
    if result is not None:
        if result.session is not None:
            parts += session_notes(result.session.boot_notes)
        if result.stdout:
            parts += shown_part("\n".join(result.stdout), budget=budget)
        stderr = shown_stderr(result)
        if stderr:
            parts += shown_part("\n".join(stderr), "#d08770 italic", budget)
        for entry in result.results:
            if entry.is_json:
                parts += json_text(entry.json, budget)
            else:
                parts += shown_part(entry.text or "", "bold green", budget)
        if result.error is not None:
            header = "\n".join(error_header(result.error))
            parts += shown_part(header, "bold red", ShownBudget(lines=min(shown_lines, 200)))
            traceback = error_traceback(result.error)
            if traceback:
                parts += shown_part("\n".join(traceback), "red", budget)
        parts += budget.skipped_note()
        if result.session is not None:
            parts += session_notes(result.session.reset_notes)  # what the error above did
        footer = execution_footer(result, show_measurements=show_measurements, prices=prices)
        parts.append(Text(footer, style="dim"))
    if cell.failure is not None:
        parts += shown_part(cell.failure, "bold red")
    parts.append(Text(""))
    return Group(*parts)
