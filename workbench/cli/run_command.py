"""`sandbox-workbench run`: execute code statelessly or in a sandbox's context."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import click

from workbench.api import Backend, ExecutionResult, SandboxClient
from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    backend_options,
    full_context_id,
    global_options,
    non_empty,
    parse_env,
    read_source,
    run_async,
    sandbox_id_value,
    timeout_option,
    with_backend,
)
from workbench.cli.completion import complete_bindings, complete_sandbox_ids
from workbench.cli.errors import CommandError
from workbench.cli.terminal import echo_json, echo_untrusted
from workbench.protocol.http import CODE_BYTES_CAP

EXAMPLES = """\b
Examples:
  sandbox-workbench run -l python -c 'import sys; sys.version'
  sandbox-workbench run -s demo -l perl -c 'our $n = 41'   # a context in sandbox demo
  sandbox-workbench run -s demo -l perl -c '$n + 1'        # 42: REPL state persists
  sandbox-workbench run -b RUBY script.rb --json
  echo 'print(6 * 7)' | sandbox-workbench run -l python -
  sandbox-workbench run --timeout 5 -l javascript -c 'while (true) {}'

\b
Exit status: 0 success, 1 guest error or limit, 2 usage error, 3 backend
unreachable, 4 code context not found (a sandbox comes into being on first use)."""


BOM = "\ufeff"
"""A byte order mark some editors start a UTF-8 file with: not code (a guest's syntax
error otherwise)."""


def read_code(code: str | None, source: str | None) -> str:
    if code is not None and source is not None:
        raise click.UsageError("give either -c CODE or a FILE (or - for stdin), not both")
    if code is not None:
        return code
    if source is None:
        raise click.UsageError("nothing to run: give -c CODE, a FILE, or - to read stdin")
    name = "stdin" if source == "-" else source
    too_large = CommandError(
        f"{name} is over {CODE_BYTES_CAP:,} bytes: a run takes no more", EXIT_USAGE
    )
    limit = 2 * CODE_BYTES_CAP + len(BOM.encode())  # room for CRLF line ends, no more
    data = read_source(source, limit)
    if len(data) > limit:  # the gateway would refuse it (spec 2.2.1): read no further
        raise too_large
    try:
        text = data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as error:
        raise click.UsageError(
            f"cannot read {name}: not UTF-8 text (byte {error.object[error.start]:#04x} "
            f"at offset {error.start})"
        ) from error
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads it
    if len(text.encode("utf-8")) > CODE_BYTES_CAP:
        raise too_large
    return text


async def binding_for_language(backend: Backend, language: str) -> str:
    """The backend's binding that serves `language` (e.g. PYTHON for python)."""
    from engines.registry import resolve_language

    try:
        wanted = resolve_language(language)
    except KeyError as error:
        raise click.UsageError(str(error.args[0])) from error
    for runtime in await backend.runtimes():
        if runtime.language == wanted:
            return runtime.binding
    raise click.UsageError(f"{backend.name} offers no {wanted} runtime")


def say_waiting(sandbox_id: str, waits: bool) -> None:
    """The note of a run that waits for its sandbox's turn: silent, it looked hung."""
    if not waits:  # its turn came: its output says so
        return
    echo_untrusted(
        f"note: sandbox {sandbox_id} is busy with another client's run; this run waits "
        "for it to end (Ctrl+C gives up)",
        err=True,
        fg="yellow",
    )


def print_result(result: ExecutionResult, *, logs: bool = True) -> int:
    """Logs to stdout/stderr (unless they were printed as they came), then the value or
    the error; returns the exit code.

    All of it is guest-controlled, so a terminal gets it neutralised (`echo_untrusted`).
    """
    if logs:
        for line in result.stdout:
            echo_untrusted(line)
        for line in result.stderr:
            echo_untrusted(line, err=True)
    for entry in result.results:
        if entry.is_json:
            echo_untrusted(json.dumps(entry.json, indent=2, ensure_ascii=False))
        else:
            echo_untrusted(entry.text or "")
    if result.error is not None:
        # Here: the transcripts package costs 15 ms of start-up, needed only for an error.
        from workbench.transcripts.documents import error_header, error_traceback

        # Once: Python's traceback starts with the `Name: message` line printed first.
        for line in error_header(result.error):
            echo_untrusted(line, err=True, fg="red")
        for line in error_traceback(result.error):
            echo_untrusted(line, err=True)
        return EXIT_FAILED
    return EXIT_OK


async def _unprepared_context_engine(
    backend: Backend, sandbox: SandboxClient, context_id: str
) -> str | None:
    """On the local backend, the language of the context's engine if it is not ready (to
    prepare it with progress first), else None. The contexts are listed only when some
    engine is not ready: a listing waits its turn in the sandbox's queue, and commands
    other clients give meanwhile would go before the run."""
    if backend.engines is None or all(info.ready for info in await backend.engines.statuses()):
        return None
    for context in await sandbox.interpreter.list_code_contexts():
        if context.id == context_id:
            return context.language
    return None


async def _binding_and_language(
    backend: Backend, binding: str | None, language: str | None
) -> tuple[str | None, str | None]:
    """The binding to run on and, on the local backend, the language whose engine runs
    it (None where the backend reports the problem itself: an unknown binding; and on a
    remote backend, which prepares its own engines)."""
    if language is not None:
        binding = await binding_for_language(backend, language)
    if backend.engines is None:
        return binding, None
    for runtime in await backend.runtimes():
        if runtime.binding == binding:
            return binding, runtime.language
    return binding, None


@click.command("run", epilog=EXAMPLES)
@click.argument("source", required=False, metavar="[FILE | -]")
@click.option("-c", "--code", help="Code to run (instead of a FILE).")
@click.option(
    "--sandbox",
    "-s",
    "sandbox_id",
    callback=sandbox_id_value,
    shell_complete=complete_sandbox_ids,
    help="Run in this sandbox (stateful).",
)
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
@click.option(
    "--context",
    "context_id",
    callback=non_empty,
    help="Run in this code context, by id or a unique prefix of it (needs --sandbox).",
)
@click.option("--env", "-e", "env_pairs", multiple=True, metavar="KEY=VALUE", help="Env var.")
@click.option("--json", "as_json", is_flag=True, help="Print the ExecutionResult JSON.")
@timeout_option
@backend_options
@run_async
async def run_command(
    source: str | None,
    code: str | None,
    sandbox_id: str | None,
    binding: str | None,
    language: str | None,
    context_id: str | None,
    env_pairs: tuple[str, ...],
    as_json: bool,
    timeout: float | None,
    profile: str,
    data_dir: Path | None,
) -> int:
    """Run code: statelessly, or in a sandbox's context (REPL state persists).

    The first run of a language on the local backend prepares its engine first, with
    progress on stderr (minutes, once).
    """
    from workbench.cli.progress import prepare_engine

    chosen = [
        name
        for name, value in (
            ("--binding", binding),
            ("--language", language),
            ("--context", context_id),
        )
        if value is not None
    ]
    if len(chosen) != 1:
        raise click.UsageError("choose exactly one of --binding, --language, --context")
    if context_id is not None and sandbox_id is None:
        raise click.UsageError("--context needs --sandbox")
    program = read_code(code, source)
    env = parse_env(env_pairs)

    async def body(backend: Backend) -> ExecutionResult:
        sandbox = None if sandbox_id is None else backend.sandbox(sandbox_id)
        context, target, engine_language = None, None, None
        if context_id is not None and sandbox is not None:
            context = await full_context_id(sandbox, context_id)
            engine_language = await _unprepared_context_engine(backend, sandbox, context)
        else:
            target, engine_language = await _binding_and_language(backend, binding, language)
        if engine_language is not None:
            await prepare_engine(backend, engine_language)
        if sandbox is None:
            assert target is not None
            return await backend.run_code(program, binding=target, env_vars=env or None)
        return await sandbox.interpreter.run_code(
            program,
            context=context,
            binding=None if context else target,
            env_vars=env or None,
            on_stdout=None if as_json else echo_untrusted,
            on_stderr=None if as_json else partial(echo_untrusted, err=True),
            on_wait=None if global_options().quiet else partial(say_waiting, sandbox.id),
        )

    result = await with_backend(profile, data_dir, body, timeout=timeout)
    quiet = global_options().quiet
    if sandbox_id is not None and result.context is None and not quiet:
        # The binding has no code contexts, so the sandbox ran it statelessly (spec 2.4.1).
        hint = " (Ruby contexts are a local extension: --ruby-contexts)"
        echo_untrusted(
            f"note: {result.language} has no code contexts here: it ran statelessly, without "
            f"REPL state or /workspace{hint if result.language == 'ruby' else ''}",
            err=True,
            fg="yellow",
        )
    session_state = result.session if not quiet else None
    if session_state is not None and session_state.state_lost:
        for note in session_state.boot_notes:
            echo_untrusted(f"warning: {note}", err=True, fg="yellow")
    if as_json:
        echo_json(result.to_json())
        return EXIT_OK if result.error is None else EXIT_FAILED
    status = print_result(result, logs=sandbox_id is None)  # a context's logs streamed
    for note in session_state.reset_notes if session_state is not None else ():
        echo_untrusted(f"note: {note}", err=True, fg="yellow")
    return status
