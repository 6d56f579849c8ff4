"""A context's transcript as Markdown, JSON, a Jupyter notebook or a replayable transcript
(`workbench.transcripts`), and the file it is exported to (by default under the data
dir, never silently over an existing file)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from workbench.api import CodeContext
from workbench.paths import private_directory
from workbench.transcripts import ContextSpec, Outcome, RecordedCell, Transcript, write_private_text
from workbench.transcripts.documents import notebook_text, transcript_json, transcript_markdown
from workbench.tui.transcript_cell import TranscriptCell

EXPORTS_DIR_NAME: Final = "exports"
EXTENSIONS: Final = {
    "markdown": ".md",
    "json": ".json",
    "ipynb": ".ipynb",
    "transcript": ".transcript.json",
}


def replayable_transcript(
    context: CodeContext, cells: Sequence[TranscriptCell], source: dict[str, str] | None = None
) -> Transcript:
    """The cells that finished (with a result; not request failures) as a transcript
    `sandbox-workbench replay` runs again. The workbench knows no env var values of the
    context, so none are recorded."""
    return Transcript(
        # Where its first run started, as `transcript export` records it (found in review).
        context=ContextSpec(context.binding, context.language, context.start_cwd or context.cwd),
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
    FileExistsError; a symlink is never followed (OSError). The `transcript` and `ipynb`
    formats need the `context` the cells ran in."""
    if file_format == "markdown":
        text = transcript_markdown(title, cells) + "\n"
    elif file_format in ("transcript", "ipynb"):
        if context is None:
            raise ValueError(f"a {file_format} export needs the context")
        if file_format == "ipynb":
            text = notebook_text(title, context.language, cells, {"context": context.id})
        else:
            text = replayable_transcript(context, cells, {"title": title}).dumps()
    else:
        text = transcript_json(title, cells) + "\n"
    private_directory(path.parent)
    write_private_text(path, text, overwrite=overwrite)
