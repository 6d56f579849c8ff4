"""`sandbox-workbench sandboxes list | info ID | env ID | destroy ID`."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.api import (
    Backend,
    SandboxInfo,
    iso_from_ms,
)
from workbench.api.costs import ESTIMATE_NOTE, dollars_text, sandbox_cost
from workbench.api.display import counted, describe_backend, human_bytes, workspace_summary
from workbench.cli.common import (
    announce_destructive,
    backend_options,
    busy,
    confirm,
    note,
    parse_env,
    run_async,
    said_if_slow,
    sandbox_id_value,
    with_backend,
)
from workbench.cli.completion import complete_sandbox_ids
from workbench.cli.terminal import echo_json, echo_untrusted
from workbench.config import Config, ConfigError, Prices


@click.group("sandboxes")
def sandboxes_group() -> None:
    """List, inspect and destroy sandboxes; show and set their env vars."""


@sandboxes_group.command(
    "list",
    epilog="""\b
Examples:
  sandbox-workbench sandboxes list
  sandbox-workbench sandboxes list -p staging --json""",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@backend_options
@run_async
async def list_command(as_json: bool, profile: str, data_dir: Path | None) -> None:
    """List the backend's sandboxes."""

    async def body(backend: Backend) -> None:
        sandboxes = await backend.list_sandboxes()
        if as_json:
            echo_json({"sandboxes": [sandbox.to_json() for sandbox in sandboxes]})
            return
        if not sandboxes:
            echo_untrusted("no sandboxes")
            return
        for sandbox in sandboxes:
            expires = "never" if sandbox.expires_at is None else iso_from_ms(sandbox.expires_at)
            echo_untrusted(f"{sandbox.id}\tlast used {sandbox.last_used}\texpires {expires}")

    await with_backend(profile, data_dir, body)


def print_info(info: SandboxInfo) -> None:
    """A sandbox's info for people: env var values stay hidden (`--json` shows them)."""
    expires = "never" if info.expires_at is None else iso_from_ms(info.expires_at)
    rows = [
        ("sandbox", info.id),
        ("created", info.created_at),
        ("last used", info.last_used),
        ("expires", expires),
        (
            "workspace",
            workspace_summary(info.workspace_files, info.workspace_bytes),
        ),
        ("env vars", ", ".join(sorted(info.env_vars)) or "none"),
        ("contexts", str(len(info.contexts)) if info.contexts else "none"),
    ]
    for label, value in rows:
        echo_untrusted(f"{label:<11}{value}")
    for context in info.contexts:
        local_only = "  (local only)" if context.local_only else ""
        echo_untrusted(
            f"  {context.id}  {context.language}  {context.cwd}  "
            f"{counted(context.executions, 'run')}, last {context.last_used}{local_only}",
            one_line=True,
        )


def configured_prices() -> Prices:
    """The config file's `[prices]` (the defaults when it cannot be read: a warning
    said so already)."""
    try:
        return Config.load().prices
    except ConfigError:
        return Prices()


@sandboxes_group.command(
    "info",
    epilog="""\b
Examples:
  sandbox-workbench sandboxes info demo
  sandbox-workbench sandboxes info demo --json   # SandboxInfo, env var values included""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.option("--json", "as_json", is_flag=True, help="Print the SandboxInfo JSON.")
@backend_options
@run_async
async def info_command(sandbox_id: str, as_json: bool, profile: str, data_dir: Path | None) -> None:
    """Show a sandbox: times, workspace size, env var names, contexts, checkpoints and
    what its kept runs would cost on Workers (an estimate at the config's [prices])."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        info = await said_if_slow(sandbox.get_info(), busy(sandbox))
        if as_json:
            echo_json(info.to_json())
            return
        print_info(info)
        contexts = [context.id for context in info.contexts]
        usage = await sandbox.interpreter.checkpoint_usage(contexts)
        if usage is not None:
            echo_untrusted(
                f"  checkpoints: {usage.count}, {human_bytes(usage.sandbox_bytes)} of a "
                f"{human_bytes(usage.budget_bytes)} budget"
            )
        prices = configured_prices()
        cost = await sandbox_cost(sandbox, info, prices)
        if cost is not None:
            echo_untrusted(
                f"cost       ≈ {dollars_text(cost.usd)} on Workers for the "
                f"{counted(cost.runs, 'run')} kept ({ESTIMATE_NOTE}; prices of "
                f"{prices.date or 'unknown date'} from {prices.source})"
            )

    await with_backend(profile, data_dir, body)


@sandboxes_group.command(
    "env",
    epilog="""\b
Examples:
  sandbox-workbench sandboxes env demo
  sandbox-workbench sandboxes env demo API_URL=https://example.com DEBUG=1
  sandbox-workbench sandboxes env demo --unset DEBUG --json

\b
Every context of the sandbox and every run in it sees these (a context's own env vars
and a run's --env override them). Values are printed: they may be secrets.""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.argument("assignments", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--unset", "unset_keys", multiple=True, metavar="KEY", help="Remove this env var.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the env vars (after a change) as JSON."
)
@backend_options
@run_async
async def env_command(
    sandbox_id: str,
    assignments: tuple[str, ...],
    unset_keys: tuple[str, ...],
    as_json: bool,
    profile: str,
    data_dir: Path | None,
) -> None:
    """Show a sandbox's env vars as KEY=VALUE lines, or set and unset some."""
    values = parse_env(assignments, param_hint="'[KEY=VALUE]...'")
    both = sorted(set(values) & set(unset_keys))
    if both:
        raise click.UsageError(f"{', '.join(both)}: both set and --unset; choose one")

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        env_vars = (await said_if_slow(sandbox.get_info(), busy(sandbox))).env_vars
        if values or unset_keys:
            was_set = [key for key in unset_keys if key in env_vars]
            await sandbox.set_env_vars({**dict.fromkeys(unset_keys), **values})
            env_vars = (await sandbox.get_info()).env_vars
            not_set = [key for key in unset_keys if key not in was_set]
            if not_set:
                note(f"note: not set, so not unset: {', '.join(not_set)}")
            if not as_json:
                changes = [f"set {', '.join(values)}"] if values else []
                changes += [f"unset {', '.join(was_set)}"] if was_set else []
                done = " and ".join(changes) or "nothing changed"
                echo_untrusted(f"{done} in sandbox {sandbox.id}")
                return
        if as_json:
            echo_json({"envVars": env_vars})
            return
        for key in sorted(env_vars):
            echo_untrusted(f"{key}={env_vars[key]}", one_line=True)
        if not env_vars:
            echo_untrusted("no env vars")

    await with_backend(profile, data_dir, body)


@sandboxes_group.command(
    "destroy",
    epilog="""\b
Examples:
  sandbox-workbench sandboxes destroy demo
  sandbox-workbench -p staging sandboxes destroy old-demo --yes""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@backend_options
@run_async
async def destroy_command(sandbox_id: str, yes: bool, profile: str, data_dir: Path | None) -> None:
    """Destroy a sandbox: its files, env vars, contexts and history.

    Which backend it acts on is named in the question and printed on stderr before it
    acts. The local backend says when there is nothing to destroy; a gateway cannot
    tell (it lists only the sandboxes it saw created), so it is asked to destroy one
    it does not list too, and the answer says so.
    """

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        where = describe_backend(backend)
        if not yes:
            confirm(f"Destroy sandbox {sandbox.id} on {where} and everything in it?")
        announce_destructive(f"destroying sandbox {sandbox.id}", backend)
        # DELETE answers success whether or not it existed: only the listing can tell.
        listed = sandbox.id in {summary.id for summary in await backend.list_sandboxes()}
        if not listed and backend.engines is not None:  # the local backend lists them all
            echo_untrusted(f"nothing to destroy: no sandbox {sandbox.id} on {where}")
            return
        await sandbox.destroy()
        unlisted = "" if listed else " (the gateway did not list it: it may not have existed)"
        echo_untrusted(f"destroyed {sandbox.id}{unlisted}")

    await with_backend(profile, data_dir, body)
