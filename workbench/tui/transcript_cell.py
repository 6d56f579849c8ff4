"""One REPL cell (input and outcome) and its Rich rendering for the transcript."""

from __future__ import annotations

import json
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.syntax import Syntax
from rich.text import Text

from workbench.api.types import ExecutionResult
from workbench.tui.formatting import execution_footer

PYGMENTS_LEXERS = {"python": "python", "javascript": "javascript", "ruby": "ruby", "perl": "perl"}


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
            lines.extend(self.result.stderr)
            lines.extend(result_text(self.result))
            if self.result.error is not None:
                lines.append(f"{self.result.error.name}: {self.result.error.message}")
                lines.extend(self.result.error.traceback)
        if self.failure is not None:
            lines.append(self.failure)
        return "\n".join(lines)

    @property
    def full_text(self) -> str:
        return f"{self.code}\n{self.output_text}".rstrip("\n")


def result_text(result: ExecutionResult) -> list[str]:
    """Each result entry as text: JSON pretty-printed, text as is."""
    return [
        json.dumps(entry.json, indent=2, ensure_ascii=False) if entry.is_json else entry.text or ""
        for entry in result.results
    ]


def render_cell(cell: TranscriptCell, *, show_measurements: bool) -> RenderableType:
    """The cell as the transcript shows it: prompt and code, then each kind of output."""
    prompt = Text.assemble((f"In [{cell.number}] ", "bold cyan"), (cell.language, "dim"))
    if cell.label:
        prompt.append(f"  ⟳ {cell.label}", style="bold magenta")
    parts: list[RenderableType] = [
        prompt,
        Syntax(
            cell.code,
            PYGMENTS_LEXERS.get(cell.language, "text"),
            background_color="default",
            word_wrap=True,
        ),
    ]
    result = cell.result
    if result is not None:
        if result.session is not None:
            for note in result.session.notes:
                parts.append(Text(f"ⓘ {note}", style="bold yellow"))
        if result.stdout:
            parts.append(Text("\n".join(result.stdout)))
        if result.stderr:
            parts.append(Text("\n".join(result.stderr), style="#d08770 italic"))
        for entry in result.results:
            if entry.is_json:
                parts.append(JSON(json.dumps(entry.json, ensure_ascii=False)))
            else:
                parts.append(Text(entry.text or "", style="bold green"))
        if result.error is not None:
            parts.append(Text(f"{result.error.name}: {result.error.message}", style="bold red"))
            if result.error.traceback:
                parts.append(Text("\n".join(result.error.traceback), style="red"))
        parts.append(
            Text(execution_footer(result, show_measurements=show_measurements), style="dim")
        )
    if cell.failure is not None:
        parts.append(Text(cell.failure, style="bold red"))
    parts.append(Text(""))
    return Group(*parts)
