"""`sandbox-workbench contexts create | list | inspect | fork | reset | delete | checkpoint
save|list|restore|delete`: a sandbox's code contexts, their names and their checkpoints."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.api import (
    Backend,
    Checkpoint,
    CodeContext,
    ContextInfo,
    ErrorCode,
    InspectedName,
    SandboxClient,
    SandboxError,
    ValidationFailedError,
    inspected_size,
)
from workbench.api.display import counted, describe_backend, human_bytes
from workbench.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    Command,
    announce_destructive,
    backend_options,
    busy,
    confirm,
    find_context,
    full_context_id,
    non_empty,
    note,
    parse_env,
    run_async,
    said_if_slow,
    sandbox_option,
    with_backend,
)
from workbench.cli.completion import complete_bindings
from workbench.cli.errors import CommandError
from workbench.cli.run_command import binding_for_language
from workbench.cli.terminal import echo_json, echo_untrusted

NO_SUCH_NAME = "The context has no name "
"""How every backend's inspector starts its answer (400 VALIDATION_FAILED) for a name the
context does not have; the CLI reports it as not found."""


@click.group("contexts")
def contexts_group() -> None:
    """Create, list, inspect, fork, reset, delete and checkpoint a sandbox's code
    contexts."""


def context_options(function: Command) -> Command:
    """`-s/--sandbox` and `--context`, as `run` takes them."""
    function = click.option(
        "--context",
        "context_id",
        required=True,
        callback=non_empty,
        help="The code context's id or a unique prefix.",
    )(function)
    return sandbox_option(function)


async def existing_context(sandbox: SandboxClient, given: str) -> CodeContext:
    """The sandbox's context that `given` names (an id or a unique prefix); none is a
    not-found error."""
    context = await find_context(sandbox, given)
    if context is None:
        raise CommandError(
            f"Code context '{given}' not found in sandbox {sandbox.id}", EXIT_NOT_FOUND
        )
    return context


def context_line(context: ContextInfo) -> str:
    snapshot = context.snapshot
    state = "no snapshot" if snapshot is None else f"snapshot {human_bytes(snapshot.bytes)}"
    local_only = "  (local only)" if context.local_only else ""
    return (
        f"{context.id}  {context.binding}  {context.language}  {context.cwd}  "
        f"{counted(context.executions, 'run')}  {state}  last used {context.last_used}{local_only}"
    )


@contexts_group.command(
    "list",
    epilog="""\b
Examples:
  sandbox-workbench contexts list -s demo
  sandbox-workbench contexts list -s demo -p staging --json""",
)
@sandbox_option
@click.option("--json", "as_json", is_flag=True, help="Print the contexts as JSON.")
@backend_options
@run_async
async def list_command(sandbox_id: str, as_json: bool, profile: str, data_dir: Path | None) -> None:
    """List the sandbox's contexts: binding, language, cwd, runs and snapshot, oldest
    first."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        contexts = (await said_if_slow(sandbox.get_info(), busy(sandbox))).contexts
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
    "--offset",
    type=click.IntRange(min=0),
    help="With --name: from this character (default 0).",
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
    offset: int | None,
    run_code: bool,
    as_json: bool,
    profile: str,
    data_dir: Path | None,
) -> None:
    """List the names in a context's REPL state, or write one out in full."""
    if offset is not None and name is None:
        raise click.UsageError("--offset needs --name")

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        context = await existing_context(sandbox, context_id)
        interpreter = sandbox.interpreter
        if name is not None:
            try:
                value = await interpreter.inspect_value(
                    context, name, offset or 0, run_code=run_code
                )
            except SandboxError as error:
                if error.code == ErrorCode.VALIDATION_FAILED and error.message.startswith(
                    NO_SUCH_NAME
                ):
                    raise CommandError(error.message, EXIT_NOT_FOUND) from None
                raise
            if value.offset > 0 and value.offset >= value.total:
                raise CommandError(
                    f"--offset {value.offset} is past the end of {value.name}: it has "
                    f"{value.total} characters",
                    EXIT_USAGE,
                )
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
        fork = await said_if_slow(sandbox.interpreter.fork_code_context(origin), busy(sandbox))
        if as_json:
            echo_json(fork.to_json())
            return
        note(f"forked {origin} into a new {fork.binding} context")
        echo_untrusted(fork.id)

    await with_backend(profile, data_dir, body)


@contexts_group.command(
    "create",
    epilog="""\b
Examples:
  sandbox-workbench contexts create -s demo -l python
  sandbox-workbench contexts create -s demo -b PERL --cwd /workspace/src -e DEBUG=1 --json
  ctx=$(sandbox-workbench contexts create -s demo -l python)
  sandbox-workbench run -s demo --context "$ctx" -c 'import os; os.getcwd()'

\b
A sandbox holds at most 8 contexts: `contexts delete` frees one. The context's own
env vars (-e) override the sandbox's (`sandboxes env`) in each of its runs.""",
)
@sandbox_option
@click.option(
    "--binding",
    "-b",
    callback=non_empty,
    shell_complete=complete_bindings,
    help="Runtime binding, e.g. PYTHON.",
)
@click.option(
    "--language", "-l", callback=non_empty, help="Language; picks the backend's binding for it."
)
@click.option("--cwd", callback=non_empty, help="Its working directory (default: /workspace).")
@click.option(
    "--env",
    "-e",
    "env_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="An env var of the context's own.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new CodeContext JSON.")
@backend_options
@run_async
async def create_context_command(
    sandbox_id: str,
    binding: str | None,
    language: str | None,
    cwd: str | None,
    env_pairs: tuple[str, ...],
    as_json: bool,
    profile: str,
    data_dir: Path | None,
) -> None:
    """Create a code context; print its id."""
    if (binding is None) == (language is None):
        raise click.UsageError("choose exactly one of --binding, --language")
    env = parse_env(env_pairs)

    async def body(backend: Backend) -> None:
        target = binding if language is None else await binding_for_language(backend, language)
        assert target is not None
        sandbox = backend.sandbox(sandbox_id)
        try:
            creating = sandbox.interpreter.create_code_context(target, cwd, env or None)
            created = await said_if_slow(creating, busy(sandbox))
        except ValidationFailedError as error:
            if "contexts are not supported by binding" not in error.message or not (
                error.message.endswith("(ruby)")
            ):
                raise
            raise CommandError(
                f"{error.message} (Ruby contexts are a local extension: --ruby-contexts)",
                EXIT_USAGE,
            ) from None
        if as_json:
            echo_json(created.to_json())
            return
        note(f"created a {created.binding} context in {created.cwd}")
        echo_untrusted(created.id)

    await with_backend(profile, data_dir, body)


async def _context_to_change(
    backend: Backend,
    sandbox_id: str,
    context_id: str,
    question: tuple[str, str] | None,
    doing: str,
    *,
    recreated: bool = False,
) -> tuple[SandboxClient, CodeContext]:
    """The sandbox and context a destructive command changes: asked about first (`question`:
    its verb and the rest of the sentence; None: `--yes`), then announced on stderr.
    `recreated`: one like it is made next, which its binding must still offer."""
    sandbox = backend.sandbox(sandbox_id)
    context = await existing_context(sandbox, context_id)
    if recreated and (refused := await backend.contexts_refused(context.binding)):
        # It would be deleted, and none made in its place (found in review).
        raise CommandError(
            f"cannot reset context {context.id}: {refused}; nothing was deleted", EXIT_USAGE
        )
    if question is not None:
        verb, consequence = question
        confirm(
            f"{verb} {context.binding} context {context.id} of sandbox {sandbox.id} on "
            f"{describe_backend(backend)}{consequence}"
        )
    announce_destructive(f"{doing} context {context.id} of sandbox {sandbox.id}", backend)
    return sandbox, context


@contexts_group.command(
    "delete",
    epilog="""\b
Examples:
  sandbox-workbench contexts delete -s demo --context 3f2a
  sandbox-workbench -p staging contexts delete -s demo --context 3f2a --yes""",
)
@context_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@backend_options
@run_async
async def delete_context_command(
    sandbox_id: str, context_id: str, yes: bool, profile: str, data_dir: Path | None
) -> None:
    """Delete a code context: its REPL state, history and checkpoints.

    Which backend it acts on is named in the question and printed on stderr before it
    acts.
    """

    async def body(backend: Backend) -> None:
        sandbox, context = await _context_to_change(
            backend,
            sandbox_id,
            context_id,
            None if yes else ("Delete", ", with its REPL state, history and checkpoints?"),
            "deleting",
        )
        await sandbox.interpreter.delete_code_context(context)
        echo_untrusted(f"deleted context {context.id}")

    await with_backend(profile, data_dir, body)


@contexts_group.command(
    "reset",
    epilog="""\b
Examples:
  sandbox-workbench contexts reset -s demo --context 3f2a
  new=$(sandbox-workbench contexts reset -s demo --context 3f2a --yes)

\b
As the workbench's reset: the context is deleted and a new one of the same binding
and cwd is created, with a new id. Its REPL state, history and checkpoints are lost;
so are its own env vars, which the gateway protocol does not report (give them to
`contexts create -e` instead).""",
)
@context_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the new CodeContext JSON.")
@backend_options
@run_async
async def reset_context_command(
    sandbox_id: str, context_id: str, yes: bool, as_json: bool, profile: str, data_dir: Path | None
) -> None:
    """Start a context afresh (a new context in its place); print the new id.

    Which backend it acts on is named in the question and printed on stderr before it
    acts.
    """

    async def body(backend: Backend) -> None:
        consequence = (
            "? It is deleted and created again with a new id: its REPL state, history and "
            "checkpoints are lost."
        )
        question = None if yes else ("Reset", consequence)
        sandbox, context = await _context_to_change(
            backend, sandbox_id, context_id, question, "resetting", recreated=True
        )
        interpreter = sandbox.interpreter
        await interpreter.delete_code_context(context)
        fresh = await interpreter.create_code_context(context.binding, context.cwd)
        if as_json:
            echo_json(fresh.to_json())
            return
        note(f"reset {context.id}: a new {fresh.binding} context in {fresh.cwd}")
        echo_untrusted(fresh.id)

    await with_backend(profile, data_dir, body)


@contexts_group.group("checkpoint")
def checkpoint_group() -> None:
    """Keep a context's state under a name, and go back to it (local and serve)."""


def checkpoint_line(checkpoint: Checkpoint) -> str:
    return (
        f"{checkpoint.name}  saved {checkpoint.created_at}  after run {checkpoint.executions}  "
        f"{human_bytes(checkpoint.bytes)}"
    )


@checkpoint_group.command(
    "save",
    epilog="""\b
Examples:
  sandbox-workbench contexts checkpoint save -s demo --context 3f2a before-refactor

\b
Keeps the state of the context's last run (its memory snapshot, execution count and
cwd); a checkpoint of the same name is replaced, which a note says. Up to 16 per context; names are
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
        listed = await said_if_slow(sandbox.interpreter.list_checkpoints(context), busy(sandbox))
        replaced = next((saved for saved in listed.checkpoints if saved.name == name), None)
        echo_untrusted(checkpoint_line(await sandbox.interpreter.save_checkpoint(context, name)))
        if replaced is not None:  # said, as the TUI asks first (QA: a state lost unsaid)
            note(
                f"replaced the checkpoint {name} saved {replaced.created_at} after run "
                f"{replaced.executions}"
            )

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
        listed = await said_if_slow(sandbox.interpreter.list_checkpoints(context), busy(sandbox))
        if as_json:
            echo_json(listed.to_json())
            return
        for checkpoint in listed.checkpoints:
            echo_untrusted(checkpoint_line(checkpoint), one_line=True)
        if not listed.checkpoints:
            echo_untrusted("no checkpoints")
        note(
            f"the sandbox's checkpoints hold {human_bytes(listed.sandbox_bytes)} of their "
            f"{human_bytes(listed.budget_bytes)} budget"
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
        restoring = sandbox.interpreter.restore_checkpoint(context, name)
        restored = await said_if_slow(restoring, busy(sandbox))
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
        await said_if_slow(sandbox.interpreter.delete_checkpoint(context, name), busy(sandbox))
        note(f"deleted checkpoint {name} of {context}")

    await with_backend(profile, data_dir, body)
