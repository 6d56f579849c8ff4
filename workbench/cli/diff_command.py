"""`sandbox-workbench diff`: run code on two backends and show where they differ."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    backend_options,
    non_empty,
    note,
    parse_env,
    run_async,
    sandbox_id_value,
    timeout_option,
    with_backend,
)
from workbench.cli.completion import complete_bindings, complete_profiles, complete_sandbox_ids
from workbench.cli.run_command import binding_for_language, read_code
from workbench.cli.terminal import echo_json, echo_untrusted

if TYPE_CHECKING:
    from workbench.api import Backend, RuntimeInfo
    from workbench.transcripts import Outcome

EXAMPLES = """\b
Examples:
  sandbox-workbench diff --against staging -l python -c 'import sys; sys.version_info[:2]'
  sandbox-workbench diff -p dev --against staging -b PERL script.pl --json
  sandbox-workbench diff --against staging -s demo -l python -c 'len(open("data.csv").read())'
  echo 'print(6 * 7)' | sandbox-workbench diff --against staging -l python -

\b
Compared: stdout, stderr, results, and the error's name and message. Not compared:
durationMs, usage, context timestamps, executionCount and workbench boot notes.

\b
Exit status: 0 the backends agree, 1 they differ, 2 usage error, 3 a backend is
unreachable."""


def show_comparison(
    expected: Outcome, actual: Outcome, expected_label: str, actual_label: str
) -> None:
    """The outcome once when both agree, else a unified diff (`-` expected, `+` actual),
    coloured on a terminal unless NO_COLOR."""
    from workbench.transcripts import outcome_lines, unified_lines

    left, right = outcome_lines(expected), outcome_lines(actual)
    if expected == actual:
        for line in left:
            echo_untrusted(f"  {line}")
        return
    for line in unified_lines(left, right, expected_label, actual_label):
        colour = {"-": "red", "+": "green", "@": "cyan"}.get(line[:1])
        if line.startswith(("---", "+++")):
            colour = None
        echo_untrusted(line, fg=colour)


async def _runtime(backend: Backend, binding: str | None, language: str | None) -> RuntimeInfo:
    from workbench.transcripts import ReplayError, find_runtime

    if language is not None:
        binding = await binding_for_language(backend, language)
    try:
        return await find_runtime(backend, binding, None)
    except ReplayError as error:
        raise click.UsageError(str(error)) from None


def _side(profile: str, description: str, outcome: Outcome) -> dict[str, Any]:
    return {"profile": profile, "backend": description, "outcome": outcome.to_json()}


@click.command("diff", epilog=EXAMPLES)
@click.argument("source", required=False, metavar="[FILE | -]")
@click.option("-c", "--code", help="Code to run (instead of a FILE).")
@click.option(
    "--against",
    required=True,
    shell_complete=complete_profiles,
    help="The profile to compare with (the other side is --profile).",
)
@click.option(
    "--sandbox",
    "-s",
    "sandbox_id",
    callback=sandbox_id_value,
    shell_complete=complete_sandbox_ids,
    help="Run in a new context of this sandbox on both backends (deleted afterwards) "
    "instead of a scratch sandbox.",
)
@click.option(
    "--binding",
    "-b",
    callback=non_empty,
    shell_complete=complete_bindings,
    help="Runtime binding, e.g. PYTHON.",
)
@click.option(
    "--language", "-l", callback=non_empty, help="Language; picks each backend's binding for it."
)
@click.option("--stateless", is_flag=True, help="Run statelessly on the runtime (no sandbox).")
@click.option("--env", "-e", "env_pairs", multiple=True, metavar="KEY=VALUE", help="Env var.")
@click.option("--json", "as_json", is_flag=True, help="Print both outcomes and the verdict.")
@timeout_option
@backend_options
@run_async
async def diff_command(
    source: str | None,
    code: str | None,
    against: str,
    sandbox_id: str | None,
    binding: str | None,
    language: str | None,
    stateless: bool,
    env_pairs: tuple[str, ...],
    as_json: bool,
    timeout: float | None,
    profile: str,
    data_dir: Path | None,
) -> int:
    """Run code on two backends and compare what it did.

    Each side runs it in a fresh context of a scratch sandbox that is destroyed
    afterwards (or of --sandbox, on both backends; or --stateless), then the logs,
    results and error are compared.
    """
    from workbench.cli.progress import prepare_engine
    from workbench.protocol.http import validation_error
    from workbench.protocol.ids import untravelled_id_error
    from workbench.transcripts import Outcome, differing_fields, run_fresh

    if (binding is None) == (language is None):
        raise click.UsageError("choose exactly one of --binding, --language")
    if stateless and sandbox_id is not None:
        raise click.UsageError("--stateless runs without a sandbox; drop --sandbox")
    program = read_code(code, source)
    env = parse_env(env_pairs) or None
    descriptions: list[str] = []
    runtimes: list[RuntimeInfo] = []

    async def outcome_on(backend: Backend, runtime: RuntimeInfo) -> Outcome:
        descriptions.append(backend.description)
        result = await run_fresh(
            backend,
            program,
            runtime,
            sandbox_id=sandbox_id,
            stateless=stateless,
            env_vars=env,
            prepare=prepare_engine,
        )
        return Outcome.of(result)

    async def on_both(left: Backend) -> list[Outcome]:
        async def with_right(right: Backend) -> list[Outcome]:
            remote = left.engines is None or right.engines is None
            if sandbox_id in (".", "..") and remote:  # the local side would make it first
                raise validation_error(untravelled_id_error(f"sandbox {sandbox_id}"))
            # Both runtimes first: a side that lacks one fails before the other side ran
            # (and made --sandbox there; found in review).
            runtimes[:] = [await _runtime(side, binding, language) for side in (left, right)]
            return [await outcome_on(left, runtimes[0]), await outcome_on(right, runtimes[1])]

        if against == profile:  # one backend object: two local stores must not compete
            return await with_right(left)
        return await with_backend(against, data_dir, with_right, timeout=timeout)

    outcomes = await with_backend(profile, data_dir, on_both, timeout=timeout)
    expected, actual = outcomes
    if not stateless and runtimes[0].contexts != runtimes[1].contexts:
        in_context, plain = (profile, against) if runtimes[0].contexts else (against, profile)
        from workbench.api import LOCAL_ONLY_CONTEXT_LANGUAGES

        local_only = runtimes[0].language in LOCAL_ONLY_CONTEXT_LANGUAGES
        extension = " (a local extension)" if local_only else ""
        note(
            f"note: known difference: {in_context} ran it in a code context{extension}, "
            f"{plain} statelessly"
        )
    same = expected == actual
    if as_json:
        echo_json(
            {
                "same": same,
                "left": _side(profile, descriptions[0], expected),
                "right": _side(against, descriptions[1], actual),
            }
        )
    else:
        show_comparison(expected, actual, profile, against)
        if same:
            echo_untrusted(f"same on {profile} and {against}")
        else:
            parts = ", ".join(differing_fields(expected, actual))
            echo_untrusted(f"different on {profile} and {against}: {parts}")
    return EXIT_OK if same else EXIT_FAILED
