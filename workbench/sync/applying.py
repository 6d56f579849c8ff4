"""Applying a plan against the sandbox API file by file: early deletes, directories,
renames, uploads (`concurrency` at a time) and deletes, every call retried on transient
failures. A call that fails for one path (limits, permissions, …) is reported and the pass
goes on. What each outcome means for the manifest and the report is shared with the
batched path (`workbench.sync.batching`)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Final

from workbench.protocol import errors
from workbench.sync.events import EmitEvent, EventKind, SyncIssue, SyncReport
from workbench.sync.ignore import IgnoreRules
from workbench.sync.manifest import RemoteEntry
from workbench.sync.planning import Plan, Upload
from workbench.sync.relative_paths import ancestors, is_plain, is_under, path_segments, top_level
from workbench.sync.retries import TransientSyncError
from workbench.sync.sandbox_folder import SandboxFolder

__all__ = ["PlanApplier", "upload_content"]

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

    def _forget(self, relative: str) -> None:
        for path in [path for path in self.manifest if is_under(path, relative)]:
            del self.manifest[path]

    # ----- what a call that succeeded or failed means for the manifest and report -----

    def removed(self, relative: str) -> None:
        self._forget(relative)
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
            self._forget(top)
            return
        deletable: dict[str, bool] = {}
        kept: list[str] = []
        for info in listing:
            path = f"{top}/{info.relative_path}"
            if is_plain(info.relative_path) and (
                path in removable
                or (self.prune and not self.rules.is_ignored(path, info.is_directory))
            ):
                deletable[path] = info.is_directory
            else:
                kept.append(path)
        if not kept:
            await self._remove(top, recursive=True)
            return
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

    async def _upload(self, upload: Upload) -> None:
        content, _ = upload_content(upload.data)
        folder = self.folder
        target = folder.path(upload.relative)
        try:
            result = await folder.retrying(lambda: folder.sandbox.write_file(target, content))
        except TransientSyncError:
            raise
        except Exception as error:
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
