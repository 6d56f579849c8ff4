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
- Errors: limit and permission errors are per file (reported, the rest continues);
  transient ones (connection failures, 5xx, timeouts) are retried with backoff, and a
  pass that still fails keeps its paths pending for a later retry.
- Ignored paths are never touched in the sandbox (neither uploaded nor deleted).
- Local files are read without following symlinks (`read_regular_file`), at most
  `MAX_FILE_BYTES` + 1 bytes; every host path goes through `host_path`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, TypeVar

from workbench.api import errors
from workbench.api.client import SandboxClient
from workbench.api.types import FileInfo
from workbench.core.host_paths import HostPathError, checked_relative, host_path
from workbench.sync.events import (
    ConflictPolicy,
    EventKind,
    SyncEvent,
    SyncIssue,
    SyncReport,
    SyncStatus,
)
from workbench.sync.ignore import IGNORE_FILE_NAMES, IgnoreRules
from workbench.sync.local import LocalEntry, content_digest, read_regular_file, scan_folder
from workbench.sync.manifest import (
    RemoteEntry,
    load_owned_entries,
    normalize_dest,
    save_owned_entries,
)

__all__ = [
    "MAX_FILE_BYTES",
    "FolderSync",
    "RemoteEntry",
    "SyncConflictError",
    "TransientSyncError",
    "remote_path",
]

T = TypeVar("T")

MAX_FILE_BYTES: Final = 1_048_576
"""Spec 6.1 per-file limit, checked before sending."""

_FULL_RESCAN_THRESHOLD: Final = 256
"""More dirty paths than this in one pass: rescan the whole folder (cheaper)."""

_LIST_PARENTS_THRESHOLD: Final = 4
"""More parent directories to check than this: list `dest` recursively once."""

_CONTROL_BYTES: Final = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_PERMANENT_CODES: Final = frozenset(
    {
        errors.ErrorCode.FILE_TOO_LARGE,
        errors.ErrorCode.NO_SPACE,
        errors.ErrorCode.PERMISSION_DENIED,
        errors.ErrorCode.VALIDATION_FAILED,
        errors.ErrorCode.NOT_SUPPORTED,
        errors.ErrorCode.IS_DIRECTORY,
        errors.ErrorCode.NOT_DIRECTORY,
        errors.ErrorCode.FILE_EXISTS,
        errors.ErrorCode.FILE_NOT_FOUND,
    }
)


class SyncConflictError(Exception):
    """Raised under `ConflictPolicy.FAIL`; nothing of the conflicting pass was applied."""

    def __init__(self, conflicts: list[SyncIssue]) -> None:
        paths = ", ".join(issue.path for issue in conflicts)
        super().__init__(f"changed in the sandbox since the last sync: {paths}")
        self.conflicts = conflicts


class TransientSyncError(Exception):
    """The sandbox stayed unreachable (or kept answering 5xx) through every retry."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause


def is_transient(error: BaseException) -> bool:
    """Connection failures, timeouts and 5xx answers other than filesystem errors."""
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    if isinstance(error, errors.SandboxError):
        if error.code in _PERMANENT_CODES or error.code == errors.ErrorCode.FILESYSTEM_ERROR:
            return False
        return error.code == "CONNECTION_FAILED" or error.http_status >= 500
    return False


def remote_path(dest: str, relative: str) -> str:
    """`/workspace/dest` + `a/b.txt`."""
    return f"{dest}/{relative}" if relative else dest


def _parent(relative: str) -> str:
    return relative.rpartition("/")[0]


def _under(relative: str, prefix: str) -> bool:
    return not prefix or relative == prefix or relative.startswith(prefix + "/")


def _segments(relative: str) -> list[str]:
    """Sort key that puts a directory right before its contents (`a`, `a/b`, `a-b`)."""
    return relative.split("/")


def _ancestors(relative: str) -> Iterator[str]:
    """`a/b/c` → `a/b`, `a`."""
    parent = _parent(relative)
    while parent:
        yield parent
        parent = _parent(parent)


def _plain(relative: str) -> bool:
    """Whether a path from the sandbox is one we can reason about (no `..`, not absolute)."""
    try:
        checked_relative(relative)
    except HostPathError:
        return False
    return True


@dataclass
class _Upload:
    relative: str
    data: bytes
    digest: str
    local: LocalEntry


@dataclass
class _Plan:
    early_deletes: list[str] = field(default_factory=list)
    """Tops of entries replaced by the other kind (removed before the uploads)."""
    mkdirs: list[str] = field(default_factory=list)
    renames: list[tuple[str, str, _Upload]] = field(default_factory=list)
    uploads: list[_Upload] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    """Entries gone locally (removed after the uploads), each listed."""
    removable: set[str] = field(default_factory=set)
    """Every manifest path this plan removes (deletes, early deletes and below)."""


class FolderSync:
    """Mirror `local_dir` into `dest` of `sandbox`: `initial_sync()`, `sync_paths()`,
    or `watch()` for both plus incremental passes on every settled batch of changes.

    `prune` deletes every sandbox entry the folder lacks (see the module docstring);
    `state_file` (see `sync_state_file`) remembers what the sync created across runs.
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
    ) -> None:
        self.root = Path(local_dir).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"not a directory: {local_dir}")
        self.sandbox = sandbox
        self.dest = normalize_dest(dest)
        self.policy = ConflictPolicy(policy)
        self.debounce = debounce
        self.prune = prune
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.max_retry_delay = max_retry_delay
        self.concurrency = concurrency
        self.rules = IgnoreRules(self.root, use_defaults=use_default_ignores)
        self.manifest: dict[str, RemoteEntry] = {}
        self.status = SyncStatus()
        self._listeners: list[Callable[[SyncEvent], None]] = []
        self._initialized = False
        self._pending: set[str] = set()
        self._full_pending = False
        self._known_notices: set[tuple[str, str]] = set()
        self._sandbox_baseline: dict[str, RemoteEntry] = {}
        self.state_file = state_file
        self._state_identity = {"sandbox": sandbox.id, "dest": self.dest, "folder": str(self.root)}
        self._saved: dict[str, RemoteEntry] = (
            {} if state_file is None else load_owned_entries(state_file, self._state_identity)
        )
        """The owned entries as of the last pass (and in `state_file`)."""

    @property
    def may_delete(self) -> bool:
        """Whether a pass can delete sandbox entries: with `prune`, or when the sync
        remembers entries it created (in an earlier run or this one)."""
        return self.prune or bool(self._saved)

    def _save_state(self) -> None:
        """Remember the owned entries; persist them when they changed."""
        owned = {path: entry for path, entry in self.manifest.items() if entry.owned}
        if owned == self._saved:
            return
        if self.state_file is not None:
            try:
                save_owned_entries(self.state_file, self._state_identity, owned)
            except OSError as error:
                message = f"could not save the sync state to {self.state_file}: {error}"
                self.status.last_error = message
                self._emit(EventKind.ERROR, message)
                return
        self._saved = owned

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
        event = SyncEvent(kind, message, report, issue)
        for listener in list(self._listeners):
            listener(event)

    # ----- remote calls with bounded retries --------------------------------------------

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, retried with exponential backoff on transient failures."""
        for attempt in range(self.retries + 1):
            try:
                return await call()
            except Exception as error:
                if not is_transient(error):
                    raise
                if attempt == self.retries:
                    raise TransientSyncError(error) from error
                await asyncio.sleep(self.retry_backoff * 2**attempt)
        raise AssertionError("unreachable")

    def _remote(self, relative: str) -> str:
        return remote_path(self.dest, relative)

    async def _list_remote(self, relative: str, recursive: bool) -> list[FileInfo] | None:
        """Entries under a sandbox directory (None when it does not exist)."""
        try:
            listing = await self._retrying(
                lambda: self.sandbox.list_files(
                    self._remote(relative), recursive=recursive, include_hidden=True
                )
            )
        except (errors.FileNotFoundError, errors.FileSystemError):
            return None
        return listing.files

    async def _read_remote(self, relative: str) -> bytes | None:
        try:
            return await self._retrying(lambda: self.sandbox.read_bytes(self._remote(relative)))
        except (errors.FileNotFoundError, errors.FileSystemError):
            return None

    # ----- public passes --------------------------------------------------------------

    async def initial_sync(self) -> SyncReport:
        """Make `dest` mirror the folder, uploading only what differs (and deleting only
        what the module docstring allows).

        Raises `TransientSyncError` when the sandbox cannot be reached, and
        `SyncConflictError` under policy `fail`.
        """
        report = SyncReport(full=True)
        started = time.perf_counter()
        self._emit(EventKind.SYNCING, f"initial sync of {self.root} to {self.dest}")
        self.status.state = "syncing"
        await self._retrying(lambda: self.sandbox.mkdir(self.dest, recursive=True))
        listing: dict[str, FileInfo] = {}
        for info in await self._list_remote("", recursive=True) or []:
            relative = info.relative_path
            if _plain(relative) and not self.rules.is_ignored(relative, info.is_directory):
                listing[relative] = info
        local = self._scan_into(report, None)
        self.manifest = {}
        for relative, info in listing.items():
            saved = self._saved.get(relative)
            if saved is not None and saved.is_dir == info.is_directory:
                self.manifest[relative] = saved  # ours: the baseline for conflict checks
            elif info.is_directory:
                self.manifest[relative] = RemoteEntry(True)
            else:
                self.manifest[relative] = RemoteEntry(False, info.size, info.modified_at)
        await self._fill_remote_digests(self.manifest, local)
        self._full_pending = False
        try:
            await self._apply(report, local, list(self.manifest), listing=listing)
        finally:
            self._finish(report, started)
        self._initialized = True
        return report

    async def sync_paths(self, paths: Iterable[str | Path]) -> SyncReport:
        """One incremental pass over changed local paths (absolute or folder-relative).

        Paths that fail transiently stay pending (`report.incomplete`); call again.
        """
        for path in paths:
            relative = self._relative(path)
            if relative is None:
                continue
            if relative.rpartition("/")[2] in IGNORE_FILE_NAMES:
                self.rules.invalidate()
                self._full_pending = True
            self._pending.add(relative)
        return await self._sync_pending()

    async def sync_all(self) -> SyncReport:
        """A full pass: rescan the whole folder against the manifest."""
        self._full_pending = True
        return await self._sync_pending()

    @property
    def has_pending(self) -> bool:
        """Whether some changes still wait for a (retried) pass."""
        return self._full_pending or bool(self._pending) or not self._initialized

    # ----- passes ---------------------------------------------------------------------

    def _relative(self, path: str | Path) -> str | None:
        """The folder-relative form of a changed path; None outside the folder."""
        candidate = Path(path)
        if candidate.is_absolute():
            try:
                candidate = candidate.relative_to(self.root)
            except ValueError:
                return None
        text = candidate.as_posix().strip("/")
        return text if _plain(text) else None

    async def _sync_pending(self) -> SyncReport:
        if not self._initialized:
            return await self.initial_sync()
        full = self._full_pending or len(self._pending) > _FULL_RESCAN_THRESHOLD
        scope = None if full else sorted(self._pending)
        self._pending.clear()
        self._full_pending = False
        report = SyncReport(full=full)
        started = time.perf_counter()
        self._emit(EventKind.SYNCING, "full pass" if full else f"{len(scope or [])} changed paths")
        self.status.state = "syncing"
        try:
            if scope is None:
                local = self._scan_into(report, None)
                current = list(self.manifest)
            else:
                scope = self._top_level(scope)
                local = {}
                for relative in scope:
                    if self.rules.is_ignored(relative, host_path(self.root, relative).is_dir()):
                        continue
                    local.update(self._scan_into(report, relative))
                    local.update(self._local_ancestors(relative))
                current = [
                    path for path in self.manifest if any(_under(path, top) for top in scope)
                ]
            await self._apply(report, local, current)
        except BaseException:
            # Keep everything for the next attempt (the pass is state-based).
            if scope is None:
                self._full_pending = True
            else:
                self._pending.update(scope)
            raise
        finally:
            self._finish(report, started)
        return report

    @staticmethod
    def _top_level(paths: Iterable[str]) -> list[str]:
        """The paths not inside another of the paths, sorted."""
        tops: list[str] = []
        for path in sorted(paths, key=_segments):  # a path's children follow it
            if not tops or not _under(path, tops[-1]):
                tops.append(path)
        return tops

    def _local_ancestors(self, relative: str) -> dict[str, LocalEntry]:
        return {
            parent: LocalEntry(True)
            for parent in _ancestors(relative)
            if host_path(self.root, parent).is_dir()
        }

    def _scan_into(self, report: SyncReport, start: str | None) -> dict[str, LocalEntry]:
        scan = scan_folder(self.root, self.rules, start or "")
        for notice in scan.notices:
            key = (notice.path, notice.code)
            if key not in self._known_notices:
                self._known_notices.add(key)
                report.notices.append(notice)
                self._emit(EventKind.NOTICE, notice.message, issue=notice)
        return scan.entries

    def _finish(self, report: SyncReport, started: float) -> None:
        report.duration_s = time.perf_counter() - started
        status = self.status
        status.pending_paths = len(self._pending)
        status.errors += len(report.errors)
        status.conflicts += len(report.conflicts)
        status.files_synced += len(report.uploaded) + len(report.renamed)
        if report.incomplete:
            status.state = "retrying"
        else:
            status.state = "idle"
            status.last_sync_at = time.time()
        if report.errors:
            status.last_error = report.errors[-1].message
        self._save_state()

    async def _fill_remote_digests(
        self, remote: dict[str, RemoteEntry], local: dict[str, LocalEntry]
    ) -> None:
        """Read back sandbox files whose size matches a local file, to compare digests."""
        candidates = [
            path
            for path, entry in remote.items()
            if not entry.is_dir
            and entry.digest is None
            and (other := local.get(path)) is not None
            and not other.is_dir
            and other.size == entry.size
        ]

        async def fill(path: str) -> None:
            data = await self._read_remote(path)
            if data is not None:
                remote[path] = replace(remote[path], digest=content_digest(data))

        await self._bounded(candidates, fill)

    async def _bounded(self, items: Iterable[T], work: Callable[[T], Awaitable[None]]) -> None:
        """`work(item)` for every item, `concurrency` at a time. The first
        `TransientSyncError` stops new work and is re-raised once the rest settled."""
        semaphore = asyncio.Semaphore(self.concurrency)
        failures: list[TransientSyncError] = []

        async def one(item: T) -> None:
            async with semaphore:
                if failures:
                    return
                try:
                    await work(item)
                except TransientSyncError as error:
                    failures.append(error)

        await asyncio.gather(*(one(item) for item in items))
        if failures:
            raise failures[0]

    # ----- planning -------------------------------------------------------------------

    def _read_local(self, relative: str, entry: LocalEntry, report: SyncReport) -> bytes | None:
        """The file's bytes; None when it is too large (reported), vanished, no longer a
        regular file or now reached through a symlink leaving the folder (a later event
        settles those)."""
        too_large = entry.size > MAX_FILE_BYTES
        data = None if too_large else read_regular_file(self.root, relative, MAX_FILE_BYTES)
        if data is not None and len(data) <= MAX_FILE_BYTES:
            return data
        if too_large or data is not None:
            size = f"{entry.size} bytes" if data is None else f"over {MAX_FILE_BYTES} bytes"
            report.errors.append(
                SyncIssue(
                    relative,
                    errors.ErrorCode.FILE_TOO_LARGE,
                    f"{relative} is {size}; the sandbox allows at most {MAX_FILE_BYTES} per file",
                )
            )
        return None

    def _plan(
        self,
        report: SyncReport,
        local: dict[str, LocalEntry],
        current: list[str],
    ) -> _Plan:
        plan = _Plan()
        manifest = self.manifest
        gone: list[str] = []
        blocked: list[str] = []
        for path in current:
            entry = manifest.get(path)
            wanted = local.get(path)
            if entry is None or (wanted is not None and wanted.is_dir == entry.is_dir):
                continue
            if wanted is None and self.rules.is_ignored(path, entry.is_dir):
                manifest.pop(path, None)  # became ignored: leave the sandbox copy alone
                continue
            if not (entry.owned or self.prune):
                if wanted is None:
                    manifest.pop(path, None)  # not ours: it stays, untracked
                else:
                    blocked.append(path)
                    self._keep_in_the_way(report, path, entry.is_dir)
                continue
            (gone if wanted is None else plan.early_deletes).append(path)
        replaced = set(plan.early_deletes)
        for path, wanted in sorted(local.items()):
            if blocked and any(_under(path, top) for top in blocked):
                continue
            entry = manifest.get(path)
            if wanted.is_dir:
                if entry is None or not entry.is_dir or path in replaced:
                    plan.mkdirs.append(path)
                continue
            if (
                entry is not None
                and not entry.is_dir
                and entry.local_stat == wanted.stat_key
                and path not in replaced
            ):
                report.unchanged += 1
                continue
            data = self._read_local(path, wanted, report)
            if data is None:
                continue
            digest = content_digest(data)
            if entry is not None and not entry.is_dir and entry.digest == digest:
                manifest[path] = replace(entry, local_stat=wanted.stat_key)
                report.unchanged += 1
                continue
            plan.uploads.append(_Upload(path, data, digest, wanted))
        # A deleted file and a new one with the same content: rename instead.
        deleted_by_digest: dict[str, list[str]] = {}
        for path in gone:
            entry = manifest[path]
            if not entry.is_dir and entry.digest is not None:
                deleted_by_digest.setdefault(entry.digest, []).append(path)
        kept: list[_Upload] = []
        for upload in plan.uploads:
            sources = deleted_by_digest.get(upload.digest)
            if sources and upload.relative not in manifest:
                source = sources.pop()
                plan.renames.append((source, upload.relative, upload))
            else:
                kept.append(upload)
        # Small files first: under the 16 MiB cap, as many files as possible land.
        plan.uploads = sorted(kept, key=lambda upload: (len(upload.data), upload.relative))
        renamed = {source for source, _, _ in plan.renames}
        plan.deletes = sorted(
            path
            for path in gone
            if path not in renamed and not any(_under(path, top) for top in replaced)
        )
        plan.removable = (set(gone) | replaced) - renamed
        plan.mkdirs = sorted(set(plan.mkdirs), key=lambda path: path.count("/"))
        return plan

    def _keep_in_the_way(self, report: SyncReport, relative: str, is_dir: bool) -> None:
        """Report a sandbox entry the sync did not create where the folder has the other
        kind of entry: it is kept, and the local one is not synced."""
        kind = "directory" if is_dir else "file"
        issue = SyncIssue(
            relative,
            "SANDBOX_ENTRY_KEPT",
            f"{relative}: the sandbox has a {kind} here that the sync did not create; "
            "kept (prune replaces it)",
        )
        report.errors.append(issue)
        self._emit(EventKind.ERROR, issue.message, issue=issue)

    # ----- conflicts ------------------------------------------------------------------

    async def _remote_now(self, paths: list[str]) -> dict[str, FileInfo | None]:
        """Current sandbox `FileInfo` for each path (None: missing)."""
        parents = sorted({_parent(path) for path in paths})
        found: dict[str, FileInfo] = {}
        if len(parents) > _LIST_PARENTS_THRESHOLD:
            for info in await self._list_remote("", recursive=True) or []:
                found[info.relative_path] = info
        else:
            for parent in parents:
                for info in await self._list_remote(parent, recursive=False) or []:
                    key = f"{parent}/{info.relative_path}" if parent else info.relative_path
                    found[key] = info
        return {path: found.get(path) for path in paths}

    async def _find_conflicts(
        self, plan: _Plan, listing: dict[str, FileInfo] | None
    ) -> tuple[set[str], list[SyncIssue]]:
        """Files the plan would overwrite or delete that changed in the sandbox since we
        uploaded them (`listing`: a fresh listing of `dest`, else it is asked for).
        Returns the paths already equal to the local content, and issues."""
        wanted: dict[str, str | None] = {}
        for upload in plan.uploads:
            wanted[upload.relative] = upload.digest
        for source, _, _ in plan.renames:
            wanted[source] = None
        for path in plan.removable:
            wanted[path] = None
        checked = [
            path
            for path in wanted
            if (entry := self.manifest.get(path)) is not None and not entry.is_dir
        ]
        if not checked:
            return set(), []
        if listing is None:
            now = await self._remote_now(checked)
        else:
            now = {path: listing.get(path) for path in checked}
        in_sync: set[str] = set()
        issues: list[SyncIssue] = []
        for path in checked:
            entry = self.manifest[path]
            info = now[path]
            if info is None:
                if wanted[path] is None:
                    continue  # we wanted it gone, and it is
                issues.append(SyncIssue(path, "CONFLICT", f"{path} was deleted in the sandbox"))
                self.manifest.pop(path, None)
                continue
            if info.is_directory:
                issues.append(
                    SyncIssue(path, "CONFLICT", f"{path} became a directory in the sandbox")
                )
                continue
            if info.size == entry.size and info.modified_at == entry.modified_at:
                continue
            digest: str | None = None
            if info.size == entry.size or wanted[path] is not None:
                data = await self._read_remote(path)
                digest = None if data is None else content_digest(data)
            if digest is not None and digest == entry.digest:
                self.manifest[path] = replace(entry, modified_at=info.modified_at)
                continue
            if digest is not None and digest == wanted[path]:
                self.manifest[path] = replace(
                    entry, size=info.size, modified_at=info.modified_at, digest=digest
                )
                in_sync.add(path)
                continue
            issues.append(
                SyncIssue(
                    path, "CONFLICT", f"{path} was changed in the sandbox since the last sync"
                )
            )
            self._sandbox_baseline[path] = RemoteEntry(
                False, info.size, info.modified_at, digest, None, owned=True
            )
        return in_sync, issues

    def _resolve_conflicts(
        self, plan: _Plan, report: SyncReport, in_sync: set[str], issues: list[SyncIssue]
    ) -> None:
        """Apply the policy: `fail` raises, `sandbox-wins` drops the plan's steps on the
        conflicting files, `local-wins` keeps them. A conflicting rename source is never
        moved (that would carry the guest's content): its target is uploaded instead."""
        for path in in_sync:
            upload = next(item for item in plan.uploads if item.relative == path)
            self.manifest[path] = replace(self.manifest[path], local_stat=upload.local.stat_key)
            report.unchanged += 1
        plan.uploads = [item for item in plan.uploads if item.relative not in in_sync]
        if not issues:
            return
        report.conflicts.extend(issues)
        if self.policy is ConflictPolicy.FAIL:
            for issue in issues:
                self._emit(EventKind.CONFLICT, issue.message, issue=issue)
            raise SyncConflictError(issues)
        local_wins = self.policy is ConflictPolicy.LOCAL_WINS
        conflicting = {issue.path for issue in issues}
        sources = {source for source, _, _ in plan.renames}
        for issue in issues:
            if not local_wins:
                verdict = "sandbox version kept"
            elif issue.path in plan.removable or issue.path in sources:
                verdict = "deleted anyway (local-wins)"
            else:
                verdict = "local version wins"
            self._emit(EventKind.CONFLICT, f"{issue.message}; {verdict}", issue=issue)
        for source, _, upload in plan.renames:
            if source in conflicting:
                plan.uploads.append(upload)
                if local_wins:
                    plan.deletes.append(source)
                    plan.removable.add(source)
        plan.renames = [rename for rename in plan.renames if rename[0] not in conflicting]
        if local_wins:
            return
        for path in conflicting:
            baseline = self._sandbox_baseline.pop(path, None)
            if path in plan.removable or path in sources:
                self.manifest.pop(path, None)  # kept, and no longer the sync's to delete
            elif baseline is not None:
                self.manifest[path] = baseline
        plan.uploads = [item for item in plan.uploads if item.relative not in conflicting]
        plan.deletes = [path for path in plan.deletes if path not in conflicting]
        plan.early_deletes = [path for path in plan.early_deletes if path not in conflicting]
        plan.removable -= conflicting

    # ----- execution ------------------------------------------------------------------

    def _forget(self, relative: str) -> None:
        for path in [path for path in self.manifest if _under(path, relative)]:
            del self.manifest[path]

    def _per_path_error(self, report: SyncReport, relative: str, error: Exception) -> None:
        if isinstance(error, errors.SandboxError):
            code, message = error.code, f"{relative}: {error.message}"
        else:
            code, message = "ERROR", f"{relative}: {error}"
        issue = SyncIssue(relative, code, message)
        report.errors.append(issue)
        self._emit(EventKind.ERROR, message, issue=issue)

    async def _remove(self, report: SyncReport, relative: str, *, recursive: bool) -> bool:
        """One delete call (per-path errors are reported); True when it succeeded."""
        try:
            await self._retrying(
                lambda: self.sandbox.delete_file(
                    self._remote(relative), recursive=recursive, force=True
                )
            )
        except TransientSyncError:
            raise
        except Exception as error:
            self._per_path_error(report, relative, error)
            return False
        self._forget(relative)
        report.deleted.append(relative)
        return True

    async def _delete_all(self, report: SyncReport, paths: list[str], removable: set[str]) -> None:
        """Remove these manifest entries: a file on its own (never a directory a guest
        put in its place), a directory with what `removable` holds in it."""
        for top in self._top_level(paths):
            entry = self.manifest.get(top)
            if entry is None:
                continue  # went with an earlier step of this pass
            if entry.is_dir:
                await self._delete_directory(report, top, removable)
            else:
                await self._remove(report, top, recursive=False)

    async def _delete_directory(self, report: SyncReport, top: str, removable: set[str]) -> None:
        """Remove the directory `top` if all it holds may go (it is `removable`, or with
        `prune` not ignored); otherwise remove only those entries and keep the rest."""
        listing = await self._list_remote(top, recursive=True)
        if listing is None:  # already gone, or no longer a directory
            self._forget(top)
            return
        deletable: dict[str, bool] = {}
        kept: list[str] = []
        for info in listing:
            path = f"{top}/{info.relative_path}"
            if _plain(info.relative_path) and (
                path in removable
                or (self.prune and not self.rules.is_ignored(path, info.is_directory))
            ):
                deletable[path] = info.is_directory
            else:
                kept.append(path)
        if not kept:
            await self._remove(report, top, recursive=True)
            return
        protected = {ancestor for path in kept for ancestor in _ancestors(path)}
        removed: set[str] = set()
        for path in sorted(deletable, key=_segments):  # parents first
            if path in protected or not removed.isdisjoint(_ancestors(path)):
                continue  # holds kept entries, or went with its parent
            if await self._remove(report, path, recursive=deletable[path]):
                removed.add(path)
        for path in [path for path in self.manifest if _under(path, top)]:
            if path in protected or (path not in deletable and path not in kept):
                del self.manifest[path]  # kept (shared with others' entries) or gone
        shown = ", ".join(sorted(kept)[:3]) + (", …" if len(kept) > 3 else "")
        notice = SyncIssue(
            top,
            "KEPT_DIRECTORY",
            f"kept {top} in the sandbox: it holds entries that are not the sync's to delete "
            f"({shown})",
        )
        report.notices.append(notice)
        self._emit(EventKind.NOTICE, notice.message, issue=notice)

    async def _mkdir(self, report: SyncReport, relative: str) -> bool:
        try:
            await self._retrying(lambda: self.sandbox.mkdir(self._remote(relative), recursive=True))
        except TransientSyncError:
            raise
        except Exception as error:
            self._per_path_error(report, relative, error)
            return False
        previous = self.manifest.get(relative)
        if previous is None or not previous.is_dir:
            report.created_dirs.append(relative)
            self.manifest[relative] = RemoteEntry(True, owned=True)
        return True

    async def _upload(self, report: SyncReport, upload: _Upload) -> None:
        # Plain ASCII text travels as a JSON string (no base64 cost on either side);
        # anything that JSON would escape heavily goes as bytes (base64).
        data = upload.data
        plain = data.isascii() and _CONTROL_BYTES.search(data) is None
        if plain and len(data) > 65_536:
            escaped = sum(data.count(char) for char in (b'"', b"\\", b"\n", b"\t", b"\r"))
            plain = escaped * 3 < len(data)  # else base64 (4/3 of the size) is smaller
        content: str | bytes = data.decode("ascii") if plain else data
        target = self._remote(upload.relative)
        try:
            result = await self._retrying(lambda: self.sandbox.write_file(target, content))
        except TransientSyncError:
            raise
        except Exception as error:
            self._per_path_error(report, upload.relative, error)
            return
        self.manifest[upload.relative] = RemoteEntry(
            False,
            len(upload.data),
            result.timestamp,
            upload.digest,
            upload.local.stat_key,
            owned=True,
        )
        report.uploaded.append(upload.relative)

    async def _rename(self, report: SyncReport, source: str, upload: _Upload) -> None:
        try:
            result = await self._retrying(
                lambda: self.sandbox.rename_file(
                    self._remote(source), self._remote(upload.relative)
                )
            )
        except TransientSyncError:
            raise
        except Exception:
            # Fall back to upload + delete (both idempotent).
            await self._upload(report, upload)
            await self._remove(report, source, recursive=False)
            return
        old = self.manifest.pop(source)
        self.manifest[upload.relative] = replace(
            old,
            local_stat=upload.local.stat_key,
            modified_at=old.modified_at or result.timestamp,
            owned=True,
        )
        report.renamed.append((source, upload.relative))

    async def _apply(
        self,
        report: SyncReport,
        local: dict[str, LocalEntry],
        current: list[str],
        *,
        listing: dict[str, FileInfo] | None = None,
    ) -> None:
        """Plan, check conflicts (against `listing` when given) and apply one pass."""
        self._sandbox_baseline = {}
        plan = self._plan(report, local, current)
        in_sync, issues = await self._find_conflicts(plan, listing)
        self._resolve_conflicts(plan, report, in_sync, issues)
        try:
            await self._delete_all(report, plan.early_deletes, plan.removable)
            failed_dirs: list[str] = []
            for path in plan.mkdirs:
                if any(_under(path, bad) for bad in failed_dirs):
                    continue
                if not await self._mkdir(report, path):
                    failed_dirs.append(path)
            for source, _, upload in plan.renames:
                await self._rename(report, source, upload)

            async def upload_one(upload: _Upload) -> None:
                await self._upload(report, upload)

            await self._bounded(
                [
                    upload
                    for upload in plan.uploads
                    if not any(_under(upload.relative, bad) for bad in failed_dirs)
                ],
                upload_one,
            )
            await self._delete_all(report, plan.deletes, plan.removable)
        except TransientSyncError:
            report.incomplete = True
            raise

    # ----- watching -------------------------------------------------------------------

    async def watch(
        self,
        *,
        stop: asyncio.Event | None = None,
        after_sync: Callable[[SyncReport], Awaitable[None]] | None = None,
        ready: asyncio.Event | None = None,
    ) -> None:
        """Initial sync, then incremental passes until `stop` is set.

        `after_sync` runs after every complete pass that changed the sandbox (and after
        the initial sync), while further changes queue up and coalesce. Transient
        failures are retried with growing delays; the watcher keeps running. Only
        `SyncConflictError` (policy `fail`) ends the watch early.
        """
        from watchfiles import awatch

        stop = stop or asyncio.Event()
        batches: asyncio.Queue[set[str]] = asyncio.Queue()

        async def watcher() -> None:
            step = max(1, int(self.debounce * 1000))
            async for changes in awatch(
                self.root,
                watch_filter=None,
                step=step,
                debounce=max(1600, step * 4),
                stop_event=stop,
                ignore_permission_denied=True,
            ):
                batches.put_nowait({path for _, path in changes})

        watch_task = asyncio.create_task(watcher())
        stop_task = asyncio.create_task(stop.wait())
        await asyncio.sleep(0)  # let awatch install its watches before the first scan
        self._emit(EventKind.WATCHING, f"watching {self.root} → {self.dest}")
        if ready is not None:
            ready.set()
        delay = self.max_retry_delay
        failures = 0
        first = True
        try:
            while not stop.is_set():
                if self.has_pending:
                    delay = min(self.max_retry_delay, 0.25 * 2**failures) if failures else 0.0
                    timeout: float | None = delay
                else:
                    timeout = None
                get_task = asyncio.create_task(batches.get())
                done, _ = await asyncio.wait(
                    {get_task, stop_task, watch_task},
                    timeout=timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if get_task in done:
                    self._add_batch(get_task.result())
                else:
                    get_task.cancel()
                if watch_task in done:
                    watch_task.result()  # surface a watcher crash
                    break
                if stop.is_set():
                    break
                while not batches.empty():
                    self._add_batch(batches.get_nowait())
                if not self.has_pending:
                    continue
                try:
                    report = await self._sync_pending()
                except TransientSyncError as error:
                    failures += 1
                    message = f"sandbox unavailable ({error}); will retry"
                    self.status.last_error = message
                    self._emit(EventKind.RETRYING, message)
                    continue
                failures = 0
                self._emit(EventKind.SYNCED, report.summary(), report=report)
                if after_sync is not None and (report.changed or first):
                    await after_sync(report)
                first = False
        finally:
            stop.set()
            stop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(watch_task, timeout=5)
            self._emit(EventKind.STOPPED, "stopped watching")

    def _add_batch(self, paths: set[str]) -> None:
        for path in paths:
            relative = self._relative(path)
            if relative is None:
                continue
            name = relative.rpartition("/")[2]
            if name in IGNORE_FILE_NAMES:
                self.rules.invalidate()
                self._full_pending = True
            elif self.rules.is_ignored(relative, host_path(self.root, relative).is_dir()):
                continue
            self._pending.add(relative)
