"""A context's transcript as Markdown, JSON or a replayable transcript
(`workbench.transcripts`), and the file it is exported to (by default under the data
dir, never silently over an existing file)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from workbench.api import CodeContext
from workbench.paths import private_directory
from workbench.transcripts import ContextSpec, Outcome, RecordedCell, Transcript, write_private_text
from workbench.tui.transcript_cell import (
    TranscriptCell,
    error_header,
    error_traceback,
    result_text,
    shown_stderr,
)

FENCE_LANGUAGES = {"python": "python", "javascript": "js", "ruby": "ruby", "perl": "perl"}
EXPORTS_DIR_NAME: Final = "exports"
EXTENSIONS: Final = {"markdown": ".md", "json": ".json", "transcript": ".transcript.json"}


def fence_for(body: Sequence[str]) -> str:
    """A code fence longer than any run of backticks in `body`, so guest text can never
    close it and turn into Markdown or HTML (CommonMark: a fence closes only with one at
    least as long)."""
    longest = max((len(run) for line in body for run in re.findall("`+", line)), default=0)
    return "`" * max(3, longest + 1)


def transcript_markdown(title: str, cells: Sequence[TranscriptCell]) -> str:
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


def replayable_transcript(
    context: CodeContext, cells: Sequence[TranscriptCell], source: dict[str, str] | None = None
) -> Transcript:
    """The cells that finished (with a result; not request failures) as a transcript
    `sandbox-workbench replay` runs again. The workbench knows no env var values of the
    context, so none are recorded."""
    return Transcript(
        context=ContextSpec(context.binding, context.language, context.cwd),
        cells=tuple(
            RecordedCell(cell.code, Outcome.of(cell.result))
            for cell in cells
            if cell.result is not None
        ),
        source=source or {},
    )


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
    context: CodeContext | None = None,
) -> None:
    """Write the transcript to `path`, creating missing folders (0700) and the file (0600:
    it may hold printed secrets). Without `overwrite` an existing file raises
    FileExistsError; a symlink is never followed (OSError). The `transcript` format needs
    the `context` the cells ran in."""
    if file_format == "markdown":
        text = transcript_markdown(title, cells) + "\n"
    elif file_format == "transcript":
        if context is None:
            raise ValueError("a replayable transcript needs the context")
        text = replayable_transcript(context, cells, {"title": title}).dumps()
    else:
        text = transcript_json(title, cells) + "\n"
    private_directory(path.parent)
    write_private_text(path, text, overwrite=overwrite)
