"""A click group that lists commands under sections and imports each one only when used.

Keeps `sandbox-workbench --help` fast: command modules (and what they import) load only
when their command runs. It is also the command line's error boundary (`invoke`).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any

import click


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives, which help section lists it, and its one-line summary."""

    target: str
    """`module:attribute` of the click command."""
    section: str
    summary: str
    global_flags: frozenset[str] = field(default_factory=frozenset)
    """The group-level flags (`--profile`, `--data-dir`) the command honours; giving
    another one before it is a usage error, never silently ignored."""


class LazyGroup(click.Group):
    """A group whose subcommands are `LazyCommand`s, shown by section in `--help`."""

    def __init__(self, *args: object, lazy_commands: dict[str, LazyCommand], **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self.lazy_commands.get(cmd_name)
        if lazy is None:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = lazy.target.split(":")
        try:
            module = importlib.import_module(module_name)
        except KeyboardInterrupt:  # as during the CLI's own imports (`workbench.__main__`)
            sys.exit(130)
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{lazy.target} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an exception that escapes it becomes one `error:` line and
        an exit code (`workbench.cli.errors`)."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as error:
            from workbench.cli.errors import report

            sys.exit(report(error))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for name, lazy in self.lazy_commands.items():
            sections.setdefault(lazy.section, []).append((name, lazy.summary))
        for section, rows in sections.items():
            with formatter.section(section):
                formatter.write_dl(sorted(rows))
