"""`sandbox-workbench watch`: mirror a folder into a sandbox's /workspace and, with
`--run`, execute an entry file after every settled change."""

from __future__ import annotations

import asyncio
import math
import re
import signal
from functools import partial
from pathlib import Path, PurePosixPath

import click

from workbench.api import Backend, ExecutionResult, SandboxClient, sandbox_id_error
from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    backend_options,
    full_context_id,
    non_empty,
    run_async,
    sandbox_id_value,
    timeout_option,
    with_backend,
)
from workbench.cli.completion import complete_bindings, complete_sandbox_ids
from workbench.cli.errors import CommandError, describe
from workbench.cli.terminal import echo_json, echo_untrusted
from workbench.sync.events import ConflictPolicy, EventKind, SyncEvent, SyncReport
from workbench.sync.sandbox_folder import is_transient


def sandbox_id_for_folder(folder: Path) -> str:
    """A valid sandbox id derived from the folder's name (`My App` → `my-app`)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", folder.resolve().name.lower()).strip("-.")[:56]
    candidate = name.strip("-") or "workspace"
    if sandbox_id_error(candidate) is not None:
        candidate = f"watch-{candidate}".strip("-")[:63].rstrip("-")
    return candidate


def _json_line(payload: object) -> None:
    echo_json(payload, indent=None)


async def _context_language(
    backend: Backend, sandbox: SandboxClient, context_id: str | None, binding: str | None
) -> str:
    """The language of the chosen context, or of the binding's runtime."""
    if context_id is not None:
        for context in await sandbox.interpreter.list_code_contexts():
            if context.id == context_id:
                return context.language
        raise CommandError(f"sandbox {sandbox.id} has no context {context_id}", EXIT_NOT_FOUND)
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


def _not_nan(context: click.Context, param: click.Parameter, value: float) -> float:
    """A callback: FloatRange lets NaN through (it compares false with both ends)."""
    if math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds")
    return value


@click.command(
    "watch",
    epilog="""\b
Examples:
  sandbox-workbench watch ./my-project --run main.py     # sandbox my-project
  sandbox-workbench watch ./site --dest /workspace/site --json
  sandbox-workbench watch . -s demo --run app.pl --once""",
)
@click.argument(
    "folder", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR"
)
@click.option(
    "--sandbox",
    "-s",
    "sandbox_id",
    shell_complete=complete_sandbox_ids,
    callback=sandbox_id_value,
    help="Sandbox id (default: from DIR's name).",
)
@click.option("--dest", default="/workspace", show_default=True, help="Target directory.")
@click.option("--run", "entry", help="Entry file (relative to DIR) to run after each change.")
@click.option(
    "--binding",
    "-b",
    shell_complete=complete_bindings,
    callback=non_empty,
    help="Runtime binding for --run (default: by file extension).",
)
@click.option(
    "--context",
    "context_id",
    callback=non_empty,
    help="Run in this existing code context (id or unique prefix).",
)
@click.option(
    "--policy",
    type=click.Choice([policy.value for policy in ConflictPolicy]),
    default=ConflictPolicy.LOCAL_WINS.value,
    show_default=True,
    help="When guest code changed a file we synced, or the sandbox held a file with other "
    "content before the sync, and we would overwrite or delete it: do it with a conflict "
    "notice, keep the sandbox's file, or stop.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Mirror exactly: also delete sandbox entries under --dest that DIR lacks and the "
    "sync did not create (ignored paths are kept).",
)
@click.option(
    "--debounce",
    type=click.FloatRange(0, 60),
    default=0.05,
    show_default=True,
    callback=_not_nan,
    help="Quiet period (s).",
)
@click.option("--once", is_flag=True, help="Sync (and run) once, then exit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per run (or per sync).")
@timeout_option
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
    prune: bool,
    debounce: float,
    once: bool,
    as_json: bool,
    timeout: float | None,
    profile: str,
    data_dir: Path | None,
) -> int:
    """Mirror DIR into a sandbox's /workspace; with --run, execute ENTRY on each change.

    \b
    Deletes: without --prune only what the sync created is deleted: files it
    uploaded and directories it made, remembered across runs (per profile,
    sandbox, --dest and DIR, under the data dir). Everything else in the sandbox
    stays; a directory of ours that holds other entries is kept. --prune mirrors
    DIR exactly (ignored paths stay). Whenever the sync can delete, the profile
    and backend it acts on are printed on stderr first. One watch at a time per
    data dir, profile, sandbox, --dest and DIR (the workbench's included): another
    one exits 1 at once, naming the process that watches.

    \b
    Conflicts: a file guest code changed since the last sync that the sync would
    overwrite or delete. local-wins overwrites or deletes it and prints a
    conflict; sandbox-wins keeps the sandbox's file (after a kept delete the file
    is no longer the sync's); fail changes nothing of that pass and exits 1.

    \b
    Ignores: .git/, node_modules/, virtualenvs, caches, editor files, secrets
    (.env, *.pem, .ssh/, id_*), and nested .gitignore and .workbenchignore files
    (git semantics; a `!pattern` line re-includes a built-in). Stop with Ctrl+C.
    """
    from workbench.cli.progress import prepare_engine
    from workbench.core.host_paths import HostPathError, host_path
    from workbench.paths import data_dir as resolve_data_dir
    from workbench.sync import (
        FolderGoneError,
        FolderSync,
        SyncAlreadyRunningError,
        SyncConflictError,
        remote_path,
        sync_state_file,
    )
    from workbench.sync.manifest import normalize_dest
    from workbench.sync.runner import entry_language_problem, entry_result, entry_runner_code

    sandbox_name = sandbox_id or sandbox_id_for_folder(folder)
    problem = sandbox_id_error(sandbox_name)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="--sandbox")
    if binding and context_id:
        raise click.UsageError("give --binding or --context, not both")
    if (binding or context_id) and not entry:
        raise click.UsageError("--binding and --context need --run ENTRY")
    try:
        dest = normalize_dest(dest)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--dest") from None
    if entry is not None:
        entry = PurePosixPath(entry).as_posix().lstrip("/")
        try:
            is_file = host_path(folder, entry).is_file()
        except HostPathError as error:
            raise click.BadParameter(str(error), param_hint="--run") from None
        if not is_file:
            raise click.BadParameter(f"{entry} is not a file in {folder}", param_hint="--run")

    def notify(event: SyncEvent) -> None:
        if event.kind in (EventKind.ERROR, EventKind.CONFLICT, EventKind.RETRYING):
            color = "red" if event.kind is EventKind.ERROR else "yellow"
            if as_json:
                echo_json(event.to_json(), err=True, indent=None)
            else:
                echo_untrusted(f"{event.kind}: {event.message}", fg=color, err=True)
        elif event.kind is EventKind.NOTICE and not as_json:
            echo_untrusted(f"notice: {event.message}", fg="yellow", err=True)
        elif event.kind is EventKind.WATCHING and not as_json:
            echo_untrusted(event.message, dim=True, err=True)

    def announce_backend(backend: Backend, sandbox: str, target: str) -> None:
        """Say once, on stderr, which backend the sync can delete in."""
        if as_json:
            payload = {
                "event": "backend",
                "profile": backend.name,
                "backend": backend.description,
                "sandbox": sandbox,
                "dest": target,
            }
            echo_json(payload, err=True, indent=None)
        else:
            echo_untrusted(
                f"syncing into sandbox {sandbox} ({target}) on profile {backend.name}: "
                f"{backend.description}",
                err=True,
            )

    async def body(backend: Backend) -> int:
        sandbox = backend.sandbox(sandbox_name)
        state_file = sync_state_file(
            resolve_data_dir(data_dir),
            backend=f"{backend.name} {backend.description}",
            sandbox_id=sandbox.id,
            dest=dest,
            folder=folder,
        )
        try:
            sync = FolderSync(
                folder,
                sandbox,
                dest=dest,
                policy=policy,
                debounce=debounce,
                prune=prune,
                state_file=state_file,
                keep_out=[resolve_data_dir(data_dir)],
            )
        except ValueError as error:  # a folder inside the workbench's own directories
            raise click.UsageError(str(error)) from None
        except SyncAlreadyRunningError as error:  # another watch of the same state file
            raise CommandError(str(error), EXIT_FAILED) from None
        with sync:  # holds the sync state until the watch ends, however it ends
            return await watch_with(backend, sandbox, sync)

    async def watch_with(backend: Backend, sandbox: SandboxClient, sync: FolderSync) -> int:
        """The watch (or the one pass of --once), with `sync` holding its state."""
        sync.subscribe(notify)
        if not once or sync.may_delete:
            announce_backend(backend, sandbox.id, sync.dest)
        runner: str | None = None
        target_binding = binding
        context = None
        if entry is not None:
            if context_id is None and target_binding is None:
                target_binding = await _binding_for_entry(backend, entry)
            if context_id is not None:
                context = await full_context_id(sandbox, context_id)
            language = await _context_language(backend, sandbox, context, target_binding)
            mismatch = entry_language_problem(entry, language)
            if mismatch is not None:
                raise click.UsageError(f"{mismatch} Give --binding or --context of its language.")
            await prepare_engine(backend, language)
            entry_path = remote_path(sync.dest, entry)
            runner = entry_runner_code(language, entry_path, sync.dest)
        exit_code = EXIT_OK

        async def after_sync(report: SyncReport) -> None:
            nonlocal exit_code
            if runner is None:
                if as_json:
                    _json_line({"event": "synced", "sync": report.to_json()})
                else:
                    echo_untrusted(f"synced: {report.summary()}", dim=True, err=True)
                return
            if not as_json:
                echo_untrusted(f"synced: {report.summary()}; running {entry}", dim=True, err=True)
            # Its output as it comes, as `run` prints it (QA: an entry printing every
            # second showed nothing until it ended); with --json, in the run's event.
            try:
                result: ExecutionResult = await sandbox.interpreter.run_code(
                    runner,
                    context=context,
                    binding=None if context else target_binding,
                    on_stdout=None if as_json else echo_untrusted,
                    on_stderr=None if as_json else partial(echo_untrusted, err=True),
                )
            except asyncio.CancelledError:  # the watch stopped, or the folder changed (why follows)
                if not as_json:
                    echo_untrusted(f"cancelled the run of {entry}", dim=True, err=True)
                raise
            except Exception as error:
                # The backend went while the entry ran (a daemon killed or stopped, a
                # gateway down): a watch goes on, as its passes do, and runs the entry
                # after the next change; it ended the watch (QA). `--once` reports it.
                if once or not is_transient(error):
                    raise
                message, _ = describe(error)
                exit_code = EXIT_FAILED
                failure = f"the run of {entry} failed: {message}; the next change runs it again"
                if as_json:
                    _json_line({"event": "run-failed", "message": failure})
                else:
                    echo_untrusted(f"error: {failure}", fg="red", err=True)
                return
            result = entry_result(result, entry_path)
            exit_code = EXIT_OK if result.error is None else EXIT_FAILED
            if as_json:
                _json_line({"event": "run", **result.to_json(), "sync": report.to_json()})
            else:
                from workbench.cli.run_command import print_result

                print_result(result, logs=False)

        if once:
            try:
                report = await sync.initial_sync()
            except SyncConflictError as error:
                echo_untrusted(f"error: {error} (policy fail)", fg="red", err=True)
                return EXIT_FAILED
            except FolderGoneError as error:  # removed while it was scanned
                echo_untrusted(f"error: {error}; nothing was synced", fg="red", err=True)
                return EXIT_FAILED
            await after_sync(report)
            return exit_code if not report.errors else EXIT_FAILED
        stop = asyncio.Event()
        stopped_by: list[int] = []

        def stop_on(signum: int) -> None:
            stopped_by.append(signum)
            stop.set()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_on, signum)
        # A watch keeps the local daemon from its idle exit between changes.
        keep_alive = getattr(backend.transport, "keep_alive", None)
        keeper = None if keep_alive is None else asyncio.create_task(keep_alive())
        try:
            await sync.watch(stop=stop, after_sync=after_sync)
        except SyncConflictError as error:
            echo_untrusted(f"error: {error} (policy fail)", fg="red", err=True)
            return EXIT_FAILED
        finally:
            if keeper is not None:
                keeper.cancel()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        if not as_json:
            echo_untrusted("stopped", dim=True, err=True)
        # Stopped by a signal once the pass ended: 128 + it, as every command (it was 0).
        return 128 + stopped_by[0] if stopped_by else EXIT_OK

    return await with_backend(profile, data_dir, body, timeout=timeout)
