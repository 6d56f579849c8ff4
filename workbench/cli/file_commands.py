"""`sandbox-workbench files ls | cat | put | rm | mkdir` against a sandbox's /workspace."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from workbench.api.client import Backend
from workbench.cli.common import backend_options, echo_json, run_async, with_backend


@click.group("files")
def files_group() -> None:
    """Read and change a sandbox's /workspace."""


@files_group.command("ls")
@click.argument("sandbox_id")
@click.argument("path", default="/workspace")
@click.option("--recursive", "-r", is_flag=True, help="List subdirectories too.")
@click.option("--all", "-a", "include_hidden", is_flag=True, help="Include hidden entries.")
@click.option("--json", "as_json", is_flag=True, help="Print FileInfo JSON.")
@backend_options
@run_async
async def ls_command(
    sandbox_id: str,
    path: str,
    recursive: bool,
    include_hidden: bool,
    as_json: bool,
    profile: str,
    data_dir: Path | None,
) -> None:
    """List a directory."""

    async def body(backend: Backend) -> None:
        listing = await backend.sandbox(sandbox_id).list_files(
            path, recursive=recursive or None, include_hidden=include_hidden or None
        )
        if as_json:
            echo_json([info.to_json() for info in listing.files])
            return
        for info in listing.files:
            suffix = "/" if info.is_directory else ""
            click.echo(
                f"{info.mode}  {info.size:>9}  {info.modified_at}  {info.relative_path}{suffix}"
            )

    await with_backend(profile, data_dir, body)


@files_group.command("cat")
@click.argument("sandbox_id")
@click.argument("path")
@backend_options
@run_async
async def cat_command(sandbox_id: str, path: str, profile: str, data_dir: Path | None) -> None:
    """Write a file's bytes to stdout."""

    async def body(backend: Backend) -> None:
        data = await backend.sandbox(sandbox_id).read_bytes(path)
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    await with_backend(profile, data_dir, body)


@files_group.command("put")
@click.argument("sandbox_id")
@click.argument("source", metavar="LOCAL_FILE | -")
@click.argument("path", required=False)
@backend_options
@run_async
async def put_command(
    sandbox_id: str, source: str, path: str | None, profile: str, data_dir: Path | None
) -> None:
    """Upload a local file (or stdin) to PATH (default: /workspace/<its name>)."""
    if source == "-":
        if path is None:
            raise click.UsageError("give the destination PATH when reading stdin")
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as error:
            raise click.UsageError(f"cannot read {source}: {error.strerror}") from error
    destination = path or f"/workspace/{Path(source).name}"

    async def body(backend: Backend) -> None:
        written = await backend.sandbox(sandbox_id).write_file(destination, data)
        click.echo(f"wrote {len(data)} bytes to {written.path}")

    await with_backend(profile, data_dir, body)


@files_group.command("rm")
@click.argument("sandbox_id")
@click.argument("path")
@click.option("--recursive", "-r", is_flag=True, help="Remove a directory and its contents.")
@click.option("--force", "-f", is_flag=True, help="No error when the path does not exist.")
@backend_options
@run_async
async def rm_command(
    sandbox_id: str, path: str, recursive: bool, force: bool, profile: str, data_dir: Path | None
) -> None:
    """Delete a file (or a directory with -r)."""

    async def body(backend: Backend) -> None:
        deleted = await backend.sandbox(sandbox_id).delete_file(
            path, recursive=recursive or None, force=force or None
        )
        click.echo(f"deleted {deleted.path}")

    await with_backend(profile, data_dir, body)


@files_group.command("mkdir")
@click.argument("sandbox_id")
@click.argument("path")
@click.option(
    "--parents", "-p", is_flag=True, help="Create missing parents; no error if it exists."
)
@backend_options
@run_async
async def mkdir_command(
    sandbox_id: str, path: str, parents: bool, profile: str, data_dir: Path | None
) -> None:
    """Create a directory."""

    async def body(backend: Backend) -> None:
        made = await backend.sandbox(sandbox_id).mkdir(path, recursive=parents or None)
        click.echo(f"created {made.path}")

    await with_backend(profile, data_dir, body)
