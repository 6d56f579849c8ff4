"""`sandbox-workbench files ls | cat | put | rm | mkdir` against a sandbox's /workspace."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import click

from workbench.api import Backend, ErrorCode, SandboxError, SandboxFileNotFoundError
from workbench.api.display import human_bytes
from workbench.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    announce_destructive,
    backend_options,
    path_value,
    read_source,
    run_async,
    sandbox_id_value,
    with_backend,
)
from workbench.cli.completion import complete_sandbox_ids
from workbench.cli.errors import CommandError
from workbench.cli.terminal import echo_json, echo_untrusted, write_untrusted_bytes
from workbench.core.workspace import MAX_FILE_BYTES


@click.group("files")
def files_group() -> None:
    """Read and change a sandbox's /workspace."""


@files_group.command(
    "ls",
    epilog="""\b
Examples:
  sandbox-workbench files ls demo
  sandbox-workbench files ls demo src -r --json""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.argument("path", default="/workspace", callback=path_value)
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
        # By path, as `ls` lists (the backend's order is unspecified: spec 5.3 `list`); a
        # directory still comes before what it holds.
        for info in sorted(listing.files, key=lambda info: info.relative_path.split("/")):
            suffix = "/" if info.is_directory else ""
            echo_untrusted(
                f"{info.mode}  {info.size:>9}  {info.modified_at}  {info.relative_path}{suffix}",
                one_line=True,
            )

    await with_backend(profile, data_dir, body)


@files_group.command(
    "cat",
    epilog="""\b
Examples:
  sandbox-workbench files cat demo notes.txt
  sandbox-workbench files cat demo out.png > out.png""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.argument("path", callback=path_value)
@backend_options
@run_async
async def cat_command(sandbox_id: str, path: str, profile: str, data_dir: Path | None) -> None:
    """Write a file's bytes to stdout (control characters made visible on a terminal)."""

    async def body(backend: Backend) -> None:
        write_untrusted_bytes(await backend.sandbox(sandbox_id).read_bytes(path))

    await with_backend(profile, data_dir, body)


@files_group.command(
    "put",
    epilog="""\b
Examples:
  sandbox-workbench files put demo data.csv             # to /workspace/data.csv
  sandbox-workbench files put demo data.csv in/data.csv
  curl -s https://example.com | sandbox-workbench files put demo - page.html""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.argument("source", metavar="LOCAL_FILE | -", callback=path_value)
@click.argument("path", required=False, callback=path_value)
@backend_options
@run_async
async def put_command(
    sandbox_id: str, source: str, path: str | None, profile: str, data_dir: Path | None
) -> None:
    """Upload a local file (or stdin) to PATH (default: /workspace/<its name>)."""
    if source == "-" and path is None:
        raise click.UsageError("give the destination PATH when reading stdin")
    data = read_source(source, MAX_FILE_BYTES)
    destination = path or f"/workspace/{Path(source).name}"
    if len(data) > MAX_FILE_BYTES:  # said here: a larger body would be refused unread (413)
        raise CommandError(
            f"{'stdin' if source == '-' else source} is over {MAX_FILE_BYTES:,} bytes: a "
            "workspace file holds at most 1 MiB",
            EXIT_USAGE,
        )

    async def body(backend: Backend) -> None:
        try:
            written = await backend.sandbox(sandbox_id).write_file(destination, data)
        except SandboxFileNotFoundError as error:  # its folder is missing: say which, and how
            folder = PurePosixPath(destination).parent
            raise CommandError(
                f"{error.message}: {folder} does not exist (`files mkdir {sandbox_id} "
                f"{folder} --parents` makes it)",
                EXIT_NOT_FOUND,
            ) from None
        echo_untrusted(f"wrote {human_bytes(len(data))} to {written.path}", one_line=True)

    await with_backend(profile, data_dir, body)


@files_group.command(
    "rm",
    epilog="""\b
Examples:
  sandbox-workbench files rm demo old.txt
  sandbox-workbench files rm demo build -r -f""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.argument("path", callback=path_value)
@click.option("--recursive", "-r", is_flag=True, help="Remove a directory and its contents.")
@click.option("--force", "-f", is_flag=True, help="No error when the path does not exist.")
@backend_options
@run_async
async def rm_command(
    sandbox_id: str, path: str, recursive: bool, force: bool, profile: str, data_dir: Path | None
) -> None:
    """Delete a file (or a directory with -r). Which backend it acts on is printed on
    stderr first."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        # Said as an attempt: the backend may find nothing to delete, or a directory.
        announce_destructive(f"asking to delete {path} in sandbox {sandbox.id}", backend)
        try:
            # Without `force`: its answer is the same whether or not there was a file.
            deleted = await sandbox.delete_file(path, recursive=recursive or None)
        except SandboxError as error:
            if force and error.code == ErrorCode.FILE_NOT_FOUND:
                echo_untrusted(
                    f"nothing to delete: no {path} in sandbox {sandbox.id}", one_line=True
                )
                return
            if error.code == ErrorCode.IS_DIRECTORY:
                raise CommandError(
                    f"{path} is a directory, so nothing was deleted: pass -r to delete it "
                    "with everything in it",
                    EXIT_USAGE,
                ) from None
            raise
        echo_untrusted(f"deleted {deleted.path}", one_line=True)

    await with_backend(profile, data_dir, body)


@files_group.command(
    "mkdir",
    epilog="""\b
Examples:
  sandbox-workbench files mkdir demo out
  sandbox-workbench files mkdir demo a/b/c --parents""",
)
@click.argument("sandbox_id", callback=sandbox_id_value, shell_complete=complete_sandbox_ids)
@click.argument("path", callback=path_value)
@click.option(  # no -p: that is --profile on every command
    "--parents", is_flag=True, help="Create missing parents; no error if it exists."
)
@backend_options
@run_async
async def mkdir_command(
    sandbox_id: str, path: str, parents: bool, profile: str, data_dir: Path | None
) -> None:
    """Create a directory."""

    async def body(backend: Backend) -> None:
        sandbox = backend.sandbox(sandbox_id)
        try:
            made = await sandbox.mkdir(path, recursive=parents or None)
        except SandboxError as error:
            raise _mkdir_failure(error, path, sandbox.id, parents) from None
        echo_untrusted(f"created {made.path}", one_line=True)

    await with_backend(profile, data_dir, body)


def _mkdir_failure(error: SandboxError, path: str, sandbox_id: str, parents: bool) -> Exception:
    """What a failed mkdir means, said as such: the files API answers every mkdir failure
    but EACCES and ENOSPC as FILESYSTEM_ERROR 500 (spec 4.3), which is no internal error."""
    errno = error.context.get("errno") if isinstance(error.context, dict) else None
    where = f"in sandbox {sandbox_id}"
    if errno == "EEXIST":
        return CommandError(f"{path} already exists {where}")
    if errno == "ENOENT" and not parents:
        return CommandError(
            f"the directory {path} would be in does not exist {where}: pass --parents to "
            "make it too",
            EXIT_NOT_FOUND,
        )
    if errno == "ENOTDIR":
        return CommandError(f"cannot make {path} {where}: it, or a part of its path, is a file")
    return error
