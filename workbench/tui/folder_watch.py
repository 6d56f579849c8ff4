"""Watching a local folder into a sandbox, one watch at a time.

The folder sync runs in a worker of the owner (the main screen) and reports through
`Watch*` messages; with an entry file, each pass that changed the sandbox runs it in the
context like a REPL cell (its `CellFinished` is labelled as a watch run).
`FolderWatch` is the controller; `FolderWatchHandlers` is the main screen's part: the
watch actions and the handlers of those messages (the only code that changes widgets).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.widget import Widget
from textual.worker import Worker

from workbench.api import Backend, CodeContext
from workbench.sync import (
    EventKind,
    FolderSync,
    SyncAlreadyRunningError,
    SyncEvent,
    SyncReport,
    remote_path,
    sync_state_file,
)
from workbench.sync.runner import entry_result, entry_runner_code
from workbench.tui.error_messages import describe_error
from workbench.tui.messages import (
    WatchEnded,
    WatchEventReceived,
    WatchFolderGone,
    WatchRunAbandoned,
    WatchRunStarted,
    WatchSynced,
)
from workbench.tui.profile_connection import ProfileConnection
from workbench.tui.screens.watch_screen import WatchRequest, WatchScreen
from workbench.tui.widgets.status_bar import StatusBar
from workbench.tui.widgets.workbench_tabs import WorkbenchTabs
from workbench.tui.worker_reports import on_report

WATCH_POLL_SECONDS = 0.5
MAX_LISTED_ISSUES = 3


@dataclass
class ActiveWatch:
    """The running watch; `stop` ends its worker, which sets `ended` when it has (its
    last pass and run over, its state file let go)."""

    watch_id: int
    sandbox_id: str
    sync: FolderSync
    stop: asyncio.Event
    context_id: str | None = None
    entry: str | None = None
    runner: str | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def folder(self) -> Path:
        return self.sync.root

    @property
    def target(self) -> str:
        """`folder → sandbox:/dest` for the status bar."""
        root = self.sync.root
        return f"{root.name or root} → {self.sandbox_id}:{self.sync.dest}"


def issues_text(issues: list[str]) -> str:
    shown = "\n".join(issues[:MAX_LISTED_ISSUES])
    more = len(issues) - MAX_LISTED_ISSUES
    return shown + (f"\n… and {more} more" if more > 0 else "")


def changes(report: SyncReport, shown: int = 3) -> str:
    """What a sync pass changed, for a watch run's label: `main.py, lib.py changed`."""
    paths = [*report.uploaded, *report.deleted, *(new for _, new in report.renamed)]
    paths += report.created_dirs
    if not paths:
        return "changed"
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return f"{', '.join(paths[:shown])}{more} changed"


class FolderWatch:
    """`active` is the running watch (None when nothing is watched).

    `language_of(context_id)` is the language of the context's open REPL, or None: a watch
    run prepares a local engine first only for an open REPL, like a typed run."""

    def __init__(
        self,
        owner: Widget,
        connection: ProfileConnection,
        data_dir: Path,
        language_of: Callable[[str], str | None],
    ) -> None:
        self.owner = owner
        self.connection = connection
        self.data_dir = data_dir
        self.language_of = language_of
        self.active: ActiveWatch | None = None
        self.ending: list[ActiveWatch] = []
        """Watches stopped whose workers have not ended yet (a pass may still upload)."""
        self.started = 0

    def start(
        self, sandbox_id: str, context: CodeContext | None, request: WatchRequest
    ) -> ActiveWatch | None:
        """Start watching `request.folder` on the current backend; None (and a notification
        says why) when it cannot be: among others, while another watch (`watch`, or a
        workbench) syncs the same folder into the same sandbox and dest."""
        backend = self.connection.backend_or_warn()
        if backend is None:
            return None
        sync: FolderSync | None = None
        try:
            # The same state file as `watch`: only what a sync created is ever deleted,
            # also in a later session.
            state_file = sync_state_file(
                self.data_dir,
                backend=f"{backend.name} {backend.description}",
                sandbox_id=sandbox_id,
                dest=request.dest,
                folder=request.folder,
            )
            sync = FolderSync(
                request.folder,
                backend.sandbox(sandbox_id),
                dest=request.dest,
                state_file=state_file,
                keep_out=[self.data_dir],
            )
            runner = None
            if request.entry is not None and context is not None:
                runner = entry_runner_code(
                    context.language, remote_path(sync.dest, request.entry), sync.dest
                )
        except (OSError, ValueError, SyncAlreadyRunningError) as error:
            if sync is not None:
                sync.close()
            message = str(error)
            if isinstance(error, SyncAlreadyRunningError) and error.holder_pid == os.getpid():
                # This workbench's own watch, stopped but still ending its pass.
                message = (
                    f"the watch of {error.folder} into sandbox {error.sandbox_id} that was "
                    "stopped is still ending its pass: start it again in a moment"
                )
            self.owner.notify(message, title="Cannot watch the folder", severity="error", timeout=8)
            return None
        self.started += 1
        watch = ActiveWatch(
            self.started,
            sandbox_id,
            sync,
            asyncio.Event(),
            context.id if runner is not None and context is not None else None,
            request.entry if runner is not None else None,
            runner,
        )
        self.active = watch
        self._start_worker(backend, watch)
        return watch

    def stop(self, note: str | None = None) -> ActiveWatch | None:
        """Ask the worker to end (it finishes the current pass first), saying `note`;
        the stopped watch."""
        watch, self.active = self.active, None
        if watch is None:
            return None
        watch.stop.set()
        if not watch.ended.is_set():
            self.ending.append(watch)
        if note:
            self.owner.notify(
                f"{watch.folder} → {watch.sandbox_id}: {note}", title="Watch", timeout=3
            )
        return watch

    def into(self, sandbox_id: str) -> list[ActiveWatch]:
        """This workbench's watches into the sandbox that have not ended: the active one
        and those stopped but still ending their passes."""
        watches = [*self.ending, *([self.active] if self.active is not None else [])]
        return [watch for watch in watches if watch.sandbox_id == sandbox_id]

    def current(self, watch_id: int) -> ActiveWatch | None:
        watch = self.active
        return watch if watch is not None and watch.watch_id == watch_id else None

    def notify_event(self, event: SyncEvent) -> None:
        """Notify what the user must know of an event of the active watch."""
        if event.kind in (EventKind.RETRYING, EventKind.NOTICE):
            self.owner.notify(event.message, title="Watch", severity="warning", timeout=6)
        elif event.kind is EventKind.CONFLICT:
            self.owner.notify(event.message, title="Watch conflict", severity="warning", timeout=6)
        elif event.kind is EventKind.SYNCED and event.report is not None and event.report.errors:
            errors = event.report.errors
            self.owner.notify(
                issues_text([f"{issue.path}: {issue.message}" for issue in errors]),
                title=f"Watch: {len(errors)} paths not synced",
                severity="error",
                timeout=8,
            )

    def ended(self, watch_id: int) -> bool:
        """Forget the watch whose worker ended; True when it was the active one."""
        if self.current(watch_id) is None:
            return False
        self.active = None
        return True

    def _start_worker(self, backend: Backend, watch: ActiveWatch) -> Worker[None]:
        return self.owner.run_worker(
            partial(self._run, backend, watch), name="run_watch", group="watch", exit_on_error=False
        )

    async def _run(self, backend: Backend, watch: ActiveWatch) -> None:
        """Worker body: the sync's events and passes come back as messages."""
        watch_id = watch.watch_id
        post = self.owner.post_message

        def report_event(event: SyncEvent) -> None:
            post(WatchEventReceived(watch_id, event))

        unsubscribe = watch.sync.subscribe(report_event)
        poll = self.owner.set_interval(WATCH_POLL_SECONDS, partial(self._poll, watch))

        first_pass = True

        async def after_sync(report: SyncReport) -> None:
            nonlocal first_pass
            started, first_pass = first_pass, False
            post(WatchSynced(watch_id, watch.sandbox_id, watch.sync.dest, report))
            entry = watch.entry
            if watch.runner is None or entry is None or watch.context_id is None:
                return
            if watch.stop.is_set():
                return
            # The watch calls this when the entry is due: as it starts, after a change, and
            # after a run a change cancelled (the pass after it may change nothing).
            if started:
                reason = "watch started"
            elif report.changed:
                reason = changes(report)
            else:
                reason = "again, after a change cancelled the last run"
            post(WatchRunStarted(watch_id, watch.context_id, watch.runner))
            label = f"watch run: {entry} · {reason}"
            run = asyncio.ensure_future(
                self.connection.run_cell_request(
                    backend,
                    watch.sandbox_id,
                    watch.context_id,
                    self.language_of(watch.context_id),
                    watch.runner,
                    label=label,
                    shown=partial(entry_result, entry=remote_path(watch.sync.dest, entry)),
                )
            )
            try:
                await asyncio.shield(run)
            except asyncio.CancelledError:  # the folder changed, or the watch stopped
                await self._cancel_watch_run(watch, run, label)
                raise

        failure: str | None = None
        try:
            # Started by the user from the tree: a sync would make a destroyed sandbox again.
            # Listed first even where the backend could refuse each request instead: a
            # watch fills a sandbox destroyed under it again, by design, so its requests
            # must not be refused once it runs.
            await self.connection.require_listed(backend, watch.sandbox_id)
            await watch.sync.watch(stop=watch.stop, after_sync=after_sync)
        except Exception as error:
            failure = describe_error(error)
        finally:
            poll.stop()
            unsubscribe()
            watch.sync.close()  # before it is said to have ended: a new watch may start
            watch.ended.set()
            self.ending = [other for other in self.ending if other is not watch]
        post(WatchEnded(watch_id, failure))

    async def _cancel_watch_run(
        self, watch: ActiveWatch, run: asyncio.Future[None], label: str
    ) -> None:
        """Give up a watch run the watch gave up, unless it ended: its request goes, which
        on the local backend and `serve` cancels exactly that execution, queued or running
        (a cancel of the context's run stopped another client's run queued ahead of it:
        found in review); its cell says why."""
        try:
            if run.done():
                return
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            assert watch.context_id is not None
            why = "the watch stopped" if watch.stop.is_set() else "the folder changed while it ran"
            self.owner.post_message(WatchRunAbandoned(watch.context_id, label, why))
        finally:
            run.cancel()  # cancelled again meanwhile (the app quits): never left running

    def _poll(self, watch: ActiveWatch) -> None:
        """Notice a vanished folder (the watcher itself reports nothing for it)."""
        if self.active is watch and not watch.folder.is_dir():
            self.owner.notify(
                f"{watch.folder} is gone; stopped watching.",
                title="Watch",
                severity="error",
                timeout=8,
            )
            self.owner.post_message(WatchFolderGone(watch.watch_id))


class FolderWatchHandlers(Screen[None]):
    """The main screen's watch actions and its handlers of the `Watch*` reports.

    A `Screen` so that Textual registers the `@on` handlers; `MainScreen` inherits it and
    provides the attributes declared here."""

    folder_watch: FolderWatch
    connection: ProfileConnection
    tabs: WorkbenchTabs
    status: StatusBar

    if TYPE_CHECKING:

        def refresh_workspace(self, sandbox_id: str) -> None: ...

    @property
    @abstractmethod
    def selected_sandbox_id(self) -> str | None:
        """The sandbox a new watch syncs into."""

    def action_watch_folder(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None or self.connection.backend is None:
            return
        active = self.folder_watch.active
        if active is not None:
            self.notify(
                f"Already watching {active.folder}; stop it first.",
                title="Watch",
                severity="warning",
            )
            return
        repl = self.tabs.active_repl
        context = repl.context if repl is not None and repl.sandbox_id == sandbox_id else None

        def chosen(request: WatchRequest | None) -> None:
            if request is not None:
                self.start_watch(sandbox_id, context, request)

        self.app.push_screen(WatchScreen(sandbox_id, context), chosen)

    def start_watch(
        self, sandbox_id: str, context: CodeContext | None, request: WatchRequest
    ) -> None:
        """Watch `request.folder` into the sandbox (see `FolderWatch`)."""
        watch = self.folder_watch.start(sandbox_id, context, request)
        if watch is not None:
            self.status.show_watch(watch.target)
            self.app.refresh_bindings()

    def action_unwatch(self) -> None:
        if self.folder_watch.active is not None:
            self.stop_watch("stopped")

    def stop_watch(self, note: str | None) -> None:
        if self.folder_watch.stop(note) is not None:
            self.status.clear_watch()
            self.app.refresh_bindings()

    def stop_watch_into_gone_context(self, context_id: str) -> None:
        """The watch whose entry runs in `context_id` stops once that context is gone (its
        sandbox destroyed by another client): its runs would fail each time, and its
        passes would fill a new sandbox of the same id with only the files that change."""
        active = self.folder_watch.active
        if active is not None and active.context_id == context_id:
            self.stop_watch("stopped: its context no longer exists (was the sandbox destroyed?)")

    @on_report(WatchEventReceived)
    def watch_event(self, message: WatchEventReceived) -> None:
        if self.folder_watch.current(message.watch_id) is None:
            return
        self.status.show_watch_event(message.event)
        self.folder_watch.notify_event(message.event)

    @on_report(WatchSynced)
    def watch_synced(self, message: WatchSynced) -> None:
        if not message.report.changed:
            return
        self.refresh_workspace(message.sandbox_id)

    @on_report(WatchRunStarted)
    def watch_run_started(self, message: WatchRunStarted) -> None:
        pane = self.tabs.repl_for(message.context_id)
        if pane is not None:
            pane.show_watch_run(message.code)

    @on_report(WatchRunAbandoned)
    def watch_run_abandoned(self, message: WatchRunAbandoned) -> None:
        pane = self.tabs.repl_for(message.context_id)
        if pane is not None:
            pane.abandon_watch_run(message.label, message.why)

    @on_report(WatchFolderGone)
    def watch_folder_gone(self, message: WatchFolderGone) -> None:
        if self.folder_watch.current(message.watch_id) is not None:
            self.stop_watch(None)

    @on_report(WatchEnded)
    def watch_ended(self, message: WatchEnded) -> None:
        if self.folder_watch.ended(message.watch_id):
            self.status.clear_watch()
            self.app.refresh_bindings()
        if message.failure is not None:
            self.notify(message.failure, title="Watching stopped", severity="error", timeout=8)
