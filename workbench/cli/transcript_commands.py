"""`sandbox-workbench transcript export` and `sandbox-workbench replay`: record a
context's cells with their outcomes, and run them again on any backend."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from workbench.api.display import counted
from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    backend_options,
    busy,
    full_context_id,
    non_empty,
    note,
    run_async,
    said_if_slow,
    sandbox_option,
    timeout_option,
    with_backend,
)
from workbench.cli.diff_command import show_comparison
from workbench.cli.errors import CommandError
from workbench.cli.terminal import echo_json, echo_json_text, echo_untrusted

if TYPE_CHECKING:
    from workbench.api import Backend
    from workbench.transcripts import CellReplay, Export, ReplayReport, Transcript


EXPORT_FORMATS = ("transcript", "json", "md", "ipynb")


@click.group("transcript")
def transcript_group() -> None:
    """Replayable transcripts of a context (see `replay`)."""


@transcript_group.command(
    "export",
    epilog="""\b
Examples:
  sandbox-workbench transcript export -s demo --context 3f2a… -o demo.json
  sandbox-workbench transcript export -s demo --context 3f2a… -o - --with-files
  sandbox-workbench transcript export -s demo --context 3f2a… -o demo.ipynb
  sandbox-workbench replay demo.json --profile staging

\b
Formats (default: from FILE's extension, .ipynb and .md, else transcript):
  transcript  what `replay` runs again: the context's binding and cwd, the
              sandbox's env var names (values with --with-env), optionally the
              workspace files, and each cell's code with its outcome
  json        each cell's code and its whole result, as the workbench exports it
  md          Markdown: each cell's code and output in fences
  ipynb       a Jupyter notebook (nbformat 4.5) of the context's language: a code
              cell per run, with its stdout, stderr, results and error as outputs
All come from the backend's history (local and serve keep one; the Worker gateway
does not: export from the workbench there). A context's own env vars are not
reported by the gateway protocol and are not recorded.""",
)
@sandbox_option
@click.option(
    "--context",
    "context_id",
    required=True,
    callback=non_empty,
    help="The code context's id or a unique prefix.",
)
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="FILE",
    help="Where to write the transcript (- for stdout); an existing file needs --force.",
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(EXPORT_FORMATS),
    help="What to write (default: from FILE's extension, .ipynb and .md, else transcript).",
)
@click.option(
    "--with-env", is_flag=True, help="Include env var values (secrets too; transcript only)."
)
@click.option(
    "--with-files", is_flag=True, help="Include the workspace files (base64; transcript only)."
)
@click.option("--force", is_flag=True, help="Overwrite an existing FILE.")
@backend_options
@run_async
async def export_command(
    sandbox_id: str,
    context_id: str,
    output: str,
    file_format: str | None,
    with_env: bool,
    with_files: bool,
    force: bool,
    profile: str,
    data_dir: Path | None,
) -> int:
    """Write a context's cells and their outcomes: a replayable transcript, JSON,
    Markdown or a Jupyter notebook."""
    from workbench.transcripts import ExportError, export_context, write_private_text

    if output != "-" and (not output or output.endswith(os.sep)):  # Path() drops the slash
        raise CommandError(f"{output!r} names no file: give the file's name", EXIT_USAGE)
    file_format = file_format or export_format_for(output)
    transcript_only = [
        flag for flag, given in (("--with-env", with_env), ("--with-files", with_files)) if given
    ]
    if transcript_only and file_format != "transcript":
        raise CommandError(
            f"{' and '.join(transcript_only)}: only with --format transcript", EXIT_USAGE
        )

    if output != "-":  # checked before the backend is asked (and checked again at the write)
        _check_output(Path(output), force)

    async def body(backend: Backend) -> Any:
        exporting = export_context(
            backend,
            sandbox_id,
            context_id,
            with_env=with_env,
            with_files=with_files,
            resolve_context=full_context_id,
        )
        return await said_if_slow(exporting, busy(backend.sandbox(sandbox_id)))

    try:
        exported = await with_backend(profile, data_dir, body)
    except ExportError as error:
        raise CommandError(str(error), EXIT_NOT_FOUND if error.not_found else EXIT_USAGE) from None
    replayable = file_format == "transcript"
    for line in exported.notes + (exported.replay_notes if replayable else []):
        note(f"note: {line}")
    text = export_text(exported, file_format)
    if output == "-":
        shown = echo_untrusted if file_format == "md" else echo_json_text
        shown(text.removesuffix("\n"))
        return EXIT_OK
    _check_output(Path(output), force)  # it may have changed while the backend answered
    try:
        write_private_text(Path(output), text, overwrite=force)
    except FileExistsError:
        raise CommandError(f"{output} exists; pass --force to overwrite it", EXIT_USAGE) from None
    note(f"wrote {counted(len(exported.transcript.cells), 'cell')} to {output}")
    return EXIT_OK


def _check_output(output: Path, force: bool) -> None:
    """An export can be written to `output`, as far as can be told before writing (QA: a
    path in no directory failed only after the backend was asked and its notes printed)."""
    if output.is_dir():  # --force would not help: name a file in it
        raise CommandError(f"{output} is a directory: name a file in it", EXIT_USAGE)
    if not output.parent.is_dir():
        raise CommandError(f"{output.parent} is not a directory: nothing written", EXIT_USAGE)
    if output.exists() and not force:
        raise CommandError(f"{output} exists; pass --force to overwrite it", EXIT_USAGE)


def export_format_for(output: str) -> str:
    """The format FILE's extension names (`.ipynb`, `.md`), else a replayable transcript."""
    suffix = Path(output).suffix.lower()
    return {".ipynb": "ipynb", ".md": "md"}.get(suffix, "transcript")


def export_text(exported: Export, file_format: str) -> str:
    from workbench.transcripts.documents import notebook_text, transcript_json, transcript_markdown

    title, cells = exported.title, exported.cells
    if file_format == "json":
        return transcript_json(title, cells) + "\n"
    if file_format == "md":
        return transcript_markdown(title, cells) + "\n"
    if file_format == "ipynb":
        context = exported.transcript.context
        return notebook_text(title, context.language, cells, exported.transcript.source)
    return exported.transcript.dumps()


def load(path: str) -> Transcript:
    """The transcript at `path`; a bad file is a usage error (exit 2)."""
    from workbench.transcripts import TranscriptError, read_transcript

    try:
        return read_transcript(Path(path))
    except TranscriptError as error:
        raise CommandError(f"bad transcript: {error}", EXIT_USAGE) from None


def show_cell(cell: CellReplay, profile: str) -> None:
    lines = cell.code.strip().splitlines()
    first_line = lines[0] if lines else ""
    if len(first_line) > 60 or len(lines) > 1:
        first_line = first_line[:59] + "…"
    if cell.recorded is None:
        verdict = "ran (nothing recorded to compare with)"
    elif cell.differences:
        verdict = "differs: " + ", ".join(cell.differences)
    else:
        verdict = "same"
    echo_untrusted(f"cell {cell.number}  {verdict}  │ {first_line}")
    if cell.recorded is not None and cell.differences:
        show_comparison(cell.recorded, cell.observed, "recorded", profile)


def report_json(path: str, report: ReplayReport) -> dict[str, Any]:
    return {
        "file": path,
        "profile": report.profile,
        "binding": report.binding,
        "same": not report.divergences,
        "divergences": len(report.divergences),
        "unsetEnvVars": report.unset_env_vars,
        "knownDifference": report.known_difference,
        "cells": [
            {
                "number": cell.number,
                "code": cell.code,
                "same": None if cell.recorded is None else not cell.differences,
                "differences": cell.differences,
                "recorded": None if cell.recorded is None else cell.recorded.to_json(),
                "observed": cell.observed.to_json(),
            }
            for cell in report.cells
        ],
    }


@click.command(
    "replay",
    epilog="""\b
Examples:
  sandbox-workbench replay demo.json                    # on the local backend
  sandbox-workbench replay demo.json --profile staging  # on a deployed gateway
  sandbox-workbench replay demo.json -p staging --json

\b
Each cell is compared with its recorded outcome by stdout, stderr, results and the
error's name and message (not durationMs, usage, timestamps or executionCount).

\b
Exit status: 0 every cell agrees, 1 a cell diverged, 2 a bad file or usage error,
3 the backend is unreachable.""",
)
@click.argument("path", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@timeout_option
@backend_options
@run_async
async def replay_command(
    path: str, as_json: bool, timeout: float | None, profile: str, data_dir: Path | None
) -> int:
    """Replay a transcript in a fresh sandbox and report every divergence.

    The sandbox's env vars and files are recreated first, then a context with the
    recorded binding (or, where that binding runs another language, a binding of the
    recorded language), cwd and env vars runs the cells in order; the sandbox is
    destroyed afterwards. On the local backend and `serve`, a cell recorded as stopped at
    its time limit runs under that limit again (--timeout is the other cells' limit).
    """
    from workbench.cli.progress import prepare_engine
    from workbench.transcripts import ReplayError, replay_transcript

    transcript = load(path)

    async def body(backend: Backend) -> ReplayReport:
        return await replay_transcript(
            backend,
            transcript,
            prepare=prepare_engine,
            on_cell=None if as_json else lambda cell: show_cell(cell, profile),
        )

    try:
        report = await with_backend(profile, data_dir, body, timeout=timeout)
    except ReplayError as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    if report.unset_env_vars:
        keys = ", ".join(report.unset_env_vars)
        note(f"note: no recorded value for {keys} (exported without --with-env): not set")
    if report.known_difference is not None and not as_json:
        note(f"note: {report.known_difference}")
    if as_json:
        echo_json(report_json(path, report))
    else:
        total, diverged = len(report.cells), len(report.divergences)
        if diverged:
            echo_untrusted(f"{diverged} of {counted(total, 'cell')} diverged on {profile}")
        elif report.known_difference is None:
            everything = "the one cell agrees" if total == 1 else f"all {total} cells agree"
            echo_untrusted(f"{everything} on {profile}")
    return EXIT_FAILED if report.divergences else EXIT_OK
