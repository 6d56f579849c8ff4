"""A context's cells as documents: Markdown, JSON, a Jupyter notebook and a cell's request
as a `curl` command line, and the plain text of their outcomes those are made of (and the
TUI shows).

A guest error is written once: as `Name: message` and its traceback. Lines that only
restate it are left out: a traceback line repeating `Name: message` (the Python driver
starts its traceback with it), and stderr's last lines when they are exactly the error
written out by the guest before failing (Ruby's `abort`, a log-and-re-raise, Python's
`traceback.print_exc()`). Every other stderr line is always kept.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from workbench.api import ExecutionError, ExecutionResult, HistoryEntry
from workbench.api.display import neutralise

FENCE_LANGUAGES = {"python": "python", "javascript": "js", "ruby": "ruby", "perl": "perl"}
PYTHON_TRACEBACK_TITLE = "Traceback (most recent call last):"


@dataclass(frozen=True)
class DocumentCell:
    """One run as a document shows it: a result, or why there is none (a request that
    failed, a cancel)."""

    number: int | None
    """The run's execution count; None where the backend counted none (a request that
    failed or was given up: a guess duplicated or reordered the numbers; QA)."""
    code: str
    language: str
    result: ExecutionResult | None = None
    failure: str | None = None

    @property
    def shown_number(self) -> str:
        """The number as `In [n]` shows it: blank for a run not counted, as Jupyter shows
        a cell that did not run."""
        return " " if self.number is None else str(self.number)

    @classmethod
    def from_history(cls, entry: HistoryEntry, language: str) -> DocumentCell:
        """A run from a backend's history (`GET …/history`)."""
        return cls(history_number(entry), entry.code, language, entry.result)


def history_number(entry: HistoryEntry) -> int:
    """The run's `executionCount` (what the REPL showed), else its place in the history."""
    result = entry.result
    if result is not None and result.execution_count is not None:
        return result.execution_count
    return entry.seq


def result_text(result: ExecutionResult) -> list[str]:
    """Each result entry as text: JSON pretty-printed, text as is."""
    return [
        json.dumps(entry.json, indent=2, ensure_ascii=False) if entry.is_json else entry.text or ""
        for entry in result.results
    ]


def error_header(error: ExecutionError) -> list[str]:
    """`Name: message` as lines (a Ruby syntax error's message spans several); `Name`
    alone for an empty message, as Python and JavaScript write such an error."""
    message = error.message.rstrip()
    return f"{error.name}: {message}".splitlines() if message else [error.name]


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
    """The cells as a Markdown document. A document is read, in an editor or on a terminal
    (`cat`), so guest text's control characters are written as visible `\\xNN` escapes
    (newline and tab stay): an escape sequence in a guest's output cannot act on the
    reader's terminal. The JSON and notebook exports keep the exact text."""
    return neutralise(_markdown(title, cells))


def _markdown(title: str, cells: Sequence[DocumentCell]) -> str:
    lines = [f"# {title}", ""]
    for cell in cells:
        fence = fence_for([cell.code])
        language = FENCE_LANGUAGES.get(cell.language, "")
        lines += [f"## In [{cell.shown_number}]", "", f"{fence}{language}", cell.code, fence, ""]
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


@dataclass(frozen=True)
class NotebookLanguage:
    """What a notebook says of its cells' language: Jupyter picks a kernel by
    `kernel` and highlights by `name`."""

    name: str
    kernel: str
    display_name: str
    file_extension: str
    mimetype: str


NOTEBOOK_LANGUAGES: Final = {
    "python": NotebookLanguage("python", "python3", "Python 3", ".py", "text/x-python"),
    "javascript": NotebookLanguage(
        "javascript", "javascript", "JavaScript", ".js", "application/javascript"
    ),
    "ruby": NotebookLanguage("ruby", "ruby", "Ruby", ".rb", "text/x-ruby"),
    "perl": NotebookLanguage("perl", "perl", "Perl", ".pl", "text/x-perl"),
}
NOTEBOOK_METADATA_KEY: Final = "sandbox_workbench"
"""Where a notebook and its cells keep what only the workbench knows (title, source,
engine, duration)."""


def notebook_outputs(cell: DocumentCell) -> list[dict[str, Any]]:
    """The cell's stdout and stderr as streams, each result as an `execute_result`, the
    guest's error as an `error`, and why there is no result (a request that failed) on
    stderr. Guest text goes only into streams, `text/plain` and `application/json`:
    never HTML or JavaScript, so opening the notebook runs nothing the guest wrote."""
    outputs: list[dict[str, Any]] = []
    result = cell.result

    def stream(name: str, lines: Sequence[str]) -> None:
        if lines:
            outputs.append({"output_type": "stream", "name": name, "text": "\n".join(lines) + "\n"})

    if result is not None:
        stream("stdout", result.stdout)
        stream("stderr", shown_stderr(result))
        for entry, text in zip(result.results, result_text(result), strict=True):
            data: dict[str, Any] = {"text/plain": text}
            if entry.is_json:
                data["application/json"] = entry.json
            outputs.append(
                {
                    "output_type": "execute_result",
                    "execution_count": cell.number,
                    "data": data,
                    "metadata": {},
                }
            )
        if result.error is not None:
            outputs.append(
                {
                    "output_type": "error",
                    "ename": result.error.name,
                    "evalue": result.error.message,
                    "traceback": error_header(result.error) + error_traceback(result.error),
                }
            )
    if cell.failure is not None:
        stream("stderr", [cell.failure])
    return outputs


def transcript_notebook(
    title: str,
    language: str,
    cells: Sequence[DocumentCell],
    source: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The cells as an nbformat 4.5 notebook of `language` (one code cell per run, with
    its outputs), as Jupyter and VS Code open it; a language not in `NOTEBOOK_LANGUAGES`
    is named as it is, with no kernel Jupyter knows."""
    described = NOTEBOOK_LANGUAGES.get(language) or NotebookLanguage(
        language, language, language, "", "text/plain"
    )  # a language a gateway named that the workbench does not know
    notebook_cells = []
    for index, cell in enumerate(cells, start=1):
        cell_metadata: dict[str, Any] = {}
        if cell.result is not None:
            cell_metadata[NOTEBOOK_METADATA_KEY] = {
                "engine": cell.result.engine,
                "durationMs": cell.result.duration_ms,
            }
        notebook_cells.append(
            {
                "cell_type": "code",
                "id": f"cell-{index}",
                "metadata": cell_metadata,
                "execution_count": cell.number,
                "source": cell.code,
                "outputs": notebook_outputs(cell),
            }
        )
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {
                "name": described.kernel,
                "display_name": described.display_name,
                "language": described.name,
            },
            "language_info": {
                "name": described.name,
                "file_extension": described.file_extension,
                "mimetype": described.mimetype,
            },
            NOTEBOOK_METADATA_KEY: {"title": title, **(source or {})},
        },
        "cells": notebook_cells,
    }


def notebook_text(
    title: str,
    language: str,
    cells: Sequence[DocumentCell],
    source: Mapping[str, str] | None = None,
) -> str:
    """`transcript_notebook` as the `.ipynb` file's text (one-space indent, as Jupyter
    writes it)."""
    notebook = transcript_notebook(title, language, cells, source)
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


SHELL_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_TOKEN_VARIABLE: Final = "SANDBOX_WORKBENCH_TOKEN"


def token_variable(name: str | None) -> str:
    """The shell variable a `curl` command reads the token from: `name` (a profile's
    `token_env`) when it is a valid one, else `DEFAULT_TOKEN_VARIABLE`."""
    return name if name and SHELL_VARIABLE.fullmatch(name) else DEFAULT_TOKEN_VARIABLE


def curl_command(gateway_url: str, sandbox_id: str, body: Mapping[str, Any], variable: str) -> str:
    """The `curl` command line that sends `body` to the sandbox's execute route on the
    gateway at `gateway_url`. The token is the shell variable `variable` (see
    `token_variable`), never its value; the URL and the body are quoted for a POSIX shell,
    and the body is ASCII JSON, so no control character reaches the terminal it is pasted
    into."""
    variable = token_variable(variable)
    url = f"{gateway_url.rstrip('/')}/v1/sandboxes/{quote(sandbox_id, safe='')}/execute"
    payload = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
    return " \\\n  ".join(
        [
            f"curl -sS -X POST {shlex.quote(url)}",
            f'-H "Authorization: Bearer ${{{variable}}}"',
            "-H 'Content-Type: application/json'",
            f"--data-binary {shlex.quote(payload)}",
        ]
    )
