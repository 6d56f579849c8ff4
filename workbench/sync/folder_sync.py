"""`FolderSync`: mirror a local folder into a sandbox's /workspace, once or while watching.

Direction is local → sandbox. The sync keeps a manifest of what it believes the sandbox
holds under `dest` (size, `modifiedAt`, content digest per file; directories) and makes
every pass state-based: for each dirty path it compares the folder as it is *now* with
the manifest, so coalesced, reordered or repeated watcher events cannot drift the result.

- Initial sync lists the sandbox once; only files whose size matches a local file are
  read back (to compare digests), everything else is decided from the listing.
- Deletes: without `prune` (the default) the sync deletes only what it created itself
  (files it uploaded, directories it made), in this run or an earlier one: that record is
  saved after every pass (`workbench.sync.manifest`), and without it nothing is deleted.
  A sync with a state file holds it from its start until `close()` (or the end of its
  process): a second sync of the same state file fails at once
  (`SyncAlreadyRunningError`), so no two syncs ever take each other's uploads for a
  guest's changes or overwrite each other's record.
  A sandbox entry the sync did not create is never deleted or replaced; where the folder
  needs the other kind of entry at its path, the path is reported as an error and kept.
  A directory the sync made is removed only if it holds nothing else; otherwise the sync
  removes its own entries and keeps the directory, with a notice (the directory is
  listed right before it is removed; an entry a guest creates in between goes with it).
- With `prune` the sync mirrors exactly: every sandbox entry under `dest` that the
  folder lacks is deleted, except ignored paths and the directories holding them.
- Conflicts: before overwriting or deleting a file it uploaded, the sync checks the
  sandbox's copy; a different size or `modifiedAt` (confirmed by reading and comparing
  digests) means guest code changed it since the last sync, and the `ConflictPolicy`
  decides, for deletes as for overwrites: `fail` applies nothing of that pass and raises
  `SyncConflictError`; `sandbox-wins` keeps the sandbox's file (after a kept overwrite its
  version is the new baseline; after a kept delete the file is no longer the sync's);
  `local-wins` overwrites or deletes it and reports a conflict notice.
- Requests: where the gateway offers `files/batch` (its `GET /v1/health` says so), a
  pass's changes travel in few batches (`workbench.sync.applying`), and an incremental
  pass's conflict check rides on them as preconditions, so a save is one request; a
  gateway without it gets every change file by file, as before.
- Errors: limit and permission errors are per file (reported, the rest continues);
  transient ones (connection failures, 5xx, timeouts) are retried with backoff, and a
  pass that still fails keeps its paths pending for a later retry.
- Ignored paths are never touched in the sandbox (neither uploaded nor deleted). The
  workbench's own directories (data, config and cache dirs, and those `keep_out` names,
  e.g. a `--data-dir`) are ignored whatever the rules say: a folder that holds the data
  dir would upload the store (every sandbox's history) and sync again at every write of
  it. A folder inside one of them is refused.
- Local files are read without following symlinks (`read_regular_file`), at most
  `MAX_FILE_BYTES` + 1 bytes each, once, and only as many as fit in the room the
  sandbox's 16 MiB workspace has left (`workbench.sync.local`; the rest is reported);
  every host path goes through `host_path`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from workbench.api import FileInfo, SandboxClient
from workbench.core.host_paths import host_path
from workbench.paths import cache_dir, config_dir, data_dir
from workbench.protocol import errors
from workbench.sync.applying import PlanApplier, apply_in_batches
from workbench.sync.conflicts import (
    SandboxEntry,
    find_conflicts,
    preconditions_for,
    resolve_conflicts,
)
from workbench.sync.events import (
    ConflictPolicy,
    EventKind,
    SyncEvent,
    SyncIssue,
    SyncReport,
    SyncStatus,
)
from workbench.sync.ignore import IgnoreRules
from workbench.sync.local import LocalEntry, scan_folder, skipped_link_above
from workbench.sync.manifest import (
    RemoteEntry,
    hold_state_file,
    load_entries,
    normalize_dest,
    remembered,
    save_entries,
)
from workbench.sync.planning import Plan, plan_pass
from workbench.sync.relative_paths import (
    ancestors,
    is_plain,
    is_under,
    is_under_any,
    parent_of,
    top_level,
)
from workbench.sync.sandbox_folder import SandboxFolder, TransientSyncError
from workbench.sync.watching import (
    FolderGoneError,
    PendingChanges,
    folder_identity,
    watch_folder,
)

__all__ = ["FolderSync"]


def _kept_out_of(root: Path, keep_out: Iterable[Path] = ()) -> list[str]:
    """The workbench's own directories (and `keep_out`) inside `root`, folder-relative.
    Raises ValueError when `root` is one of them or inside one."""
    own = [
        ("data dir", data_dir()),
        ("config dir", config_dir()),
        ("cache dir", cache_dir()),
        *(("data dir", path) for path in keep_out),
    ]
    relative = []
    for kind, directory in own:
        resolved = directory.expanduser().resolve()
        if root == resolved:
            raise ValueError(f"{root} is the workbench's own {kind}: it is never synced")
        if root.is_relative_to(resolved):
            raise ValueError(
                f"{root} is inside the workbench's own {kind} ({resolved}): it is never synced"
            )
        if resolved.is_relative_to(root):
            relative.append(resolved.relative_to(root).as_posix())
    return relative


_REFILLS = 3
"""Initial passes in a row that may find their sandbox destroyed and made again."""
_LINKED_PATHS = 4_096
"""Paths a pass adds through the folder's links, at most (a sandbox's entries)."""


class _SandboxMadeAgain(Exception):
    """The pass found its sandbox destroyed and made again: a refill takes over."""


def _continued(earlier: SyncReport, later: SyncReport) -> SyncReport:
    """`later`, a pass that started over on a sandbox made again, with what `earlier` (the
    pass that found it so) changed before: what both sent counts once, and a file that
    `earlier` put in the new sandbox, found there by `later`, as sent, not unchanged.
    Errors and conflicts are `later`'s alone (it met those of `earlier` again); the
    duration is both passes'."""
    later.duration_s += earlier.duration_s
    later.uploaded = sorted({*earlier.uploaded, *later.uploaded})
    later.deleted = sorted({*earlier.deleted, *later.deleted})
    later.renamed = [*earlier.renamed, *later.renamed]
    later.created_dirs = sorted({*earlier.created_dirs, *later.created_dirs})
    later.unchanged_files -= {*later.uploaded, *(target for _, target in later.renamed)}
    later.notices = [*earlier.notices, *later.notices]
    return later


class FolderSync:
    """Mirror `local_dir` into `dest` of `sandbox`: `initial_sync()`, `sync_paths()`,
    or `watch()` for both plus incremental passes on every settled batch of changes.

    `prune` deletes every sandbox entry the folder lacks (see the module docstring);
    `state_file` (see `sync_state_file`) remembers what the sync created across runs, and
    is held by this sync alone until `close()`: use the sync as a context manager.
    """

    def __init__(
        self,
        local_dir: Path,
        sandbox: SandboxClient,
        *,
        dest: str = "/workspace",
        policy: ConflictPolicy | str = ConflictPolicy.LOCAL_WINS,
        debounce: float = 0.05,
        prune: bool = False,
        state_file: Path | None = None,
        retries: int = 3,
        retry_backoff: float = 0.1,
        max_retry_delay: float = 10.0,
        concurrency: int = 8,
        use_default_ignores: bool = True,
        keep_out: Iterable[Path] = (),
    ) -> None:
        """`keep_out`: directories never synced besides the workbench's own (see the
        module docstring); raises ValueError for a folder inside one of them,
        `SyncAlreadyRunningError` while another sync holds `state_file`, and OSError when
        its lock cannot be taken."""
        self.root = Path(local_dir).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"not a directory: {local_dir}")
        kept_out = _kept_out_of(self.root, keep_out)
        self.sandbox = sandbox
        self.dest = normalize_dest(dest)
        self.policy = ConflictPolicy(policy)
        self.debounce = debounce
        self.prune = prune
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.max_retry_delay = max_retry_delay
        self.concurrency = concurrency
        self.rules = IgnoreRules(self.root, use_defaults=use_default_ignores, kept_out=kept_out)
        self.manifest: dict[str, RemoteEntry] = {}
        self.status = SyncStatus()
        self._folder = SandboxFolder(
            sandbox,
            self.dest,
            retries=retries,
            retry_backoff=retry_backoff,
            concurrency=concurrency,
        )
        self._listeners: list[Callable[[SyncEvent], None]] = []
        self._links: dict[str, str] = {}
        """The folder's symlinks to its own files and directories, as the scans found
        them (see `LocalScan.links`): a pass over a path also passes over the same path
        through the links (`_linked_paths`)."""
        self._cut_links: set[str] = set()
        """Links to directories the last scan of the whole folder skipped whole (see
        `LocalScan.cut_links`): scans of a part skip them too."""
        self._held_refusals: list[SyncIssue] | None = None
        """While a pass may plan its refused uploads again (`_apply`): their errors, told
        only if they stay."""
        self._refused: set[str] = set()
        """The paths the last pass refused for want of room (`_note_refused`)."""
        self._initialized = False
        self._closed = False
        self._pending = PendingChanges(self.root, self.rules)
        self._known_notices: set[tuple[str, str]] = set()
        self.state_file = state_file
        self._state_identity = {"sandbox": sandbox.id, "dest": self.dest, "folder": str(self.root)}
        self._state_lock = (
            None if state_file is None else hold_state_file(state_file, self._state_identity)
        )
        """Held while the sync may use `state_file` (taken before it is read)."""
        self._saved: dict[str, RemoteEntry] = (
            {} if state_file is None else load_entries(state_file, self._state_identity)
        )
        """The entries it remembers (`manifest.remembered`) as of the last pass (and in
        `state_file`)."""

    def close(self) -> None:
        """Let another sync of the same state file start (release its lock); no pass runs
        after it. Closing again does nothing."""
        self._closed = True
        if self._state_lock is not None:
            self._state_lock.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _ensure_open(self) -> None:
        """A closed sync no longer holds its state file: it must not write it."""
        if self._closed:
            raise RuntimeError(f"the sync of {self.root} to {self.dest} was closed")

    @property
    def may_delete(self) -> bool:
        """Whether a pass can delete sandbox entries: with `prune`, or when the sync
        remembers entries it created (in an earlier run or this one)."""
        return self.prune or any(entry.owned for entry in self._saved.values())

    def _save_state(self) -> None:
        """Remember the owned entries and the files seen in sync; persist them when they
        changed."""
        kept = {path: entry for path, entry in self.manifest.items() if remembered(entry)}
        if kept == self._saved:
            return
        if self.state_file is not None:
            try:
                save_entries(self.state_file, self._state_identity, kept)
            except OSError as error:
                message = f"could not save the sync state to {self.state_file}: {error}"
                self.status.last_error = message
                self._emit(EventKind.ERROR, message)
                return
        self._saved = kept

    # ----- status for UIs --------------------------------------------------------------

    def subscribe(self, listener: Callable[[SyncEvent], None]) -> Callable[[], None]:
        """Call `listener` with every event; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def events(self) -> AsyncIterator[SyncEvent]:
        """Every event from now on, as an async iterator (ends after `STOPPED`)."""
        queue: asyncio.Queue[SyncEvent] = asyncio.Queue()
        unsubscribe = self.subscribe(queue.put_nowait)
        try:
            while True:
                event = await queue.get()
                yield event
                if event.kind is EventKind.STOPPED:
                    return
        finally:
            unsubscribe()

    def _emit(
        self,
        kind: EventKind,
        message: str,
        *,
        report: SyncReport | None = None,
        issue: SyncIssue | None = None,
    ) -> None:
        held = self._held_refusals
        if held is not None and issue is not None and issue.code == errors.ErrorCode.NO_SPACE:
            held.append(issue)
            return
        event = SyncEvent(kind, message, report, issue)
        for listener in list(self._listeners):
            listener(event)

    # ----- public passes --------------------------------------------------------------

    async def initial_sync(self) -> SyncReport:
        """Make `dest` mirror the folder, uploading only what differs (and deleting only
        what the module docstring allows). A sandbox destroyed and made again meanwhile is
        filled again from the start (`_REFILLS` times at most; then the report is
        incomplete and the next pass starts over), and the report counts what every start
        sent.

        Raises `TransientSyncError` when the sandbox cannot be reached, and
        `SyncConflictError` under policy `fail`.
        """
        self._ensure_open()
        started = time.perf_counter()
        report = SyncReport(full=True)
        for _ in range(_REFILLS):
            try:
                report = _continued(report, await self._initial_pass())
            except _SandboxMadeAgain:
                report.notices.append(self._note_made_again())
                continue
            if not self._folder.replaced:
                self._initialized = True
                break
            report.notices.append(self._note_made_again())
        else:
            self._initialized = False
            report.incomplete = True
        report.duration_s = time.perf_counter() - started  # the passes cut short included
        self._note_refused(report)
        return report

    async def _initial_pass(self) -> SyncReport:
        report = SyncReport(full=True)
        started = time.perf_counter()
        self._emit(EventKind.SYNCING, f"initial sync of {self.root} to {self.dest}")
        self.status.state = "syncing"
        # Whether the gateway takes batches, and when the sandbox was made, are asked while
        # `dest` is made: no extra wait.
        self._folder.replaced = False
        self._folder.told_this_pass = False
        await asyncio.gather(
            self._folder.retrying(lambda: self.sandbox.mkdir(self.dest, recursive=True)),
            self._folder.batch_limits(),
            self._folder.sandbox_made(),
        )
        listing: dict[str, FileInfo] = {}
        for info in await self._folder.list_entries("", recursive=True) or []:
            relative = info.relative_path
            if is_plain(relative) and not self.rules.is_ignored(relative, info.is_directory):
                listing[relative] = info
        try:
            root = self._root_identity()
            local = self._scan_into(report, None)
            self._check_root(root)
        except FolderGoneError:
            self._finish(report, started, folder_gone=True)
            raise
        self.manifest = {}
        for relative, info in listing.items():
            saved = self._saved.get(relative)
            if saved is not None and saved.is_dir == info.is_directory:
                self.manifest[relative] = saved  # ours: the baseline for conflict checks
            elif info.is_directory:
                self.manifest[relative] = RemoteEntry(True)
            else:
                self.manifest[relative] = RemoteEntry(False, info.size, info.modified_at)
        await self._folder.fill_digests(self.manifest, local)
        self._pending.full = False
        try:
            await self._apply(report, local, list(self.manifest), listing=listing)
        finally:
            self._finish(report, started)
        return report

    async def sync_paths(self, paths: Iterable[str | Path]) -> SyncReport:
        """One incremental pass over changed local paths (absolute or folder-relative).

        Paths that fail transiently stay pending (`report.incomplete`); call again.
        """
        self._pending.add(paths, skip_ignored=False)
        return await self._sync_pending()

    async def sync_all(self) -> SyncReport:
        """A full pass: rescan the whole folder against the manifest."""
        self._pending.full = True
        return await self._sync_pending()

    @property
    def has_pending(self) -> bool:
        """Whether some changes still wait for a (retried) pass."""
        return self._pending.waiting or not self._initialized

    async def watch(
        self,
        *,
        stop: asyncio.Event | None = None,
        after_sync: Callable[[SyncReport], Awaitable[None]] | None = None,
        ready: asyncio.Event | None = None,
    ) -> None:
        """Initial sync, then incremental passes until `stop` is set.

        `after_sync` runs after every complete pass that changed the sandbox (and after
        the initial sync), while further changes queue up and coalesce; a change to sync
        that comes while it runs cancels it, and it runs again after the next pass. Transient
        failures are retried with growing delays; the watcher keeps running. Only
        `SyncConflictError` (policy `fail`) ends the watch early.
        """
        await watch_folder(
            self,
            self._pending,
            self._sync_pending,
            self._emit,
            stop=stop,
            after_sync=after_sync,
            ready=ready,
        )

    # ----- passes ---------------------------------------------------------------------

    async def _sync_pending(self) -> SyncReport:
        self._ensure_open()
        if not self._initialized:
            return await self.initial_sync()
        scope = self._pending.take()
        if scope is not None and self._refused:
            # Refused for want of room last time: room may have been made since (a guest
            # deleted files), and nothing else would send them until they change (QA).
            scope = sorted({*scope, *self._refused})
        self._folder.told_this_pass = False
        full = scope is None
        report = SyncReport(full=full)
        started = time.perf_counter()
        folder_gone = False
        self._emit(EventKind.SYNCING, "full pass" if full else f"{len(scope or [])} changed paths")
        self.status.state = "syncing"
        try:
            root = self._root_identity()
            if scope is None:
                local = self._scan_into(report, None)
                current = list(self.manifest)
            else:
                scope = top_level(
                    path
                    for path in [*scope, *self._linked_paths(set(scope))]
                    if not is_under_any(parent_of(path), self._cut_links)
                )
                local = {}
                for relative in scope:
                    if self.rules.is_ignored(relative, host_path(self.root, relative).is_dir()):
                        continue
                    local.update(self._scan_into(report, relative))
                    local.update(self._local_ancestors(relative))
                current = [
                    path for path in self.manifest if any(is_under(path, top) for top in scope)
                ]
            self._check_root(root)
            await self._apply(report, local, current)
        except _SandboxMadeAgain:
            pass  # the refill below sends everything
        except BaseException as error:
            # Keep everything for the next attempt (the pass is state-based).
            self._pending.put_back(scope)
            folder_gone = isinstance(error, FolderGoneError)
            raise
        finally:
            self._finish(report, started, folder_gone=folder_gone)
        self._note_refused(report)
        if self._folder.replaced:
            return await self._refill(report)
        return report

    def _note_refused(self, report: SyncReport) -> None:
        """The paths the pass refused for want of room, which the next pass tries again
        whatever it is for (every pass tries those of the one before)."""
        self._refused = {
            issue.path for issue in report.errors if issue.code == errors.ErrorCode.NO_SPACE
        }

    async def _refill(self, report: SyncReport) -> SyncReport:
        """The sandbox was destroyed and made again since the last pass, and this pass sent
        only what changed: mirror the whole folder again (an initial sync), reported
        together with what the pass changed."""
        report.notices.append(self._note_made_again())
        self._initialized = False
        return _continued(report, await self.initial_sync())

    def _note_made_again(self) -> SyncIssue:
        """Tell that the sandbox was made again (the notice, for the pass's report)."""
        notice = SyncIssue(
            self.dest,
            "SANDBOX_REPLACED",
            f"sandbox {self.sandbox.id} was destroyed and made again: the whole folder is "
            "sent again",
        )
        self._emit(EventKind.NOTICE, notice.message, issue=notice)
        return notice

    async def _made_again(self) -> bool:
        """Whether the sandbox was destroyed and made again since it was last asked (so
        what looks like a conflict is a file this sync had put there that went with it).
        Asked only when no answer of this pass said it already; unknown (False) when the
        sandbox cannot be asked."""
        if not self._folder.replaced and not self._folder.told_this_pass:
            try:
                await self._folder.sandbox_made()
            except TransientSyncError:
                return False
        return self._folder.replaced

    def _linked_paths(self, changed: set[str]) -> set[str]:
        """The other paths of what changed through the folder's links: the watcher
        reports a change under one path only (the target's), the sandbox has a copy at
        each. A link whose target lies under a changed path is passed over whole; a path
        through a link the scans skip is not one of them."""
        if not self._links:
            return set()
        by_target: dict[str, list[str]] = {}
        for link, target in self._links.items():
            by_target.setdefault(target, []).append(link)
        found: set[str] = set()
        waiting = list(changed)
        while waiting and len(found) < _LINKED_PATHS:
            path = waiting.pop()
            others = [link for link, target in self._links.items() if is_under(target, path)]
            for place in [path, *ancestors(path)]:
                suffix = path[len(place) :]
                if place in self._links:
                    others.append(self._links[place] + suffix)
                others.extend(link + suffix for link in by_target.get(place, ()))
            for other in others:
                # Not one through a link the scans skip (a cycle): those led on without
                # end, to a name too long to stat, which ended the watch (a review).
                if (
                    other not in found
                    and other not in changed
                    and skipped_link_above(self.root, other) is None
                ):
                    found.add(other)
                    waiting.append(other)
                    if len(found) >= _LINKED_PATHS:
                        break
        return found

    def _local_ancestors(self, relative: str) -> dict[str, LocalEntry]:
        return {
            parent: LocalEntry(True)
            for parent in ancestors(relative)
            if host_path(self.root, parent).is_dir()
        }

    def _root_identity(self) -> tuple[int, int]:
        """The folder's device and inode; `FolderGoneError` when it is not there (a scan
        of it would find nothing, and the pass would delete every file it synced)."""
        identity = folder_identity(self.root)
        if identity is None:
            raise FolderGoneError(f"{self.root} is gone")
        return identity

    def _check_root(self, scanned: tuple[int, int]) -> None:
        """The folder scanned (`scanned`) is still there: else `FolderGoneError`."""
        if folder_identity(self.root) != scanned:
            raise FolderGoneError(f"{self.root} is gone or was replaced")

    def _scan_into(self, report: SyncReport, start: str | None) -> dict[str, LocalEntry]:
        if start is None:
            scan = scan_folder(self.root, self.rules)
            self._cut_links = set(scan.cut_links)
        else:
            scan = scan_folder(self.root, self.rules, start, cut_links=self._cut_links)
            self._cut_links |= scan.cut_links
        self._links = {
            link: target for link, target in self._links.items() if not is_under(link, start or "")
        }
        self._links.update(scan.links)
        for notice in scan.notices:
            key = (notice.path, notice.code)
            if key not in self._known_notices:
                self._known_notices.add(key)
                report.notices.append(notice)
                self._emit(EventKind.NOTICE, notice.message, issue=notice)
        return scan.entries

    def _finish(self, report: SyncReport, started: float, *, folder_gone: bool = False) -> None:
        report.duration_s = time.perf_counter() - started
        status = self.status
        status.pending_paths = len(self._pending.paths)
        status.errors += len(report.errors)
        status.conflicts += len(report.conflicts)
        status.files_synced += len(report.uploaded) + len(report.renamed)
        if folder_gone:  # nothing was synced
            status.state = "folder gone"
            status.last_error = f"{self.root} is gone"
        elif report.incomplete:
            status.state = "retrying"
        else:
            status.state = "idle"
            status.last_sync_at = time.time()
        if report.errors:
            status.last_error = report.errors[-1].message
        self._save_state()

    async def _apply(
        self,
        report: SyncReport,
        local: dict[str, LocalEntry],
        current: list[str],
        *,
        listing: dict[str, FileInfo] | None = None,
    ) -> None:
        """Plan, check conflicts (against `listing` when given) and apply one pass.

        Where the gateway takes batches and no listing is at hand, the conflict check
        rides on the pass's own calls as preconditions (`preconditions_for`): a save is
        one request, and only files a guest changed are checked and sent again.

        Uploads go before the deletes of their pass (`PlanApplier.apply`), so near the
        workspace's limits a pass that replaces files can have some refused for want of
        the room its own deletes made next: those are planned once more, and their
        errors told only if they stay."""
        self._held_refusals = []
        try:
            plan = await self._apply_plan(report, local, current, listing)
            attempted = {upload.relative for upload in plan.uploads}.union(plan.mkdirs)
            refused = {
                issue.path
                for issue in report.errors
                if issue.code == errors.ErrorCode.NO_SPACE and issue.path in attempted
            }
            if refused and report.deleted:
                # A directory refused: what lies under it was not sent either.
                first_round = [issue for issue in report.errors if issue.path in refused]
                report.errors = [issue for issue in report.errors if issue.path not in refused]
                retried = {
                    path: entry for path, entry in local.items() if is_under_any(path, refused)
                }
                try:
                    await self._apply_plan(report, retried, [], None)
                except BaseException:
                    report.errors[:0] = first_round  # not tried again after all: they stand
                    raise
        finally:
            held, self._held_refusals = self._held_refusals, None
            for issue in report.errors:
                if issue in held:
                    self._emit(EventKind.ERROR, issue.message, issue=issue)

    async def _apply_plan(
        self,
        report: SyncReport,
        local: dict[str, LocalEntry],
        current: list[str],
        listing: dict[str, FileInfo] | None,
    ) -> Plan:
        """`_apply`'s one round: plan, check conflicts, apply; the plan."""
        plan = plan_pass(
            report,
            local,
            current,
            manifest=self.manifest,
            root=self.root,
            rules=self.rules,
            prune=self.prune,
            emit=self._emit,
        )
        limits = await self._folder.batch_limits()
        preconditions = None
        if limits is not None and listing is None and self.policy is not ConflictPolicy.FAIL:
            # `fail` must change nothing of a conflicting pass: it checks first.
            preconditions = preconditions_for(plan, self.manifest)
        if limits is None or preconditions is None:
            await self._check_and_apply(report, plan, listing)
        else:
            leftover = await apply_in_batches(self._applier(report), plan, limits, preconditions)
            if leftover:
                await self._check_and_apply(report, leftover.plan, leftover.listing)
        return plan

    def _applier(self, report: SyncReport) -> PlanApplier:
        return PlanApplier(
            self._folder, self.manifest, report, self._emit, rules=self.rules, prune=self.prune
        )

    async def _check_and_apply(
        self,
        report: SyncReport,
        plan: Plan,
        listing: Mapping[str, SandboxEntry | None] | None,
    ) -> None:
        """Check `plan` for conflicts, settle them by the policy, then apply it (in
        batches when the gateway takes them)."""
        check = await find_conflicts(plan, listing, self.manifest, self._folder)
        if check.issues and await self._made_again():
            raise _SandboxMadeAgain
        resolve_conflicts(
            plan, report, check, manifest=self.manifest, policy=self.policy, emit=self._emit
        )
        applier = self._applier(report)
        limits = await self._folder.batch_limits()
        if limits is None:
            await applier.apply(plan)
        else:
            await apply_in_batches(applier, plan, limits)
