"""`sandbox-workbench sandboxes list | info ID | destroy ID`."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.api import (
    Backend,
    SandboxInfo,
    iso_from_ms,
)
from workbench.api.costs import ESTIMATE_NOTE, dollars_text, runs_text, sandbox_cost
from workbench.cli.common import (
    announce_destructive,
    backend_options,
    run_async,
    with_backend,
)
from workbench.cli.completion import complete_sandbox_ids
from workbench.cli.terminal import echo_json, echo_untrusted
from workbench.config import Config, ConfigError, Prices


@click.group("sandboxes")
def sandboxes_group() -> None:
    """List, inspect and destroy sandboxes."""


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
        ("workspace", f"{info.workspace_files} files, {info.workspace_bytes} bytes"),
        ("env vars", ", ".join(sorted(info.env_vars)) or "none"),
        ("contexts", str(len(info.contexts)) if info.contexts else "none"),
    ]
    for label, value in rows:
        echo_untrusted(f"{label:<11}{value}")
    for context in info.contexts:
        local_only = "  (local only)" if context.local_only else ""
        echo_untrusted(
            f"  {context.id}  {context.language}  {context.cwd}  "
            f"{context.executions} runs, last {context.last_used}{local_only}",
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
@click.argument("sandbox_id", shell_complete=complete_sandbox_ids)
@click.option("--json", "as_json", is_flag=True, help="Print the SandboxInfo JSON.")
@backend_options
@run_async
async def info_command(sandbox_id: str, as_json: bool, profile: str, data_dir: Path | None) -> None:
    """Show a sandbox: times, workspace size, env var names, contexts, checkpoints and
    what its kept runs would cost on Workers (an estimate at the config's [prices])."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        info = await sandbox.get_info()
        if as_json:
            echo_json(info.to_json())
            return
        print_info(info)
        contexts = [context.id for context in info.contexts]
        usage = await sandbox.interpreter.checkpoint_usage(contexts)
        if usage is not None:
            echo_untrusted(
                f"  checkpoints: {usage.count}, {usage.sandbox_bytes} of a "
                f"{usage.budget_bytes}-byte budget"
            )
        prices = configured_prices()
        cost = await sandbox_cost(sandbox, info, prices)
        if cost is not None:
            echo_untrusted(
                f"cost       ≈ {dollars_text(cost.usd)} on Workers for the "
                f"{runs_text(cost.runs)} kept ({ESTIMATE_NOTE}; prices of "
                f"{prices.date or 'unknown date'} from {prices.source})"
            )

    await with_backend(profile, data_dir, body)


@sandboxes_group.command(
    "destroy",
    epilog="""\b
Examples:
  sandbox-workbench sandboxes destroy demo
  sandbox-workbench -p staging sandboxes destroy old-demo --yes""",
)
@click.argument("sandbox_id", shell_complete=complete_sandbox_ids)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@backend_options
@run_async
async def destroy_command(sandbox_id: str, yes: bool, profile: str, data_dir: Path | None) -> None:
    """Destroy a sandbox: its files, env vars, contexts and history.

    Which backend it acts on is printed on stderr first.
    """

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        announce_destructive(f"destroying sandbox {sandbox.id}", backend)
        if not yes:
            click.confirm(f"Destroy sandbox {sandbox.id} and everything in it?", abort=True)
        await sandbox.destroy()
        echo_untrusted(f"destroyed {sandbox.id}")

    await with_backend(profile, data_dir, body)
