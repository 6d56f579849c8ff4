"""`sandbox-workbench contexts list | fork`: a sandbox's code contexts."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.api import Backend, ContextInfo
from workbench.cli.common import backend_options, full_context_id, note, run_async, with_backend
from workbench.cli.completion import complete_sandbox_ids
from workbench.cli.terminal import echo_json, echo_untrusted


@click.group("contexts")
def contexts_group() -> None:
    """List and fork a sandbox's code contexts."""


def context_line(context: ContextInfo) -> str:
    snapshot = context.snapshot
    state = "no snapshot" if snapshot is None else f"snapshot {snapshot.bytes} bytes"
    local_only = "  (local only)" if context.local_only else ""
    return (
        f"{context.id}  {context.binding}  {context.language}  {context.cwd}  "
        f"{context.executions} runs  {state}  last used {context.last_used}{local_only}"
    )


@contexts_group.command(
    "list",
    epilog="""\b
Examples:
  sandbox-workbench contexts list -s demo
  sandbox-workbench contexts list -s demo -p staging --json""",
)
@click.option("--sandbox", "-s", "sandbox_id", required=True, shell_complete=complete_sandbox_ids)
@click.option("--json", "as_json", is_flag=True, help="Print the contexts as JSON.")
@backend_options
@run_async
async def list_command(sandbox_id: str, as_json: bool, profile: str, data_dir: Path | None) -> None:
    """List the sandbox's contexts: binding, language, cwd, runs and snapshot, oldest
    first."""

    async def body(backend: Backend) -> None:
        contexts = (await backend.sandbox(sandbox_id).get_info()).contexts
        if as_json:
            echo_json({"contexts": [context.to_json() for context in contexts]})
            return
        for context in contexts:
            echo_untrusted(context_line(context))
        if not contexts:
            echo_untrusted("no contexts")

    await with_backend(profile, data_dir, body)


@contexts_group.command(
    "fork",
    epilog="""\b
Examples:
  sandbox-workbench contexts fork -s demo --context 3f2a --json
  new=$(sandbox-workbench contexts fork -s demo --context 3f2a)
  sandbox-workbench run -s demo --context "$new" -c '$n + 1'   # the fork's own state

\b
The new context starts from a copy of the context's state: its REPL state (the
snapshot of its last run), execution count, history, cwd and env vars. From then on
the two evolve apart. An extension of the local backend and serve; a Worker gateway
cannot fork (exit 1, NOT_SUPPORTED).""",
)
@click.option("--sandbox", "-s", "sandbox_id", required=True, shell_complete=complete_sandbox_ids)
@click.option(
    "--context", "context_id", required=True, help="The code context's id or a unique prefix."
)
@click.option("--json", "as_json", is_flag=True, help="Print the new CodeContext JSON.")
@backend_options
@run_async
async def fork_command(
    sandbox_id: str, context_id: str, as_json: bool, profile: str, data_dir: Path | None
) -> None:
    """Make a new context from a copy of a context's state; print its id."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        origin = await full_context_id(sandbox, context_id)
        fork = await sandbox.interpreter.fork_code_context(origin)
        if as_json:
            echo_json(fork.to_json())
            return
        note(f"forked {origin} into a new {fork.binding} context")
        echo_untrusted(fork.id)

    await with_backend(profile, data_dir, body)
