"""A context's transcript as Markdown or JSON, and the file it is exported to (by
default under the data dir, never silently over an existing file)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from workbench.paths import private_directory
from workbench.tui.transcript_cell import (
    TranscriptCell,
    error_header,
    error_traceback,
    result_text,
    shown_stderr,
)

FENCE_LANGUAGES = {"python": "python", "javascript": "js", "ruby": "ruby", "perl": "perl"}
EXPORTS_DIR_NAME: Final = "exports"
EXTENSIONS: Final = {"markdown": ".md", "json": ".json"}
EXPORT_FILE_MODE: Final = 0o600
"""Transcripts may hold printed secrets (env vars): private like the rest of the data dir."""


def transcript_markdown(title: str, cells: Sequence[TranscriptCell]) -> str:
    lines = [f"# {title}", ""]
    for cell in cells:
        lines += [f"## In [{cell.number}]", "", f"```{FENCE_LANGUAGES.get(cell.language, '')}"]
        lines += [cell.code, "```", ""]
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


def default_export_path(data_dir: Path, title: str, file_format: str, now_ms: int) -> Path:
    """`<data dir>/exports/<title>-<local time>.md` (or `.json`), with `title` made safe
    for a file name."""
    safe_title = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in title)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now_ms / 1000))
    return data_dir / EXPORTS_DIR_NAME / f"{safe_title}-{stamp}{EXTENSIONS[file_format]}"


def write_transcript(
    path: Path,
    title: str,
    cells: Sequence[TranscriptCell],
    file_format: str,
    *,
    overwrite: bool,
) -> None:
    """Write the transcript to `path`, creating missing folders (0700) and the file (0600).
    Without `overwrite` an existing file raises FileExistsError; a symlink is never
    followed (OSError)."""
    if file_format == "markdown":
        text = transcript_markdown(title, cells)
    else:
        text = transcript_json(title, cells)
    private_directory(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if overwrite else os.O_EXCL
    descriptor = os.open(path, flags, EXPORT_FILE_MODE)
    with open(descriptor, "w", encoding="utf-8") as file:
        file.write(text + "\n")
