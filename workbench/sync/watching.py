"""The watch loop: watchfiles batches become pending changes and each settled batch a
pass; a pass that fails transiently is retried with growing delays while watching goes on.

Pending changes are the folder paths (or a whole rescan) waiting for the next pass. A
failed pass puts its paths back, so a later one retries them (passes are state-based)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Final

from workbench.core.host_paths import host_path
from workbench.core.tasks import cancel_and_wait
from workbench.sync.events import EmitEvent, EventKind, SyncReport
from workbench.sync.ignore import IGNORE_FILE_NAMES, IgnoreRules
from workbench.sync.local import skipped_link_above
from workbench.sync.relative_paths import is_plain
from workbench.sync.sandbox_folder import TransientSyncError

if TYPE_CHECKING:
    from workbench.sync.folder_sync import FolderSync

__all__ = ["FolderGoneError", "PendingChanges", "folder_identity", "watch_folder"]


class FolderGoneError(Exception):
    """The synced folder is not there (removed, moved away) or was replaced during a
    pass: its files are not deletions, so the pass changes nothing."""


_FULL_RESCAN_THRESHOLD: Final = 256
"""More dirty paths than this in one pass: rescan the whole folder (cheaper)."""


class PendingChanges:
    """Changed paths under `root` waiting for a pass; `full` asks for a whole rescan."""

    def __init__(self, root: Path, rules: IgnoreRules) -> None:
        self.root = root
        self.rules = rules
        self.paths: set[str] = set()
        self.full = False

    @property
    def waiting(self) -> bool:
        return self.full or bool(self.paths)

    def add(self, paths: Iterable[str | Path], *, skip_ignored: bool) -> bool:
        """Mark changed paths (outside the folder, or reached through a link the scans
        skip: dropped); a changed ignore file means a full rescan. The watcher skips
        ignored paths; `FolderSync.sync_paths` does not. Whether any was marked."""
        relatives = [relative for relative in map(self._relative, paths) if relative is not None]
        self.rules.forget(relatives)  # a directory moved in or out: its rules are others
        marked = False
        for relative in relatives:
            if relative.rpartition("/")[2] in IGNORE_FILE_NAMES:
                self.rules.invalidate()
                self.full = marked = True
                continue
            if skipped_link_above(self.root, relative) is not None:
                continue  # the watcher follows a link out of the folder; the scans do not
            if skip_ignored and self.rules.is_ignored(
                relative, host_path(self.root, relative).is_dir()
            ):
                continue
            self.paths.add(relative)
            marked = True
        return marked

    def rescan_all(self) -> None:
        """Ask for a whole rescan with the rule files read again (the folder itself was
        made again: its rules may be others)."""
        self.rules.invalidate()
        self.full = True

    def take(self) -> list[str] | None:
        """The sorted paths for the next pass (None: rescan everything); clears them."""
        full = self.full or len(self.paths) > _FULL_RESCAN_THRESHOLD
        scope = None if full else sorted(self.paths)
        self.paths.clear()
        self.full = False
        return scope

    def put_back(self, scope: list[str] | None) -> None:
        """Keep a failed pass's `scope` (None: everything) for the next attempt."""
        if scope is None:
            self.full = True
        else:
            self.paths.update(scope)

    def _relative(self, path: str | Path) -> str | None:
        """The folder-relative form of a changed path; None outside the folder."""
        candidate = Path(path)
        if candidate.is_absolute():
            try:
                candidate = candidate.relative_to(self.root)
            except ValueError:
                return None
        text = candidate.as_posix().strip("/")
        return text if is_plain(text) else None


REARM_S: Final = 0.25
"""How often a watch whose folder is gone looks for it again."""


def folder_identity(folder: Path) -> tuple[int, int] | None:
    """The folder's device and inode (None: it is not there)."""
    try:
        found = folder.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


WATCH_STEP_S: Final = 0.01
"""How often watchfiles looks at the file system events; the rest of the quiet period
(`FolderSync.debounce`) is waited for here, so a save waits for the quiet period itself,
not for up to two whole periods of watchfiles' steps."""


def _watcher_error(error: BaseException) -> BaseException | None:
    """watchfiles' internal error that ended its watch (alone, or the only kind in a task
    group's group); None for anything else."""
    from watchfiles._rust_notify import WatchfilesRustInternalError

    if isinstance(error, WatchfilesRustInternalError):
        return error
    if isinstance(error, BaseExceptionGroup):
        internal, other = error.split(WatchfilesRustInternalError)
        if internal is not None and other is None:
            return internal.exceptions[0]
    return None


async def watch_folder(
    sync: FolderSync,
    pending: PendingChanges,
    run_pass: Callable[[], Awaitable[SyncReport]],
    emit: EmitEvent,
    *,
    stop: asyncio.Event | None,
    after_sync: Callable[[SyncReport], Awaitable[None]] | None,
    ready: asyncio.Event | None,
) -> None:
    """`FolderSync.watch` (see there); `run_pass` syncs what `pending` holds, running the
    initial sync first."""
    from watchfiles import awatch
    from watchfiles._rust_notify import WatchfilesRustInternalError

    stop = stop or asyncio.Event()
    batches: asyncio.Queue[set[str]] = asyncio.Queue()

    step = max(1, int(min(WATCH_STEP_S, sync.debounce) * 1000))

    async def watcher() -> None:
        """The folder's changes into `batches`. A watch ends with the directory it was
        set on: when the folder is removed (and made again, as a branch switch or a
        tool may do), the watch is set again on the new one, which is then rescanned
        whole; while it is missing, nothing is watched."""
        root = os.fspath(sync.root)
        missing = False
        told_undecodable = False
        rearm_after = REARM_S / 2
        while not stop.is_set():
            armed = folder_identity(sync.root)
            if armed is None:
                missing = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REARM_S):
                        await stop.wait()
                continue
            if missing:  # made again after a while: what it got meanwhile, no watch saw
                missing = False
                pending.rescan_all()
                batches.put_nowait(set())
            try:
                async for changes in awatch(
                    sync.root,
                    watch_filter=None,
                    step=step,
                    debounce=max(1600, step * 4),
                    stop_event=stop,
                    ignore_permission_denied=True,
                ):
                    paths = {path for _, path in changes}
                    batches.put_nowait(paths)
                    rearm_after = REARM_S / 2  # it works again
                    # Gone (a new directory may even reuse its inode number): set again.
                    if root in paths or folder_identity(sync.root) != armed:
                        break
                else:
                    return  # stopped
            except FileNotFoundError:
                pass  # gone before its watch was set
            except (ExceptionGroup, WatchfilesRustInternalError) as error:
                # watchfiles ends its watch on a name that is not UTF-8 ("Unable to decode
                # path"), which ended the whole watch (QA): it is set again, and the
                # rescan reports such a name as the scan does, and syncs the rest. Its
                # error comes in an anyio task group's group, or alone.
                internal = _watcher_error(error)
                if internal is None:
                    raise
                if not told_undecodable:
                    told_undecodable = True
                    emit(
                        EventKind.NOTICE,
                        f"the file watcher could not read a change ({internal}); it watches "
                        "again, and the folder is rescanned",
                    )
                # Not in a loop if it persists (a name that is not UTF-8 written on and on):
                # each time again, it waits longer, up to the longest retry delay.
                rearm_after = min(sync.max_retry_delay, rearm_after * 2)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(rearm_after):
                        await stop.wait()
            pending.rescan_all()
            batches.put_nowait(set())  # wakes the loop for the rescan

    watch_task = asyncio.create_task(watcher())
    stop_task = asyncio.create_task(stop.wait())
    await asyncio.sleep(0)  # let awatch install its watches before the first scan
    emit(EventKind.WATCHING, f"watching {sync.root} → {sync.dest}")
    if ready is not None:
        ready.set()
    delay = sync.max_retry_delay
    failures = 0
    first = True
    folder_gone = False
    """A pass found the folder gone: the next waits for the watcher (it sees it back)."""
    rerun_due = False
    """The entry's last run was cancelled by a change: the next pass runs it again."""
    told_gone = False
    try:
        while not stop.is_set():
            if sync.has_pending and not folder_gone:
                delay = min(sync.max_retry_delay, 0.25 * 2**failures) if failures else 0.0
                timeout: float | None = delay
            else:
                timeout = None
            get_task = asyncio.create_task(batches.get())
            try:
                done, _ = await asyncio.wait(
                    {get_task, stop_task, watch_task},
                    timeout=timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            except BaseException:  # cancelled: no task left pending on the queue
                get_task.cancel()
                raise
            if get_task in done:
                folder_gone = False
                pending.add(get_task.result(), skip_ignored=True)
                await _rest_of_quiet_period(
                    batches, pending, sync.debounce - step / 1000, stop_task
                )
            else:
                get_task.cancel()
            if watch_task in done:
                watch_task.result()  # surface a watcher crash
                break
            if stop.is_set():
                break
            while not batches.empty():
                pending.add(batches.get_nowait(), skip_ignored=True)
            if not sync.has_pending:
                continue
            try:
                report = await run_pass()
            except FolderGoneError as error:
                folder_gone = True
                if not told_gone:
                    told_gone = True
                    emit(
                        EventKind.NOTICE,
                        f"{error}: nothing is synced until it is back (its files stay in "
                        "the sandbox)",
                    )
                continue
            except TransientSyncError as error:
                failures += 1
                message = f"sandbox unavailable ({error}); will retry"
                sync.status.last_error = message
                emit(EventKind.RETRYING, message)
                continue
            failures = 0
            told_gone = False
            emit(EventKind.SYNCED, report.summary(), report=report)
            if after_sync is not None and (report.changed or first or rerun_due):
                ended = await _run_after_sync(after_sync(report), stop_task, batches, pending)
                if ended is _RunEnd.STOPPED:
                    break
                # A cancelled run runs again after the next pass, whatever it changes (a
                # save of the same bytes, a change the sync skips: found in review).
                rerun_due = ended is _RunEnd.SUPERSEDED
                if rerun_due:
                    emit(
                        EventKind.NOTICE,
                        "the folder changed while the entry ran: that run was cancelled, and "
                        "the entry runs again once the change is synced",
                    )
                    await _rest_of_quiet_period(
                        batches, pending, sync.debounce - step / 1000, stop_task
                    )
            first = False
    finally:
        stop.set()
        stop_task.cancel()
        try:
            # A crash of the watcher was surfaced above; a cancel of this watch meanwhile
            # is raised (it ends the watcher too), not swallowed with the watcher's end.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await watch_task
        finally:
            emit(EventKind.STOPPED, "stopped watching")


class _RunEnd(Enum):
    FINISHED = "finished"
    STOPPED = "stopped"
    SUPERSEDED = "superseded"


async def _run_after_sync(
    work: Awaitable[None],
    stop_task: asyncio.Task[bool],
    batches: asyncio.Queue[set[str]],
    pending: PendingChanges,
) -> _RunEnd:
    """Await `work` (an entry's run), cancelled when the watch stops (a Ctrl-C must not
    wait for a long run, and a client that gives up cancels its execution) or when a
    change to sync comes (the run is of files that are stale then, as `nodemon` or
    `cargo watch` restart theirs; QA: a save waited for the old run's 30 s timeout); not
    for a change the sync skips, nor for one a failed pass left waiting."""
    task = asyncio.ensure_future(work)
    get_task: asyncio.Task[set[str]] | None = None
    try:
        while True:
            get_task = asyncio.create_task(batches.get())
            done, _ = await asyncio.wait(
                {task, stop_task, get_task}, return_when=asyncio.FIRST_COMPLETED
            )
            changed = False
            if get_task in done:
                batch = get_task.result()
                changed = pending.add(batch, skip_ignored=True)
                # An empty batch is the watcher's: the folder was made again, rescan it.
                changed = changed or (not batch and pending.full)
            else:
                get_task.cancel()
            get_task = None
            if task in done:
                task.result()
                return _RunEnd.FINISHED
            if stop_task.done():
                await cancel_and_wait(task)
                return _RunEnd.STOPPED
            if changed:
                await cancel_and_wait(task)
                return _RunEnd.SUPERSEDED
    except BaseException:  # the watch itself cancelled: its entry's run goes with it
        if get_task is not None:
            get_task.cancel()
        await cancel_and_wait(task)
        raise


async def _rest_of_quiet_period(
    batches: asyncio.Queue[set[str]],
    pending: PendingChanges,
    quiet: float,
    stop_task: asyncio.Task[bool],
) -> None:
    """Take further batches until none came for `quiet` seconds (watchfiles has already
    seen one step without events), or until the watch stops."""
    while quiet > 0 and not stop_task.done():
        get_task = asyncio.create_task(batches.get())
        done, _ = await asyncio.wait(
            {get_task, stop_task}, timeout=quiet, return_when=asyncio.FIRST_COMPLETED
        )
        if get_task not in done:
            get_task.cancel()
            return
        pending.add(get_task.result(), skip_ignored=True)
