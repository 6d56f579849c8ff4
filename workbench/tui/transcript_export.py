"""A context's transcript as Markdown or JSON, written to a file in the cwd."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from workbench.tui.transcript_cell import TranscriptCell, result_text

FENCE_LANGUAGES = {"python": "python", "javascript": "js", "ruby": "ruby", "perl": "perl"}


def transcript_markdown(title: str, cells: Sequence[TranscriptCell]) -> str:
    lines = [f"# {title}", ""]
    for cell in cells:
        lines += [f"## In [{cell.number}]", "", f"```{FENCE_LANGUAGES.get(cell.language, '')}"]
        lines += [cell.code, "```", ""]
        result = cell.result
        sections: list[tuple[str, list[str]]] = []
        if result is not None:
            sections += [("stdout", result.stdout), ("stderr", result.stderr)]
            sections.append(("result", result_text(result)))
            if result.error is not None:
                error_lines = [f"{result.error.name}: {result.error.message}"]
                sections.append(("error", error_lines + result.error.traceback))
        if cell.failure is not None:
            sections.append(("failure", [cell.failure]))
        for name, body in sections:
            if body:
                lines += [f"**{name}**", "", "```", *body, "```", ""]
    return "\n".join(lines)


def transcript_json(title: str, cells: Sequence[TranscriptCell]) -> str:
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


def export_transcript(
    title: str, cells: Sequence[TranscriptCell], file_format: str, directory: Path
) -> Path:
    """Write `<title>.md` or `<title>.json` into `directory` and return its path."""
    safe_title = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in title)
    if file_format == "markdown":
        path, text = directory / f"{safe_title}.md", transcript_markdown(title, cells)
    else:
        path, text = directory / f"{safe_title}.json", transcript_json(title, cells)
    path.write_text(text + "\n", encoding="utf-8")
    return path
