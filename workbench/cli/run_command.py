"""`sandbox-workbench run`: execute code statelessly or in a sandbox's context."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from workbench.api.client import Backend
from workbench.api.types import ExecutionResult
from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    backend_options,
    echo_json,
    run_async,
    with_backend,
)


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--env")
        env[key] = value
    return env


def read_code(code: str | None, source: str | None) -> str:
    if code is not None and source is not None:
        raise click.UsageError("give either -c CODE or a FILE (or - for stdin), not both")
    if code is not None:
        return code
    if source is None:
        raise click.UsageError("nothing to run: give -c CODE, a FILE, or - to read stdin")
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text(encoding="utf-8")
    except OSError as error:
        raise click.UsageError(f"cannot read {source}: {error.strerror}") from error


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


def print_result(result: ExecutionResult) -> int:
    """Logs to stdout/stderr, then the value or the error; returns the exit code."""
    for line in result.stdout:
        click.echo(line)
    for line in result.stderr:
        click.echo(line, err=True)
    for entry in result.results:
        if entry.is_json:
            click.echo(json.dumps(entry.json, indent=2, ensure_ascii=False))
        else:
            click.echo(entry.text)
    if result.error is not None:
        click.secho(f"{result.error.name}: {result.error.message}", fg="red", err=True)
        for line in result.error.traceback:
            click.echo(line, err=True)
        return EXIT_FAILED
    return EXIT_OK


@click.command("run")
@click.argument("source", required=False, metavar="[FILE | -]")
@click.option("-c", "--code", help="Code to run (instead of a FILE).")
@click.option("--sandbox", "-s", "sandbox_id", help="Run in this sandbox (stateful).")
@click.option("--binding", "-b", help="Runtime binding, e.g. PYTHON.")
@click.option("--language", "-l", help="Language; picks the backend's binding for it.")
@click.option("--context", "context_id", help="Run in this code context (needs --sandbox).")
@click.option("--env", "-e", "env_pairs", multiple=True, metavar="KEY=VALUE", help="Env var.")
@click.option("--json", "as_json", is_flag=True, help="Print the ExecutionResult JSON.")
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
    profile: str,
    data_dir: Path | None,
) -> int:
    """Run code: statelessly, or in a sandbox's context (REPL state persists).

    Exit status: 0 success, 1 guest error or limit, 2 usage error.
    """
    chosen = [
        name
        for name, value in (
            ("--binding", binding),
            ("--language", language),
            ("--context", context_id),
        )
        if value
    ]
    if len(chosen) != 1:
        raise click.UsageError("choose exactly one of --binding, --language, --context")
    if context_id and not sandbox_id:
        raise click.UsageError("--context needs --sandbox")
    program = read_code(code, source)
    env = parse_env(env_pairs)

    async def body(backend: Backend) -> ExecutionResult:
        target = binding
        if language:
            target = await binding_for_language(backend, language)
        if sandbox_id is None:
            assert target is not None
            return await backend.run_code(target, program, env_vars=env or None)
        sandbox = backend.sandbox(sandbox_id)
        return await sandbox.interpreter.run_code(
            program,
            context=context_id,
            binding=None if context_id else target,
            env_vars=env or None,
        )

    try:
        result = await with_backend(profile, data_dir, body)
    except ValueError as error:
        click.echo(f"error: {error}", err=True)
        return EXIT_USAGE
    if result.session is not None and result.session.state_lost:
        for note in result.session.notes:
            click.secho(f"warning: {note}", fg="yellow", err=True)
    if as_json:
        echo_json(result.to_json())
        return EXIT_OK if result.error is None else EXIT_FAILED
    return print_result(result)
