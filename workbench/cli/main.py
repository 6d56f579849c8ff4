"""Entry point of `sandbox-workbench`: the TUI by default, headless subcommands otherwise."""

from __future__ import annotations

from pathlib import Path

import click

from workbench import __version__
from workbench.cli.lazy_group import LazyCommand, LazyGroup

COMMANDS: dict[str, LazyCommand] = {
    "run": LazyCommand(
        "workbench.cli.run_command:run_command",
        "Run code",
        "Run code statelessly or in a sandbox's context.",
    ),
    "sandboxes": LazyCommand(
        "workbench.cli.sandbox_commands:sandboxes_group",
        "Sandboxes",
        "List, inspect and destroy sandboxes.",
    ),
    "files": LazyCommand(
        "workbench.cli.file_commands:files_group",
        "Sandboxes",
        "Read and change a sandbox's /workspace.",
    ),
    "watch": LazyCommand(
        "workbench.cli.watch_command:watch_command",
        "Sandboxes",
        "Mirror a folder into /workspace; run an entry on change.",
    ),
    "serve": LazyCommand(
        "workbench.cli.serve_command:serve_command",
        "Remote",
        "Serve the gateway protocol from the local backend.",
    ),
    "profiles": LazyCommand(
        "workbench.cli.profile_commands:profiles_group",
        "Remote",
        "Configure remote gateways.",
    ),
    "gateway": LazyCommand(
        "workbench.cli.gateway_command:gateway_group",
        "Remote",
        "Render the gateway Worker to deploy.",
    ),
    "locate": LazyCommand(
        "workbench.cli.locate_command:locate_command",
        "Setup",
        "Print where config, data and caches live.",
    ),
    "engines": LazyCommand(
        "workbench.cli.engine_commands:engines_group",
        "Setup",
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
@click.option(
    "--profile",
    "-p",
    default="local",
    envvar="SANDBOX_WORKBENCH_PROFILE",
    help="Backend profile the workbench opens (default: local).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Local backend store (default: $SANDBOX_WORKBENCH_DATA_DIR or the user data dir).",
)
@click.pass_context
def main(ctx: click.Context, profile: str, data_dir: Path | None) -> None:
    """A terminal workbench for sandbox-workers.

    Browse sandboxes, their code contexts and /workspace, and run a REPL per context:
    locally on wasmtime engines (the default) or against a deployed gateway Worker.
    Without a subcommand, the interactive workbench starts.
    """
    if ctx.invoked_subcommand is None:
        from workbench.tui.app import run_app

        run_app(profile=profile, data_dir=data_dir)
