"""`sandbox-workbench watch`: mirror a folder into a sandbox's /workspace and, with
`--run`, execute an entry file after every settled change."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path, PurePosixPath

import click

from workbench.api.client import Backend, SandboxClient
from workbench.api.types import ExecutionResult
from workbench.cli.common import EXIT_FAILED, EXIT_OK, backend_options, run_async, with_backend
from workbench.core.ids import sandbox_id_error
from workbench.sync.events import ConflictPolicy, EventKind, SyncEvent, SyncReport


def sandbox_id_for_folder(folder: Path) -> str:
    """A valid sandbox id derived from the folder's name (`My App` → `my-app`)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", folder.resolve().name.lower()).strip("-.")[:56]
    candidate = name.strip("-") or "workspace"
    if sandbox_id_error(candidate) is not None:
        candidate = f"watch-{candidate}".strip("-")[:63].rstrip("-")
    return candidate


def _json_line(payload: object) -> None:
    click.echo(json.dumps(payload, ensure_ascii=False))
    sys.stdout.flush()


async def _context_language(
    backend: Backend, sandbox: SandboxClient, context_id: str | None, binding: str | None
) -> str:
    """The language of the chosen context, or of the binding's runtime."""
    if context_id is not None:
        for context in await sandbox.interpreter.list_code_contexts():
            if context.id == context_id:
                return context.language
        raise click.UsageError(f"sandbox {sandbox.id} has no context {context_id}")
    for runtime in await backend.runtimes():
        if runtime.binding == binding:
            return runtime.language
    raise click.UsageError(f"{backend.name} offers no binding {binding}")


async def _binding_for_entry(backend: Backend, entry: str) -> str:
    from workbench.cli.run_command import binding_for_language
    from workbench.sync.runner import LANGUAGE_BY_EXTENSION

    language = LANGUAGE_BY_EXTENSION.get(PurePosixPath(entry).suffix.lower())
    if language is None:
        raise click.UsageError(f"cannot tell the language of {entry}; give --binding or --context")
    return await binding_for_language(backend, language)


@click.command("watch")
@click.argument(
    "folder", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR"
)
@click.option("--sandbox", "-s", "sandbox_id", help="Sandbox id (default: from DIR's name).")
@click.option("--dest", default="/workspace", show_default=True, help="Target directory.")
@click.option("--run", "entry", help="Entry file (relative to DIR) to run after each change.")
@click.option("--binding", "-b", help="Runtime binding for --run (default: by file extension).")
@click.option("--context", "context_id", help="Run in this existing code context.")
@click.option(
    "--policy",
    type=click.Choice([policy.value for policy in ConflictPolicy]),
    default=ConflictPolicy.LOCAL_WINS.value,
    show_default=True,
    help="When guest code changed a file we synced: overwrite, keep the sandbox's, or stop.",
)
@click.option(
    "--keep-extra", is_flag=True, help="Keep sandbox files missing locally (default: delete)."
)
@click.option("--debounce", type=float, default=0.05, show_default=True, help="Quiet period (s).")
@click.option("--once", is_flag=True, help="Sync (and run) once, then exit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per run (or per sync).")
@backend_options
@run_async
async def watch_command(
    folder: Path,
    sandbox_id: str | None,
    dest: str,
    entry: str | None,
    binding: str | None,
    context_id: str | None,
    policy: str,
    keep_extra: bool,
    debounce: float,
    once: bool,
    as_json: bool,
    profile: str,
    data_dir: Path | None,
) -> int:
    """Mirror DIR into a sandbox's /workspace; with --run, execute ENTRY on each change.

    Ignores .git/, node_modules/, virtualenvs, editor files, and whatever nested
    .gitignore and .workbenchignore files say. Stop with Ctrl+C.
    """
    from workbench.sync import FolderSync, SyncConflictError
    from workbench.sync.engine import remote_path
    from workbench.sync.runner import entry_runner_code

    sandbox_name = sandbox_id or sandbox_id_for_folder(folder)
    problem = sandbox_id_error(sandbox_name)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="--sandbox")
    if binding and context_id:
        raise click.UsageError("give --binding or --context, not both")
    if (binding or context_id) and not entry:
        raise click.UsageError("--binding and --context need --run ENTRY")
    if entry is not None:
        entry = PurePosixPath(entry).as_posix().lstrip("/")
        if not (folder / entry).is_file():
            raise click.BadParameter(f"{entry} is not a file in {folder}", param_hint="--run")

    def notify(event: SyncEvent) -> None:
        if event.kind in (EventKind.ERROR, EventKind.CONFLICT, EventKind.RETRYING):
            color = "red" if event.kind is EventKind.ERROR else "yellow"
            if as_json:
                click.echo(json.dumps(event.to_json(), ensure_ascii=False), err=True)
            else:
                click.secho(f"{event.kind}: {event.message}", fg=color, err=True)
        elif event.kind is EventKind.NOTICE and not as_json:
            click.secho(f"notice: {event.message}", fg="yellow", err=True)
        elif event.kind is EventKind.WATCHING and not as_json:
            click.secho(event.message, dim=True, err=True)

    async def body(backend: Backend) -> int:
        sandbox = backend.sandbox(sandbox_name)
        sync = FolderSync(
            folder,
            sandbox,
            dest=dest,
            policy=policy,
            debounce=debounce,
            prune=not keep_extra,
        )
        sync.subscribe(notify)
        runner: str | None = None
        target_binding = binding
        if entry is not None:
            if context_id is None and target_binding is None:
                target_binding = await _binding_for_entry(backend, entry)
            language = await _context_language(backend, sandbox, context_id, target_binding)
            runner = entry_runner_code(language, remote_path(sync.dest, entry), sync.dest)
        exit_code = EXIT_OK

        async def after_sync(report: SyncReport) -> None:
            nonlocal exit_code
            if runner is None:
                if as_json:
                    _json_line({"event": "synced", "sync": report.to_json()})
                else:
                    click.secho(f"synced: {report.summary()}", dim=True, err=True)
                return
            if not as_json:
                click.secho(f"synced: {report.summary()}; running {entry}", dim=True, err=True)
            result: ExecutionResult = await sandbox.interpreter.run_code(
                runner,
                context=context_id,
                binding=None if context_id else target_binding,
            )
            exit_code = EXIT_OK if result.error is None else EXIT_FAILED
            if as_json:
                _json_line({"event": "run", **result.to_json(), "sync": report.to_json()})
            else:
                from workbench.cli.run_command import print_result

                print_result(result)

        if once:
            report = await sync.initial_sync()
            await after_sync(report)
            return exit_code if not report.errors else EXIT_FAILED
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await sync.watch(stop=stop, after_sync=after_sync)
        except SyncConflictError as error:
            click.secho(f"error: {error} (policy fail)", fg="red", err=True)
            return EXIT_FAILED
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        if not as_json:
            click.secho("stopped", dim=True, err=True)
        return EXIT_OK

    return await with_backend(profile, data_dir, body)
