"""Entry point of `sandbox-workbench`: the TUI by default, headless subcommands otherwise."""

from __future__ import annotations

import click

from workbench import __version__
from workbench.cli.lazy_group import LazyCommand, LazyGroup

COMMANDS: dict[str, LazyCommand] = {
    "engines": LazyCommand(
        "workbench.cli.engine_commands:engines_group",
        "Local engines",
        "Prepare and inspect the local Wasm engines.",
    ),
}
"""Subcommands by name; each module is imported only when its command runs."""


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "-V", "--version", prog_name="sandbox-workbench")
@click.pass_context
def main(ctx: click.Context) -> None:
    """A terminal workbench for sandbox-workers.

    Browse sandboxes, their code contexts and /workspace, and run a REPL per context:
    locally on wasmtime engines (the default) or against a deployed gateway Worker.
    Without a subcommand, the interactive workbench starts.
    """
    if ctx.invoked_subcommand is None:
        from workbench.tui.app import run_app

        run_app()
