"""Engine preparation, shown: a Rich progress display on a terminal, otherwise one line
per phase on stderr (nothing with `--quiet`). The first use of a language on the local
backend fetches or builds and compiles its engine, which takes minutes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.cli.common import global_options
from workbench.cli.terminal import echo_untrusted, stderr_is_terminal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from workbench.api import Backend


def engine_progress(console: Console | None = None, *, disable: bool = False) -> Progress:
    """The progress display of engine preparation (one row per language)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.fields[language]:<11}"),
        BarColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
    )


async def prepare_engine(backend: Backend, language: str) -> None:
    """Prepare the local engine of `language` unless it is ready, showing progress.

    A remote backend (no `engines`) prepares its own; a failure raises
    `EnginePrepareError` with what to do.
    """
    manager = backend.engines
    if manager is None:
        return
    if any(info.language == language and info.ready for info in await manager.statuses()):
        return
    if global_options().quiet:
        await manager.prepare(language, lambda label, fraction: None)
        return
    if stderr_is_terminal():
        from rich.console import Console

        with engine_progress(Console(stderr=True)) as progress:
            task = progress.add_task("waiting", total=1.0, language=language)

            def update(label: str, fraction: float) -> None:
                progress.update(task, description=label, completed=fraction)

            await manager.prepare(language, update)
        return
    echo_untrusted(f"preparing the {language} engine (its first use; this takes a while)", err=True)
    shown = {"ready"}  # said once, at the end (the engine and the cache both report it)

    def line(label: str, fraction: float) -> None:
        if label not in shown:  # one line per phase, however often it reports
            shown.add(label)
            echo_untrusted(f"{language} engine: {label}", err=True)

    await manager.prepare(language, line)
    echo_untrusted(f"{language} engine: ready", err=True)
