"""`sandbox-workbench contexts list | inspect | fork | checkpoint save|list|restore|delete`:
a sandbox's code contexts, their names and their checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from workbench.api import Backend, Checkpoint, ContextInfo, InspectedName, inspected_size
from workbench.cli.common import (
    EXIT_NOT_FOUND,
    backend_options,
    find_context,
    full_context_id,
    note,
    run_async,
    with_backend,
)
from workbench.cli.completion import complete_sandbox_ids
from workbench.cli.errors import CommandError
from workbench.cli.terminal import echo_json, echo_untrusted

Command = TypeVar("Command", bound=Callable[..., Any])


@click.group("contexts")
def contexts_group() -> None:
    """List, inspect, fork and checkpoint a sandbox's code contexts."""


def context_options(function: Command) -> Command:
    """`-s/--sandbox` and `--context`, as `run` takes them."""
    function = click.option(
        "--context", "context_id", required=True, help="The code context's id or a unique prefix."
    )(function)
    return click.option(
        "--sandbox", "-s", "sandbox_id", required=True, shell_complete=complete_sandbox_ids
    )(function)


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
            echo_untrusted(context_line(context), one_line=True)
        if not contexts:
            echo_untrusted("no contexts")

    await with_backend(profile, data_dir, body)


def name_lines(names: list[InspectedName]) -> list[str]:
    """The listed names as aligned columns: name, type, size, repr."""
    rows = [(name.name, name.type, inspected_size(name.length, name.bytes)) for name in names]
    widths = [max((len(row[column]) for row in rows), default=0) for column in range(3)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        + "  "
        + name.repr
        for row, name in zip(rows, names, strict=True)
    ]


@contexts_group.command(
    "inspect",
    epilog="""\b
Examples:
  sandbox-workbench contexts inspect -s demo --context 3f2a
  sandbox-workbench contexts inspect -s demo --context 3f2a --json
  sandbox-workbench contexts inspect -s demo --context 3f2a --name xs
  sandbox-workbench contexts inspect -s demo --context 3f2a --name '%config' --offset 4096

\b
Lists the names the user made: Python globals, JavaScript global bindings, Perl
package variables and subs ($x, @x, %x, &x), Ruby top-level locals, globals and
constants; with their type, size and a short repr. The local backend and serve
inspect a copy of the context's stored state, so nothing about the context changes
(no run is counted). A Worker gateway can only run the inspector in the context
itself: pass --run-code to allow that (it counts as a run and stays in the history).
--name writes one value out in full, 4,096 characters a page (--offset for more).""",
)
@context_options
@click.option("--name", help="Write out this name's value in full (as listed: x, $x, @x...).")
@click.option(
    "--offset", type=click.IntRange(min=0), default=0, help="With --name: from this character."
)
@click.option(
    "--run-code",
    is_flag=True,
    help="On a gateway that cannot inspect a copy: run the inspector in the context.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the inspection as JSON.")
@backend_options
@run_async
async def inspect_command(
    sandbox_id: str,
    context_id: str,
    name: str | None,
    offset: int,
    run_code: bool,
    as_json: bool,
    profile: str,
    data_dir: Path | None,
) -> None:
    """List the names in a context's REPL state, or write one out in full."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        context = await find_context(sandbox, context_id)
        if context is None:
            raise CommandError(
                f"Code context '{context_id}' not found in sandbox {sandbox_id}", EXIT_NOT_FOUND
            )
        interpreter = sandbox.interpreter
        if name is not None:
            value = await interpreter.inspect_value(context, name, offset, run_code=run_code)
            if as_json:
                echo_json(value.to_json())
                return
            echo_untrusted(value.repr)
            end = value.offset + len(value.repr)
            note(f"{value.name}: {value.type}, characters {value.offset}-{end} of {value.total}")
            if end < value.total:
                note(f"more: --offset {end}")
            return
        inspection = await interpreter.inspect_context(context, run_code=run_code)
        if as_json:
            echo_json(inspection.to_json())
            return
        for line in name_lines(inspection.names):
            echo_untrusted(line, one_line=True)
        if not inspection.names:
            echo_untrusted("no names")
        if inspection.more:
            note(f"{inspection.more} more names not listed")
        state = f"the state of run {inspection.execution_count}"
        if inspection.ran_code:
            note(f"{state}, read by running the inspector in the context (it counted as a run)")
        else:
            note(f"{state}, read from a copy (the context did not run)")

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
@context_options
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


@contexts_group.group("checkpoint")
def checkpoint_group() -> None:
    """Keep a context's state under a name, and go back to it (local and serve)."""


def checkpoint_line(checkpoint: Checkpoint) -> str:
    return (
        f"{checkpoint.name}  saved {checkpoint.created_at}  after run {checkpoint.executions}  "
        f"{checkpoint.bytes} bytes"
    )


@checkpoint_group.command(
    "save",
    epilog="""\b
Examples:
  sandbox-workbench contexts checkpoint save -s demo --context 3f2a before-refactor

\b
Keeps the state of the context's last run (its memory snapshot, execution count and
cwd); a checkpoint of the same name is replaced. Up to 16 per context; names are
1-64 letters, digits, '.', '_' or '-'. They last until deleted, with the context.""",
)
@click.argument("name")
@context_options
@backend_options
@run_async
async def save_command(
    name: str, sandbox_id: str, context_id: str, profile: str, data_dir: Path | None
) -> None:
    """Keep the context's state under NAME."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        context = await full_context_id(sandbox, context_id)
        echo_untrusted(checkpoint_line(await sandbox.interpreter.save_checkpoint(context, name)))

    await with_backend(profile, data_dir, body)


@checkpoint_group.command(
    "list",
    epilog="""\b
Examples:
  sandbox-workbench contexts checkpoint list -s demo --context 3f2a
  sandbox-workbench contexts checkpoint list -s demo --context 3f2a --json""",
)
@context_options
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoints as JSON.")
@backend_options
@run_async
async def checkpoint_list_command(
    sandbox_id: str, context_id: str, as_json: bool, profile: str, data_dir: Path | None
) -> None:
    """List the context's checkpoints, oldest first: name, time, run and size."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        context = await full_context_id(sandbox, context_id)
        listed = await sandbox.interpreter.list_checkpoints(context)
        if as_json:
            echo_json(listed.to_json())
            return
        for checkpoint in listed.checkpoints:
            echo_untrusted(checkpoint_line(checkpoint), one_line=True)
        if not listed.checkpoints:
            echo_untrusted("no checkpoints")
        note(
            f"the sandbox's checkpoints hold {listed.sandbox_bytes} of their "
            f"{listed.budget_bytes}-byte budget"
        )

    await with_backend(profile, data_dir, body)


@checkpoint_group.command(
    "restore",
    epilog="""\b
Examples:
  sandbox-workbench contexts checkpoint restore -s demo --context 3f2a before-refactor

\b
The context's REPL state and cwd go back to the checkpoint; its history records the
restore (as a comment), so the execution count goes on.""",
)
@click.argument("name")
@context_options
@backend_options
@run_async
async def restore_command(
    name: str, sandbox_id: str, context_id: str, profile: str, data_dir: Path | None
) -> None:
    """Put the context back to checkpoint NAME."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        context = await full_context_id(sandbox, context_id)
        restored = await sandbox.interpreter.restore_checkpoint(context, name)
        note(f"restored {context} to {checkpoint_line(restored)}")

    await with_backend(profile, data_dir, body)


@checkpoint_group.command(
    "delete",
    epilog="""\b
Examples:
  sandbox-workbench contexts checkpoint delete -s demo --context 3f2a before-refactor""",
)
@click.argument("name")
@context_options
@backend_options
@run_async
async def delete_command(
    name: str, sandbox_id: str, context_id: str, profile: str, data_dir: Path | None
) -> None:
    """Delete checkpoint NAME (its memory goes unless another checkpoint or snapshot
    holds the same blocks)."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        context = await full_context_id(sandbox, context_id)
        await sandbox.interpreter.delete_checkpoint(context, name)
        note(f"deleted checkpoint {name} of {context}")

    await with_backend(profile, data_dir, body)
