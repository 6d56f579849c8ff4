"""One REPL cell (input and outcome) and its Rich rendering for the transcript.

A guest error is shown once: as `Name: message` and its traceback. Lines that only
restate it are left out: a traceback line repeating `Name: message` (the Python driver
starts its traceback with it), and stderr's last lines when they are exactly the error
written out by the guest before failing (Ruby's `abort`, a log-and-re-raise, Python's
`traceback.print_exc()`). Every other stderr line is always shown.

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

from workbench.api import ExecutionError, ExecutionResult, neutralise
from workbench.tui.formatting import execution_footer
from workbench.tui.untrusted import shown

PYGMENTS_LEXERS = {"python": "python", "javascript": "javascript", "ruby": "ruby", "perl": "perl"}
PYTHON_TRACEBACK_TITLE = "Traceback (most recent call last):"

CellPart = Literal["cell", "code", "output", "result"]
"""What can be copied from a cell: all of it, its code, everything below the code, or
its result values."""


@dataclass(frozen=True)
class TranscriptCell:
    """What one run produced: a result, or why there is none (request error, cancel)."""

    number: int
    code: str
    language: str
    result: ExecutionResult | None = None
    failure: str | None = None
    label: str | None = None
    """Shown next to the prompt when the cell ran by itself (e.g. a watch run)."""

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


def result_text(result: ExecutionResult) -> list[str]:
    """Each result entry as text: JSON pretty-printed, text as is."""
    return [
        json.dumps(entry.json, indent=2, ensure_ascii=False) if entry.is_json else entry.text or ""
        for entry in result.results
    ]


def error_header(error: ExecutionError) -> list[str]:
    """`Name: message` as lines (a Ruby syntax error's message spans several)."""
    return f"{error.name}: {error.message.rstrip()}".splitlines()


def error_traceback(error: ExecutionError) -> list[str]:
    """The traceback without leading lines that repeat `error_header`."""
    header = error_header(error)
    if _same_lines(error.traceback[: len(header)], header):
        return list(error.traceback[len(header) :])
    return list(error.traceback)


def shown_stderr(result: ExecutionResult) -> list[str]:
    """stderr without a last block of lines that is exactly the error written out: its
    header and traceback, its header, its message, or Python's traceback format."""
    stderr, error = result.stderr, result.error
    if error is None or not stderr:
        return list(stderr)
    header, frames = error_header(error), error_traceback(error)
    restatements = [
        header + frames,
        [PYTHON_TRACEBACK_TITLE, *frames, *header],
        header,
        error.message.rstrip().splitlines(),
    ]
    for block in sorted(restatements, key=len, reverse=True):
        if block and len(block) <= len(stderr) and _same_lines(stderr[-len(block) :], block):
            return list(stderr[: -len(block)])
    return list(stderr)


def _same_lines(first: list[str], second: list[str]) -> bool:
    """Equal line by line, ignoring trailing whitespace."""
    return len(first) == len(second) and all(
        a.rstrip() == b.rstrip() for a, b in zip(first, second, strict=True)
    )


def json_text(value: object) -> Text:
    """`value` pretty-printed and highlighted like `rich.json.JSON` does. JSON escapes C0
    characters in strings (`\\u001b`) but not DEL and C1 ones: those are neutralised."""
    text = JSONHighlighter()(neutralise(json.dumps(value, indent=2, ensure_ascii=False)))
    text.no_wrap = True
    text.overflow = None
    return text


def render_cell(cell: TranscriptCell, *, show_measurements: bool) -> RenderableType:
    """The cell as the transcript shows it: prompt and code, then each kind of output."""
    prompt = Text.assemble((f"In [{cell.number}] ", "bold cyan"), shown(cell.language, "dim"))
    if cell.label:
        prompt.append_text(shown(f"  ⟳ {cell.label}", "bold magenta"))
    parts: list[RenderableType] = [prompt]
    if not cell.label:  # a labelled cell's code is generated (a watch's runner): the label says it
        parts.append(
            Syntax(
                neutralise(cell.code),  # may be history recalled from a shared `serve`
                PYGMENTS_LEXERS.get(cell.language, "text"),
                background_color="default",
                word_wrap=True,
            )
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
        parts.append(
            Text(execution_footer(result, show_measurements=show_measurements), style="dim")
        )
    if cell.failure is not None:
        parts.append(shown(cell.failure, "bold red"))
    parts.append(Text(""))
    return Group(*parts)
