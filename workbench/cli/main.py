"""Entry point of `sandbox-workbench`: the TUI by default, headless subcommands otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import click

from workbench import __version__
from workbench.cli.common import (
    DATA_DIR_HELP,
    DEBUG_ENV,
    NO_DAEMON_ENV,
    PROFILE_ENV,
    GlobalOptions,
    non_empty,
    resolve_profile,
)
from workbench.cli.completion import complete_profiles
from workbench.cli.errors import EXIT_CODES_EPILOG
from workbench.cli.lazy_group import LazyCommand, LazyGroup
from workbench.cli.terminal import stdin_is_terminal, stdout_is_terminal
from workbench.config import FILE_API_ENV, RUBY_CONTEXTS_ENV

BACKEND_FLAGS = frozenset({"--profile", "--data-dir"})
DATA_DIR_FLAG = frozenset({"--data-dir"})

COMMANDS: dict[str, LazyCommand] = {
    "run": LazyCommand(
        "workbench.cli.run_command:run_command",
        "Run code",
        "Run code statelessly or in a sandbox's context.",
        BACKEND_FLAGS,
    ),
    "diff": LazyCommand(
        "workbench.cli.diff_command:diff_command",
        "Compare backends",
        "Run code on two backends and show where they differ.",
        BACKEND_FLAGS,
    ),
    "replay": LazyCommand(
        "workbench.cli.transcript_commands:replay_command",
        "Compare backends",
        "Replay a transcript's cells and report divergences.",
        BACKEND_FLAGS,
    ),
    "transcript": LazyCommand(
        "workbench.cli.transcript_commands:transcript_group",
        "Compare backends",
        "Export a context's cells and outcomes as a replayable file.",
        BACKEND_FLAGS,
    ),
    "sandboxes": LazyCommand(
        "workbench.cli.sandbox_commands:sandboxes_group",
        "Sandboxes",
        "List, inspect and destroy sandboxes; show and set their env vars.",
        BACKEND_FLAGS,
    ),
    "contexts": LazyCommand(
        "workbench.cli.context_commands:contexts_group",
        "Sandboxes",
        "Create, list, inspect, fork, checkpoint, reset, delete contexts.",
        BACKEND_FLAGS,
    ),
    "files": LazyCommand(
        "workbench.cli.file_commands:files_group",
        "Sandboxes",
        "Read and change a sandbox's /workspace.",
        BACKEND_FLAGS,
    ),
    "watch": LazyCommand(
        "workbench.cli.watch_command:watch_command",
        "Sandboxes",
        "Mirror a folder into /workspace; run an entry on change.",
        BACKEND_FLAGS,
    ),
    "serve": LazyCommand(
        "workbench.cli.serve_command:serve_command",
        "Remote",
        "Serve the gateway protocol from the local backend.",
        DATA_DIR_FLAG,
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
        DATA_DIR_FLAG,
    ),
    "daemon": LazyCommand(
        "workbench.cli.daemon_commands:daemon_group",
        "Setup",
        "The local daemon: status, stop, logs.",
        DATA_DIR_FLAG,
    ),
    "engines": LazyCommand(
        "workbench.cli.engine_commands:engines_group",
        "Setup",
        "Prepare and inspect the local Wasm engines.",
    ),
}
"""Subcommands by name; each module is imported only when its command runs."""


EPILOG = f"""\b
{EXIT_CODES_EPILOG}

\b
Shell completion (profiles, bindings and local sandbox ids complete too):
  bash:  eval "$(_SANDBOX_WORKBENCH_COMPLETE=bash_source sandbox-workbench)"
  zsh:   eval "$(_SANDBOX_WORKBENCH_COMPLETE=zsh_source sandbox-workbench)"
  fish:  _SANDBOX_WORKBENCH_COMPLETE=fish_source sandbox-workbench | source

\b
Examples:
  sandbox-workbench run -l python -c 'import sys; sys.version'
  sandbox-workbench -p staging sandboxes list
  sandbox-workbench engines install perl
"""


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EPILOG,
)
@click.version_option(__version__, "-V", "--version", prog_name="sandbox-workbench")
@click.option(
    "--profile",
    "-p",
    default=None,
    callback=non_empty,
    shell_complete=complete_profiles,
    help=f"Backend profile for the workbench and every command that talks to a backend "
    f"(default: ${PROFILE_ENV} or local).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=DATA_DIR_HELP,
)
@click.option(
    "--debug",
    is_flag=True,
    envvar=DEBUG_ENV,
    help=f"Show the traceback of a failure (also ${DEBUG_ENV}=1).",
)
@click.option("--quiet", "-q", is_flag=True, help="No notes or progress; results and errors only.")
@click.option(
    "--no-daemon",
    is_flag=True,
    envvar=NO_DAEMON_ENV,
    help="Open the local store in this process instead of through the local daemon (it "
    f"must not be running for that data dir; also ${NO_DAEMON_ENV}=1).",
)
@click.option(
    "--ruby-contexts/--no-ruby-contexts",
    default=None,
    help="Local backend: offer Ruby code contexts, a local extension (the deployed system "
    f"runs Ruby statelessly); default: ${RUBY_CONTEXTS_ENV}, else the config's [local] "
    "ruby_contexts, else as the running local daemon has it, else off.",
)
@click.option(
    "--file-api/--no-file-api",
    default=None,
    help="Local backend: the sandboxes' File API on or off, as a deployment with "
    f"SANDBOX_FILE_API=disabled; default: ${FILE_API_ENV}, else the config's [local] "
    "file_api, else as the running local daemon has it, else on.",
)
@click.pass_context
def main(
    ctx: click.Context,
    profile: str | None,
    data_dir: Path | None,
    debug: bool,
    quiet: bool,
    no_daemon: bool,
    ruby_contexts: bool | None,
    file_api: bool | None,
) -> None:
    """A terminal workbench for sandbox-workers.

    Browse sandboxes, their code contexts and /workspace, and run a REPL per context:
    locally on wasmtime engines (the default) or against a deployed gateway Worker.
    Without a subcommand, the interactive workbench starts.
    """
    # Through the environment: the local daemon this process starts reads them too.
    if ruby_contexts is not None:
        os.environ[RUBY_CONTEXTS_ENV] = "1" if ruby_contexts else "0"
    if file_api is not None:
        os.environ[FILE_API_ENV] = "enabled" if file_api else "disabled"
    if os.environ.get("NO_COLOR"):
        ctx.color = False  # click.echo and click.secho strip styles (Rich reads NO_COLOR)
    ctx.obj = GlobalOptions(
        profile=profile, data_dir=data_dir, debug=debug, quiet=quiet, no_daemon=no_daemon
    )
    name = ctx.invoked_subcommand
    if name is None:
        if not (stdin_is_terminal() and stdout_is_terminal()):
            # Textual would write its escapes into the file or pipe and wait for keys.
            raise click.UsageError(
                "the workbench needs a terminal (stdin and stdout); for scripts, use a "
                "command: `sandbox-workbench --help` lists them"
            )
        from workbench.tui.app import run_app

        code = run_app(profile=resolve_profile(None), data_dir=data_dir, no_daemon=no_daemon)
        if code:
            ctx.exit(code)
        return
    accepted = COMMANDS[name].global_flags if name in COMMANDS else frozenset()
    for flag, value in (("--profile", profile), ("--data-dir", data_dir)):
        if value is not None and flag not in accepted:
            raise click.UsageError(f"{flag} does not apply to `{name}`")
