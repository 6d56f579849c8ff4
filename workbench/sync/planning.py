"""Planning a pass: what to upload, rename, make and delete in the sandbox, from the local
scan, the manifest and what the sync owns (see `workbench.sync.folder_sync`). Changed
files are read here, once, and only as much as the sandbox can hold
(`workbench.sync.local`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from workbench.sync.events import EmitEvent, EventKind, SyncIssue, SyncReport
from workbench.sync.ignore import IgnoreRules
from workbench.sync.local import MAX_WORKSPACE_BYTES, LocalEntry, content_digest, read_what_fits
from workbench.sync.manifest import RemoteEntry
from workbench.sync.relative_paths import is_under

__all__ = ["Plan", "Upload", "plan_pass"]


@dataclass
class Upload:
    relative: str
    data: bytes
    digest: str
    local: LocalEntry


@dataclass
class Plan:
    early_deletes: list[str] = field(default_factory=list)
    """Tops of entries replaced by the other kind (removed before the uploads)."""
    mkdirs: list[str] = field(default_factory=list)
    renames: list[tuple[str, str, Upload]] = field(default_factory=list)
    uploads: list[Upload] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    """Entries gone locally (removed after the uploads), each listed."""
    removable: set[str] = field(default_factory=set)
    """Every manifest path this plan removes (deletes, early deletes and below)."""


def plan_pass(
    report: SyncReport,
    local: dict[str, LocalEntry],
    current: list[str],
    *,
    manifest: dict[str, RemoteEntry],
    root: Path,
    rules: IgnoreRules,
    prune: bool,
    emit: EmitEvent,
) -> Plan:
    """The plan that makes the `current` manifest paths and the `local` entries match.

    Updates `manifest` for what needs no call (entries that became ignored or are not
    the sync's, unchanged content) and reports unchanged files and per-path errors,
    files that do not fit in the sandbox among them."""
    plan = Plan()
    gone: list[str] = []
    blocked: list[str] = []
    for path in current:
        entry = manifest.get(path)
        wanted = local.get(path)
        if entry is None or (wanted is not None and wanted.is_dir == entry.is_dir):
            continue
        if wanted is None and rules.is_ignored(path, entry.is_dir):
            manifest.pop(path, None)  # became ignored: leave the sandbox copy alone
            continue
        if not (entry.owned or prune):
            if wanted is None:
                manifest.pop(path, None)  # not ours: it stays, untracked
            else:
                blocked.append(path)
                _keep_in_the_way(report, path, entry.is_dir, emit)
            continue
        (gone if wanted is None else plan.early_deletes).append(path)
    replaced = set(plan.early_deletes)
    changed: list[tuple[str, LocalEntry]] = []
    for path, wanted in sorted(local.items()):
        if blocked and any(is_under(path, top) for top in blocked):
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
            report.unchanged_files.add(path)
            continue
        changed.append((path, wanted))
    # The room the sandbox has for this pass's files: what the manifest says stays there
    # (files deleted after the uploads count as gone already: a rename needs no room).
    freed = {path for path, _ in changed}.union(gone, replaced)
    staying = sum(
        entry.size for path, entry in manifest.items() if not entry.is_dir and path not in freed
    )
    room = max(0, MAX_WORKSPACE_BYTES - staying)
    contents = read_what_fits(root, changed, room, report, emit)
    for path, wanted in changed:
        data = contents.get(path)
        if data is None:
            continue
        entry = manifest.get(path)
        digest = content_digest(data)
        if entry is not None and not entry.is_dir and entry.digest == digest:
            manifest[path] = replace(entry, local_stat=wanted.stat_key)
            report.unchanged_files.add(path)
            continue
        plan.uploads.append(Upload(path, data, digest, wanted))
    # A deleted file and a new one with the same content: rename instead (not from under a
    # directory replaced by a file: that goes before the renames, with what it holds).
    deleted_by_digest: dict[str, list[str]] = {}
    for path in gone:
        entry = manifest[path]
        under_replaced = replaced and any(is_under(path, top) for top in replaced)
        if not entry.is_dir and entry.digest is not None and not under_replaced:
            deleted_by_digest.setdefault(entry.digest, []).append(path)
    kept: list[Upload] = []
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
        if path not in renamed and not any(is_under(path, top) for top in replaced)
    )
    plan.removable = (set(gone) | replaced) - renamed
    plan.mkdirs = sorted(set(plan.mkdirs), key=lambda path: path.count("/"))
    return plan


def _keep_in_the_way(report: SyncReport, relative: str, is_dir: bool, emit: EmitEvent) -> None:
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
    emit(EventKind.ERROR, issue.message, issue=issue)
