"""`sandbox-workbench sandboxes list | info ID | destroy ID`."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.api.client import Backend
from workbench.cli.common import backend_options, echo_json, run_async, with_backend
from workbench.core.clock import iso_from_ms


@click.group("sandboxes")
def sandboxes_group() -> None:
    """List, inspect and destroy sandboxes."""


@sandboxes_group.command("list")
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
            click.echo("no sandboxes")
            return
        for sandbox in sandboxes:
            expires = "never" if sandbox.expires_at is None else iso_from_ms(sandbox.expires_at)
            click.echo(f"{sandbox.id}\tlast used {sandbox.last_used}\texpires {expires}")

    await with_backend(profile, data_dir, body)


@sandboxes_group.command("info")
@click.argument("sandbox_id")
@backend_options
@run_async
async def info_command(sandbox_id: str, profile: str, data_dir: Path | None) -> None:
    """Print a sandbox's SandboxInfo as JSON."""

    async def body(backend: Backend) -> None:
        echo_json((await backend.sandbox(sandbox_id).get_info()).to_json())

    await with_backend(profile, data_dir, body)


@sandboxes_group.command("destroy")
@click.argument("sandbox_id")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@backend_options
@run_async
async def destroy_command(sandbox_id: str, yes: bool, profile: str, data_dir: Path | None) -> None:
    """Destroy a sandbox: its files, env vars, contexts and history."""
    if not yes:
        click.confirm(f"Destroy sandbox {sandbox_id} and everything in it?", abort=True)

    async def body(backend: Backend) -> None:
        await backend.sandbox(sandbox_id).destroy()
        click.echo(f"destroyed {sandbox_id}")

    await with_backend(profile, data_dir, body)
