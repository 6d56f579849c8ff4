"""`sandbox-workbench engines list | install | verify`."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

import click

from engines.cache import EngineCache
from engines.language import PrepareError
from engines.registry import LANGUAGES, language_engine, resolve_language
from engines.status import EngineState, all_statuses
from workbench.cli.common import global_options
from workbench.cli.terminal import echo_untrusted, stdout_is_terminal


def _languages(names: tuple[str, ...]) -> list[str]:
    try:
        return [resolve_language(name) for name in names] or list(LANGUAGES)
    except KeyError as error:
        raise click.BadParameter(str(error.args[0]), param_hint="LANGUAGE") from error


@click.group("engines")
def engines_group() -> None:
    """Prepare and inspect the local Wasm engines."""


@engines_group.command(
    "list",
    epilog="""\b
Examples:
  sandbox-workbench engines list
  sandbox-workbench engines list --json | jq -r '.[] | select(.state != "ready").language'""",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_command(as_json: bool) -> None:
    """Show each language's engine, version and state.

    Perl and Ruby are downloaded from the npm registry (no npm needed), Python is built
    with componentize-py; only JavaScript needs Node.js and npm, to build its engine.
    """
    statuses = all_statuses()
    if as_json:
        rows = [
            {
                "language": status.language,
                "engine": status.engine,
                "version": status.version,
                "contexts": status.contexts,
                "snapshots": status.snapshots,
                "state": status.state.value,
                "detail": status.detail,
            }
            for status in statuses
        ]
        echo_untrusted(json.dumps(rows, indent=2))
        return
    if not stdout_is_terminal():  # whole lines for scripts: no wrapping at 80, no padding
        table_rows = [("language", "engine", "version", "state")] + [
            (
                status.language,
                status.engine,
                status.version,
                status.state.value + (f" ({status.detail})" if status.detail else ""),
            )
            for status in statuses
        ]
        widths = [max(len(row[column]) for row in table_rows) for column in range(3)]
        for row in table_rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            echo_untrusted("  ".join([*cells, row[3]]))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("language", "engine", "version", "state", box=None, pad_edge=False)
    colours = {
        EngineState.READY: "green",
        EngineState.NOT_PREPARED: "yellow",
        EngineState.CANNOT_PREPARE: "red",
    }
    for status in statuses:
        state = f"[{colours[status.state]}]{status.state.value}[/]"
        if status.detail:
            state += f" ({status.detail})"
        table.add_row(status.language, status.engine, status.version, state)
    Console().print(table)


@engines_group.command(
    "install",
    epilog="""\b
Examples:
  sandbox-workbench engines install            # every language, in parallel
  sandbox-workbench engines install perl ruby
  sandbox-workbench engines install python --force""",
)
@click.argument("languages", nargs=-1)
@click.option("--force", is_flag=True, help="Fetch, build and compile again even if ready.")
def install_command(languages: tuple[str, ...], force: bool) -> None:
    """Prepare engines (all languages unless some are named), in parallel."""
    from workbench.cli.progress import engine_progress

    chosen = _languages(languages)
    failures: dict[str, str] = {}
    with engine_progress(disable=global_options().quiet) as progress:
        tasks = {
            language: progress.add_task("waiting", total=1.0, language=language)
            for language in chosen
        }

        def prepare(language: str) -> None:
            task = tasks[language]

            def report(label: str, fraction: float) -> None:
                progress.update(task, description=label, completed=fraction)

            EngineCache(language_engine(language)).prepare(report, force=force)

        workers = max(1, min(len(chosen), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(prepare, language): language for language in chosen}
            for future in as_completed(futures):
                language = futures[future]
                try:
                    future.result()
                except PrepareError as error:
                    failures[language] = str(error)
                    progress.update(tasks[language], description="[red]failed[/]")
    for language, message in failures.items():
        echo_untrusted(f"{language}: {message}", err=True)
    if failures:
        sys.exit(1)


@engines_group.command(
    "verify",
    epilog="""\b
Examples:
  sandbox-workbench engines verify
  sandbox-workbench engines verify ruby""",
)
@click.argument("languages", nargs=-1)
def verify_command(languages: tuple[str, ...]) -> None:
    """Check prepared engines against their recorded sha256 (thorough)."""
    problems = 0
    for language in _languages(languages):
        found = EngineCache(language_engine(language)).verify()
        echo_untrusted(f"{language}: {'ok' if not found else '; '.join(found)}")
        problems += bool(found)
    if problems:
        sys.exit(1)
