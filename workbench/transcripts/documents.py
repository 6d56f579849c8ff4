"""A context's cells as documents: Markdown and JSON, and the plain text of their
outcomes those are made of (and the TUI shows).

A guest error is written once: as `Name: message` and its traceback. Lines that only
restate it are left out: a traceback line repeating `Name: message` (the Python driver
starts its traceback with it), and stderr's last lines when they are exactly the error
written out by the guest before failing (Ruby's `abort`, a log-and-re-raise, Python's
`traceback.print_exc()`). Every other stderr line is always kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Protocol

from workbench.api import ExecutionError, ExecutionResult

FENCE_LANGUAGES = {"python": "python", "javascript": "js", "ruby": "ruby", "perl": "perl"}
PYTHON_TRACEBACK_TITLE = "Traceback (most recent call last):"


class DocumentCell(Protocol):
    """One run as a document shows it: a result, or why there is none."""

    @property
    def number(self) -> int: ...

    @property
    def code(self) -> str: ...

    @property
    def language(self) -> str: ...

    @property
    def result(self) -> ExecutionResult | None: ...

    @property
    def failure(self) -> str | None: ...


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


def fence_for(body: Sequence[str]) -> str:
    """A code fence longer than any run of backticks in `body`, so guest text can never
    close it and turn into Markdown or HTML (CommonMark: a fence closes only with one at
    least as long)."""
    longest = max((len(run) for line in body for run in re.findall("`+", line)), default=0)
    return "`" * max(3, longest + 1)


def transcript_markdown(title: str, cells: Sequence[DocumentCell]) -> str:
    lines = [f"# {title}", ""]
    for cell in cells:
        fence = fence_for([cell.code])
        language = FENCE_LANGUAGES.get(cell.language, "")
        lines += [f"## In [{cell.number}]", "", f"{fence}{language}", cell.code, fence, ""]
        result = cell.result
        sections: list[tuple[str, list[str]]] = []
        if result is not None:
            sections += [("stdout", result.stdout), ("stderr", shown_stderr(result))]
            sections.append(("result", result_text(result)))
            if result.error is not None:
                error_lines = error_header(result.error) + error_traceback(result.error)
                sections.append(("error", error_lines))
        if cell.failure is not None:
            sections.append(("failure", [cell.failure]))
        for name, body in sections:
            if body:
                fence = fence_for(body)
                lines += [f"**{name}**", "", fence, *body, fence, ""]
    return "\n".join(lines)


def transcript_json(title: str, cells: Sequence[DocumentCell]) -> str:
    payload = {
        "title": title,
        "cells": [
            {
                "number": cell.number,
                "language": cell.language,
                "code": cell.code,
                "result": None if cell.result is None else cell.result.to_json(),
                "failure": cell.failure,
            }
            for cell in cells
        ],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)
