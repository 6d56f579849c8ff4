"""Applying a plan against the sandbox: file by file, or in `files/batch` requests.

**File by file** (`PlanApplier`): early deletes, directories, renames, uploads
(`concurrency` at a time) and deletes, every call retried on transient failures. A call
that fails for one path (limits, permissions, …) is reported and the pass goes on. What
each outcome means for the manifest and the report is shared with the batched path.

**In batches** (`apply_in_batches`): the pass's file deletes, directories, renames and
uploads travel as `files/batch` requests (a gateway extension) instead of one request
each. The steps keep the order of the per-file path (`PlanApplier.apply`): a batch applies
its entries in order, the batches holding deletes made early, directories or renames are
sent one after another first, then the batches of uploads alone, `BATCH_CONCURRENCY` at a
time, then the batches holding deletes, one after another. Directories being removed are
listed first, as on the per-file path, with one listing of the whole destination when
there are several; those whose entries may all go are removed by batches of recursive
deletes, before the other steps (early) or after them (late). Each
entry's outcome means for the manifest and the report exactly what the same call made
alone would (`PlanApplier.removed` and the others).

With `preconditions` (see `conflicts.preconditions_for`) each checked file's call carries
its expected version, so the conflict check rides on the write itself: an entry whose file
changed in the sandbox is not applied, and comes back in the `Leftover` plan, together with
what is there now, for the conflict check and a second round.

A batch the gateway refuses as a whole (it lacks the route, or says the request is too
large) is not an outcome of its entries: they, and every batch not sent yet, go file by
file instead (or, with preconditions, back into the `Leftover`, to be checked first). A
batch that fails in transit is sent again (`SandboxFolder.send_batch`); an entry that
fails with a transient error of its own (a 5xx) ends the pass like an unreachable call,
so that a later pass retries it.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from workbench.protocol import errors
from workbench.protocol.types import (
    BatchEntry,
    BatchEntryResult,
    FilesBatchLimits,
    FileState,
    FileVersion,
)
from workbench.sync.events import EmitEvent, EventKind, SyncIssue, SyncReport
from workbench.sync.ignore import IgnoreRules
from workbench.sync.manifest import RemoteEntry
from workbench.sync.planning import Plan, Upload
from workbench.sync.relative_paths import (
    ancestors,
    is_plain,
    is_under,
    parent_of,
    path_segments,
    top_level,
)
from workbench.sync.sandbox_folder import SandboxFolder, TransientSyncError, is_transient

__all__ = [
    "BATCH_BYTES",
    "BATCH_CONCURRENCY",
    "BATCH_ENTRIES",
    "Leftover",
    "PlanApplier",
    "apply_in_batches",
    "upload_content",
]

_CONTROL_BYTES: Final = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def upload_content(data: bytes) -> tuple[str | bytes, int]:
    """What to send for a file, and how many bytes it takes in a JSON body. Plain ASCII
    text travels as a JSON string (no base64 cost on either side); anything that JSON
    would escape heavily goes as bytes (base64)."""
    plain = data.isascii() and _CONTROL_BYTES.search(data) is None
    escaped = 0
    if plain:
        escaped = sum(data.count(char) for char in (b'"', b"\\", b"\n", b"\t", b"\r"))
        if len(data) > 65_536:
            plain = escaped * 3 < len(data)  # else base64 (4/3 of the size) is smaller
    if plain:
        return data.decode("ascii"), len(data) + escaped + 2
    return data, 4 * ((len(data) + 2) // 3) + 2


class PlanApplier:
    """Applies one pass's plan to `folder`, keeping `manifest` and `report` up to date.

    `prune` and `rules` decide what else a directory being removed may lose (see
    `workbench.sync.folder_sync`)."""

    def __init__(
        self,
        folder: SandboxFolder,
        manifest: dict[str, RemoteEntry],
        report: SyncReport,
        emit: EmitEvent,
        *,
        rules: IgnoreRules,
        prune: bool,
    ) -> None:
        self.folder = folder
        self.manifest = manifest
        self.report = report
        self.emit = emit
        self.rules = rules
        self.prune = prune

    async def apply(self, plan: Plan) -> None:
        """Run the plan's steps in order; a `TransientSyncError` marks the report
        incomplete and ends the pass."""
        try:
            await self._delete_all(plan.early_deletes, plan.removable)
            failed_dirs: list[str] = []
            for path in plan.mkdirs:
                if any(is_under(path, bad) for bad in failed_dirs):
                    continue
                if not await self._mkdir(path):
                    failed_dirs.append(path)
            for source, _, upload in plan.renames:
                await self._rename(source, upload)

            await self.folder.bounded(
                [
                    upload
                    for upload in plan.uploads
                    if not any(is_under(upload.relative, bad) for bad in failed_dirs)
                ],
                self._upload,
            )
            await self._delete_all(plan.deletes, plan.removable)
        except TransientSyncError:
            self.report.incomplete = True
            raise

    def forget(self, relative: str) -> None:
        """Drop `relative` and, for a directory, what the manifest lists under it."""
        entry = self.manifest.pop(relative, None)
        if entry is not None and not entry.is_dir:
            return  # a file: nothing lies under it (one look, not one per entry)
        for path in [path for path in self.manifest if is_under(path, relative)]:
            del self.manifest[path]

    # ----- what a call that succeeded or failed means for the manifest and report -----

    def removed(self, relative: str) -> None:
        self.forget(relative)
        self.report.deleted.append(relative)

    def made_directory(self, relative: str) -> None:
        previous = self.manifest.get(relative)
        if previous is None or not previous.is_dir:
            self.report.created_dirs.append(relative)
            self.manifest[relative] = RemoteEntry(True, owned=True)

    def uploaded(self, upload: Upload, modified_at: str) -> None:
        self.manifest[upload.relative] = RemoteEntry(
            False,
            len(upload.data),
            modified_at,
            upload.digest,
            upload.local.stat_key,
            owned=True,
        )
        self.report.uploaded.append(upload.relative)

    def renamed(self, source: str, upload: Upload, timestamp: str) -> None:
        old = self.manifest.pop(source)
        self.manifest[upload.relative] = replace(
            old,
            local_stat=upload.local.stat_key,
            modified_at=old.modified_at or timestamp,
            owned=True,
        )
        self.report.renamed.append((source, upload.relative))

    def per_path_error(self, relative: str, error: Exception) -> None:
        if isinstance(error, errors.SandboxError):
            code, message = error.code, f"{relative}: {error.message}"
        else:
            code, message = "ERROR", f"{relative}: {error}"
        issue = SyncIssue(relative, code, message)
        self.report.errors.append(issue)
        self.emit(EventKind.ERROR, message, issue=issue)

    async def _remove(self, relative: str, *, recursive: bool) -> bool:
        """One delete call (per-path errors are reported); True when it succeeded."""
        folder = self.folder
        try:
            await folder.retrying(
                lambda: folder.sandbox.delete_file(
                    folder.path(relative), recursive=recursive, force=True
                )
            )
        except TransientSyncError:
            raise
        except Exception as error:
            self.per_path_error(relative, error)
            return False
        self.removed(relative)
        return True

    async def _delete_all(self, paths: list[str], removable: set[str]) -> None:
        """Remove these manifest entries: a file on its own (never a directory a guest
        put in its place), a directory with what `removable` holds in it."""
        for top in top_level(paths):
            entry = self.manifest.get(top)
            if entry is None:
                continue  # went with an earlier step of this pass
            if entry.is_dir:
                await self.delete_directory(top, removable)
            else:
                await self._remove(top, recursive=False)

    async def delete_directory(self, top: str, removable: set[str]) -> None:
        """Remove the directory `top` if all it holds may go (it is `removable`, or with
        `prune` not ignored); otherwise remove only those entries and keep the rest."""
        listing = await self.folder.list_entries(top, recursive=True)
        if listing is None:  # already gone, or no longer a directory
            self.forget(top)
            return
        contents = [(f"{top}/{info.relative_path}", info.is_directory) for info in listing]
        deletable, kept = self.sort_directory(contents, removable)
        if kept:
            await self.delete_around(top, deletable, kept)
        else:
            await self._remove(top, recursive=True)

    def sort_directory(
        self, contents: list[tuple[str, bool]], removable: set[str]
    ) -> tuple[dict[str, bool], list[str]]:
        """A directory's `contents` (path, whether a directory) as (what may go, with
        whether it is a directory; what must stay)."""
        deletable: dict[str, bool] = {}
        kept: list[str] = []
        for path, is_directory in contents:
            if is_plain(path) and (
                path in removable or (self.prune and not self.rules.is_ignored(path, is_directory))
            ):
                deletable[path] = is_directory
            else:
                kept.append(path)
        return deletable, kept

    async def delete_around(self, top: str, deletable: dict[str, bool], kept: list[str]) -> None:
        """Remove what may go of the directory `top`, keeping it and the `kept` entries
        (and saying so)."""
        protected = {ancestor for path in kept for ancestor in ancestors(path)}
        removed: set[str] = set()
        for path in sorted(deletable, key=path_segments):  # parents first
            if path in protected or not removed.isdisjoint(ancestors(path)):
                continue  # holds kept entries, or went with its parent
            if await self._remove(path, recursive=deletable[path]):
                removed.add(path)
        for path in [path for path in self.manifest if is_under(path, top)]:
            if path in protected or (path not in deletable and path not in kept):
                del self.manifest[path]  # kept (shared with others' entries) or gone
        shown = ", ".join(sorted(kept)[:3]) + (", …" if len(kept) > 3 else "")
        notice = SyncIssue(
            top,
            "KEPT_DIRECTORY",
            f"kept {top} in the sandbox: it holds entries that are not the sync's to delete "
            f"({shown})",
        )
        self.report.notices.append(notice)
        self.emit(EventKind.NOTICE, notice.message, issue=notice)

    async def _mkdir(self, relative: str) -> bool:
        folder = self.folder
        try:
            await folder.retrying(
                lambda: folder.sandbox.mkdir(folder.path(relative), recursive=True)
            )
        except TransientSyncError:
            raise
        except Exception as error:
            self.per_path_error(relative, error)
            return False
        self.made_directory(relative)
        return True

    async def _upload(self, upload: Upload, *, again: bool = True) -> None:
        content, _ = upload_content(upload.data)
        folder = self.folder
        target = folder.path(upload.relative)
        try:
            result = await folder.retrying(lambda: folder.sandbox.write_file(target, content))
        except TransientSyncError:
            raise
        except Exception as error:
            parent = parent_of(upload.relative)
            if again and parent and _is_missing(error) and await self._mkdir(parent):
                await self._upload(upload, again=False)  # its directory, made again
                return
            self.per_path_error(upload.relative, error)
            return
        self.uploaded(upload, result.timestamp)

    async def _rename(self, source: str, upload: Upload) -> None:
        folder = self.folder
        try:
            result = await folder.retrying(
                lambda: folder.sandbox.rename_file(
                    folder.path(source), folder.path(upload.relative)
                )
            )
        except TransientSyncError:
            raise
        except Exception:
            # Fall back to upload + delete (both idempotent).
            await self._upload(upload)
            await self._remove(source, recursive=False)
            return
        self.renamed(source, upload, result.timestamp)


BATCH_BYTES: Final = 2 * 1_048_576
"""Target JSON size of one batch (the gateway may allow more): several batches of a large
pass are in flight at once, so sending one overlaps the gateway's work on another."""
BATCH_ENTRIES: Final = 500
"""Target entries of one batch (the gateway may allow more), for the same reason."""
BATCH_CONCURRENCY: Final = 3
"""Upload batches in flight at once: the gateway applies a sandbox's requests one at a
time, so more would only queue there; fewer would leave it waiting for the next body."""
_ENTRY_OVERHEAD: Final = 160
"""JSON bytes of an entry besides its paths and content (keys, op, precondition)."""
_BODY_OVERHEAD: Final = 64
"""JSON bytes of a batch besides its entries."""

StepKind = Literal["early-delete", "mkdir", "rename", "upload", "fallback-upload", "delete"]
_SKIPPED_UNDER_FAILED_DIRS: Final = ("mkdir", "upload")
"""What the per-file path does not even try under a directory it could not make."""


@dataclass
class Step:
    """One entry of a batch and what it stands for in the plan."""

    kind: StepKind
    relative: str
    """The path the entry acts on (for a rename, its source)."""
    entry: BatchEntry
    size: int
    """The entry's estimated JSON bytes."""
    upload: Upload | None = None
    """The file an upload or rename puts in place."""


@dataclass
class Leftover:
    """The steps a batched pass left to be checked for conflicts and done again."""

    plan: Plan = field(default_factory=Plan)
    listing: dict[str, FileState | None] | None = field(default_factory=dict)
    """What is at each checked path now (from the failed preconditions); None when some
    of it is not known (a refused batch), so the conflict check asks."""

    def add(self, step: Step, current: FileState | None, *, known: bool) -> None:
        plan = self.plan
        if step.kind in ("upload", "fallback-upload") and step.upload is not None:
            plan.uploads.append(step.upload)
        elif step.kind == "rename" and step.upload is not None:
            plan.renames.append((step.relative, step.upload.relative, step.upload))
        elif step.kind == "mkdir":
            plan.mkdirs.append(step.relative)
        else:
            (plan.early_deletes if step.kind == "early-delete" else plan.deletes).append(
                step.relative
            )
            plan.removable.add(step.relative)
        if not known:
            self.listing = None
        elif self.listing is not None:
            self.listing[step.relative] = current

    def __bool__(self) -> bool:
        plan = self.plan
        return bool(
            plan.early_deletes or plan.mkdirs or plan.renames or plan.uploads or plan.deletes
        )


def _is_missing(error: BaseException) -> bool:
    """A write refused as its directory is not there: another client removed a directory
    the manifest still lists (the sync makes it again, then writes once more)."""
    return isinstance(error, errors.SandboxError) and error.code == errors.ErrorCode.FILE_NOT_FOUND


def _path_bytes(path: str) -> int:
    return len(json.dumps(path))


async def apply_in_batches(
    applier: PlanApplier,
    plan: Plan,
    limits: FilesBatchLimits,
    preconditions: dict[str, FileVersion] | None = None,
) -> Leftover:
    """Apply `plan` through `files/batch` requests within `limits` (see the module
    docstring); a `TransientSyncError` marks the report incomplete and ends the pass."""
    run = _BatchedPass(applier, limits, preconditions)
    try:
        await run.apply(plan)
    except TransientSyncError:
        applier.report.incomplete = True
        raise
    return run.leftover


class _BatchedPass:
    def __init__(
        self,
        applier: PlanApplier,
        limits: FilesBatchLimits,
        preconditions: dict[str, FileVersion] | None,
    ) -> None:
        self.applier = applier
        self.max_entries = max(1, min(limits.max_entries, BATCH_ENTRIES))
        self.max_bytes = max(1, min(limits.max_bytes, BATCH_BYTES) - _BODY_OVERHEAD)
        self.preconditions = preconditions
        self.failed_dirs: list[str] = []
        self.refused = False
        """A batch was refused as a whole: the rest goes file by file (or back)."""
        self.unsent: list[Step] = []
        self.fallbacks: list[Step] = []
        """Upload and delete for each rename that failed (as `PlanApplier._rename` does),
        and mkdir and upload again for each upload whose directory was missing."""
        self._made_again: set[str] = set()
        self.leftover = Leftover()

    # ----- building --------------------------------------------------------------------

    def _version(self, relative: str) -> FileVersion | None:
        return None if self.preconditions is None else self.preconditions.get(relative)

    def _delete(self, kind: StepKind, relative: str, *, recursive: bool | None = None) -> Step:
        folder = self.applier.folder
        entry = BatchEntry.delete(
            folder.path(relative),
            recursive=recursive,
            force=True,
            if_match=self._version(relative),
        )
        return Step(kind, relative, entry, _path_bytes(entry.path) + _ENTRY_OVERHEAD)

    def _mkdir(self, relative: str) -> Step:
        entry = BatchEntry.mkdir(self.applier.folder.path(relative), recursive=True)
        return Step("mkdir", relative, entry, _path_bytes(entry.path) + _ENTRY_OVERHEAD)

    def _write(self, upload: Upload, kind: StepKind = "upload") -> Step:
        content, size = upload_content(upload.data)
        target = self.applier.folder.path(upload.relative)
        entry = BatchEntry.write(target, content, if_match=self._version(upload.relative))
        size += _path_bytes(target) + _ENTRY_OVERHEAD
        return Step(kind, upload.relative, entry, size, upload)

    def _steps(self, plan: Plan, early_files: list[str], late_files: list[str]) -> list[Step]:
        folder = self.applier.folder
        steps = [self._delete("early-delete", path) for path in early_files]
        steps.extend(self._mkdir(path) for path in plan.mkdirs)
        for source, _, upload in plan.renames:
            entry = BatchEntry.rename(
                folder.path(source),
                folder.path(upload.relative),
                if_match=self._version(source),
            )
            size = _path_bytes(entry.path) + _path_bytes(entry.new_path or "") + _ENTRY_OVERHEAD
            steps.append(Step("rename", source, entry, size, upload))
        steps.extend(self._write(upload) for upload in plan.uploads)
        steps.extend(self._delete("delete", path) for path in late_files)
        return steps

    def _chunks(self, steps: list[Step]) -> list[list[Step]]:
        chunks: list[list[Step]] = []
        size = 0
        for step in steps:
            full = len(chunks[-1]) >= self.max_entries if chunks else True
            if full or size + step.size > self.max_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(step)
            size += step.size
        return chunks

    def _split_tops(self, paths: list[str]) -> tuple[list[str], list[str]]:
        """The plan's delete tops still in the manifest: (files, directories)."""
        files: list[str] = []
        directories: list[str] = []
        for top in top_level(paths):
            entry = self.applier.manifest.get(top)
            if entry is not None:
                (directories if entry.is_dir else files).append(top)
        return files, directories

    # ----- running ---------------------------------------------------------------------

    async def apply(self, plan: Plan) -> None:
        early_files, early_dirs = self._split_tops(plan.early_deletes)
        await self._delete_directories(early_dirs, plan.removable)
        late_files, late_dirs = self._split_tops(plan.deletes)
        chunks = self._chunks(self._steps(plan, early_files, late_files))
        leading = 0
        for index, chunk in enumerate(chunks):
            if any(step.kind in ("early-delete", "mkdir", "rename") for step in chunk):
                leading = index + 1
        trailing = len(chunks)
        while trailing > leading and any(step.kind == "delete" for step in chunks[trailing - 1]):
            trailing -= 1
        for chunk in chunks[:leading]:
            await self._send(chunk)
        await self._send_concurrently(chunks[leading:trailing])
        for chunk in chunks[trailing:]:
            await self._send(chunk)
        for chunk in self._chunks(self.fallbacks):
            await self._send(chunk)
        await self._settle_unsent()
        await self._delete_directories(late_dirs, plan.removable)

    async def _delete_directories(self, tops: list[str], removable: set[str]) -> None:
        """Remove these directories as `PlanApplier.delete_directory` does, with one
        listing for all of them and, for those all of whose entries may go, batches of
        recursive deletes: two requests in all instead of two per directory."""
        applier = self.applier
        tops = [top for top in tops if top in applier.manifest]
        if len(tops) < 2 or self.refused:
            for top in tops:
                await applier.delete_directory(top, removable)
            return
        listing = await applier.folder.list_entries("", recursive=True)
        contents: dict[str, list[tuple[str, bool]]] = {top: [] for top in tops}
        directories: set[str] = set()
        for info in listing or []:
            path = info.relative_path
            if path in contents:
                if info.is_directory:
                    directories.add(path)
                continue
            holder = next((parent for parent in ancestors(path) if parent in contents), None)
            if holder is not None:
                contents[holder].append((path, info.is_directory))
        whole: list[Step] = []
        partly: list[tuple[str, dict[str, bool], list[str]]] = []
        for top in tops:
            if top not in directories:  # already gone, or no longer a directory
                applier.forget(top)
                continue
            deletable, kept = applier.sort_directory(contents[top], removable)
            if kept:
                partly.append((top, deletable, kept))
            else:
                whole.append(self._delete("delete", top, recursive=True))
        # The whole ones go right after the listing: what a guest writes into one of them
        # in between goes with it (no precondition covers a directory's entries), so the
        # time between the two is one request, however many others hold a guest's entry.
        for chunk in self._chunks(whole):
            await self._send(chunk)
        if self.refused:  # a refused batch: its directories one by one, listed again
            batched = {id(step) for step in whole}
            left = [step for step in self.unsent if id(step) in batched]
            self.unsent = [step for step in self.unsent if id(step) not in batched]
            for step in left:
                await applier.delete_directory(step.relative, removable)
        for top, deletable, kept in partly:
            await applier.delete_around(top, deletable, kept)

    async def _send_concurrently(self, chunks: list[list[Step]]) -> None:
        """The upload-only batches, `BATCH_CONCURRENCY` at a time; the first transient
        failure stops new batches and is raised once the others settled."""
        semaphore = asyncio.Semaphore(BATCH_CONCURRENCY)
        failures: list[TransientSyncError] = []

        async def one(chunk: list[Step]) -> None:
            async with semaphore:
                if failures:
                    return
                try:
                    await self._send(chunk)
                except TransientSyncError as error:
                    failures.append(error)

        await asyncio.gather(*(one(chunk) for chunk in chunks))
        if failures:
            raise failures[0]

    async def _send(self, chunk: list[Step]) -> None:
        steps = [
            step
            for step in chunk
            if not (
                step.kind in _SKIPPED_UNDER_FAILED_DIRS and self._under_failed_dir(step.relative)
            )
        ]
        folder = self.applier.folder
        if not steps or folder.replaced:
            return
        if self.refused:
            self.unsent.extend(steps)
            return
        try:
            answer = await folder.send_batch([step.entry for step in steps])
        except TransientSyncError:
            raise
        except errors.SandboxError:
            self.refused = True
            self.unsent.extend(steps)
            return
        if folder.replaced:
            # The entries went to a sandbox made again, and the pass's refill (`FolderSync`)
            # sends the whole folder. What they put there is the sync's (counted, and
            # deleted with the local file later); what failed there (a precondition on a
            # file that went with the old one) is no conflict, and a delete removed nothing.
            for step, outcome in zip(steps, answer.results, strict=True):
                if outcome.failure is None and step.kind not in ("early-delete", "delete"):
                    self._record(step, outcome)
            return
        unreachable: errors.SandboxError | None = None
        for step, outcome in zip(steps, answer.results, strict=True):
            failure = outcome.failure
            if failure is not None and is_transient(failure):
                # As a call that stayed unreachable: the pass ends, a later one retries.
                unreachable = unreachable or failure
                if step.kind == "mkdir":
                    self.failed_dirs.append(step.relative)
                continue
            self._record(step, outcome)
        if unreachable is not None:
            raise TransientSyncError(unreachable)

    def _under_failed_dir(self, relative: str) -> bool:
        return any(is_under(relative, bad) for bad in self.failed_dirs)

    def _record(self, step: Step, outcome: BatchEntryResult) -> None:
        """What one entry's outcome means, as `PlanApplier` records a call's."""
        applier = self.applier
        failure = outcome.failure
        if failure is None:
            if step.kind in ("early-delete", "delete"):
                applier.removed(step.relative)
            elif step.kind == "mkdir":
                applier.made_directory(step.relative)
            elif step.kind == "rename" and step.upload is not None:
                applier.renamed(step.relative, step.upload, outcome.timestamp)
            elif step.upload is not None:
                applier.uploaded(step.upload, outcome.timestamp)
            return
        if isinstance(failure, errors.PreconditionFailedError):
            self.leftover.add(step, outcome.current, known=True)
        elif step.kind == "rename" and step.upload is not None:
            self.fallbacks.append(self._write(step.upload, "fallback-upload"))
            self.fallbacks.append(self._delete("delete", step.relative))
        elif step.kind in _SKIPPED_UNDER_FAILED_DIRS and self._under_failed_dir(step.relative):
            pass  # the per-file path skips what lies under a directory it could not make
        elif (
            step.kind == "upload"
            and step.upload is not None
            and parent_of(step.relative)
            and _is_missing(failure)
        ):
            parent = parent_of(step.relative)
            if parent not in self._made_again:
                self._made_again.add(parent)
                self.fallbacks.append(self._mkdir(parent))
            self.fallbacks.append(self._write(step.upload, "fallback-upload"))
        else:
            applier.per_path_error(step.relative, failure)
            if step.kind == "mkdir":
                self.failed_dirs.append(step.relative)

    async def _settle_unsent(self) -> None:
        """The steps of refused batches: back to the leftover when they carry
        preconditions (to be checked first), else file by file now."""
        if not self.unsent:
            return
        if self.preconditions is not None:
            for step in self.unsent:
                self.leftover.add(step, None, known=False)
            return
        replay = Leftover()
        for step in self.unsent:
            replay.add(step, None, known=False)
        await self.applier.apply(replay.plan)
