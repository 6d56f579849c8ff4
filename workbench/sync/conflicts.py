"""Conflicts: files the sync uploaded that guest code changed since, and files the sandbox
held before the sync that it would overwrite with other content, found before a pass
overwrites or deletes them and settled by the `ConflictPolicy`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from workbench.protocol.types import FileVersion
from workbench.sync.events import ConflictPolicy, EmitEvent, EventKind, SyncIssue, SyncReport
from workbench.sync.local import content_digest
from workbench.sync.manifest import RemoteEntry, found_there
from workbench.sync.planning import Plan
from workbench.sync.relative_paths import top_level
from workbench.sync.sandbox_folder import SandboxFolder

__all__ = [
    "ConflictCheck",
    "SandboxEntry",
    "SyncConflictError",
    "find_conflicts",
    "preconditions_for",
    "resolve_conflicts",
]


class SandboxEntry(Protocol):
    """What the conflict check needs to know of a sandbox entry (a listed `FileInfo`, or
    the `FileState` a failed precondition reports)."""

    @property
    def is_directory(self) -> bool: ...

    @property
    def size(self) -> int: ...

    @property
    def modified_at(self) -> str: ...


class SyncConflictError(Exception):
    """Raised under `ConflictPolicy.FAIL`; nothing of the conflicting pass was applied."""

    def __init__(self, conflicts: list[SyncIssue]) -> None:
        paths = ", ".join(issue.path for issue in conflicts)
        super().__init__(f"changed in the sandbox since the last sync: {paths}")
        self.conflicts = conflicts


@dataclass
class ConflictCheck:
    """What `find_conflicts` found for one plan."""

    in_sync: set[str] = field(default_factory=set)
    """Planned uploads whose sandbox copy already has the local content."""
    issues: list[SyncIssue] = field(default_factory=list)
    sandbox_baselines: dict[str, RemoteEntry] = field(default_factory=dict)
    """The sandbox's version of each changed file (its baseline if `sandbox-wins`)."""


def _wanted(plan: Plan) -> dict[str, str | None]:
    """Every path the plan overwrites (→ the digest it writes) or removes (→ None)."""
    wanted: dict[str, str | None] = {}
    for upload in plan.uploads:
        wanted[upload.relative] = upload.digest
    for source, _, _ in plan.renames:
        wanted[source] = None
    for path in plan.removable:
        wanted[path] = None
    return wanted


def _checked(wanted: Mapping[str, str | None], manifest: Mapping[str, RemoteEntry]) -> list[str]:
    """The files among `wanted` that the manifest knows: the ones a guest may have changed."""
    return [
        path for path in wanted if (entry := manifest.get(path)) is not None and not entry.is_dir
    ]


def preconditions_for(
    plan: Plan, manifest: Mapping[str, RemoteEntry]
) -> dict[str, FileVersion] | None:
    """The conflict check of `find_conflicts` as preconditions of the plan's own calls:
    each checked file's expected version, keyed by path, when every checked file is
    written, renamed or deleted on its own by the plan and its version is known. None
    when there is nothing to check, or the check cannot ride on the calls (a file inside
    a directory being removed, a file replaced by a directory)."""
    targets = {upload.relative for upload in plan.uploads}
    targets.update(source for source, _, _ in plan.renames)
    targets.update(
        top
        for top in top_level(plan.deletes)
        if (entry := manifest.get(top)) is not None and not entry.is_dir
    )
    versions: dict[str, FileVersion] = {}
    wanted = _wanted(plan)
    for path in _checked(wanted, manifest):
        entry = manifest[path]
        if path not in targets or not entry.modified_at:
            return None
        if found_there(entry) and wanted[path] is not None:
            return None  # its content decides, not its version (`_check_foreign`)
        versions[path] = FileVersion(entry.size, entry.modified_at)
    return versions or None


async def find_conflicts(
    plan: Plan,
    listing: Mapping[str, SandboxEntry | None] | None,
    manifest: dict[str, RemoteEntry],
    folder: SandboxFolder,
) -> ConflictCheck:
    """Files the plan would overwrite or delete that changed in the sandbox since we
    uploaded them (`listing`: what is in the sandbox now, else it is asked for)."""
    check = ConflictCheck()
    wanted = _wanted(plan)
    checked = _checked(wanted, manifest)
    if not checked:
        return check
    now: Mapping[str, SandboxEntry | None]
    if listing is None:
        now = await folder.entries_now(checked)
    else:
        now = {path: listing.get(path) for path in checked}
    for path in checked:
        entry = manifest[path]
        removed = wanted[path] is None  # by the plan
        info = _file_entry(check, manifest, path, now[path], removed_by_plan=removed)
        if info is None:
            continue
        if found_there(entry) and not removed:
            await _check_foreign(check, manifest, path, info, wanted[path], folder)
            continue
        if info.size == entry.size and info.modified_at == entry.modified_at:
            continue
        digest: str | None = None
        if info.size == entry.size or wanted[path] is not None:
            data = await folder.read(path)
            if data is None:  # no file since it was listed: gone (another sync of the folder
                # deleted it, say), a directory now, or unreadable (changed, as before)
                listed_now = (await folder.entries_now([path]))[path]
                again = _file_entry(check, manifest, path, listed_now, removed_by_plan=removed)
                if again is None:
                    continue
            else:
                digest = content_digest(data)
        if digest is not None and digest == entry.digest:
            manifest[path] = replace(entry, modified_at=info.modified_at)
            continue
        if digest is not None and digest == wanted[path]:
            manifest[path] = replace(
                entry, size=info.size, modified_at=info.modified_at, digest=digest
            )
            check.in_sync.add(path)
            continue
        check.issues.append(
            SyncIssue(path, "CONFLICT", f"{path} was changed in the sandbox since the last sync")
        )
        check.sandbox_baselines[path] = RemoteEntry(
            False, info.size, info.modified_at, digest, None, owned=False
        )
    return check


async def _check_foreign(
    check: ConflictCheck,
    manifest: dict[str, RemoteEntry],
    path: str,
    info: SandboxEntry,
    digest_wanted: str | None,
    folder: SandboxFolder,
) -> None:
    """A file the plan overwrites that the sync did not write and never found holding
    the folder's content (it was in the sandbox before the folder was synced there): in
    sync if it holds the content now, else a conflict (it was overwritten without a word;
    QA)."""
    entry = manifest[path]
    unchanged = info.size == entry.size and info.modified_at == entry.modified_at
    digest = entry.digest if unchanged else None
    if digest is None:
        data = await folder.read(path)
        digest = None if data is None else content_digest(data)
    if digest is not None and digest == digest_wanted:
        manifest[path] = replace(entry, size=info.size, modified_at=info.modified_at, digest=digest)
        check.in_sync.add(path)
        return
    check.issues.append(
        SyncIssue(path, "CONFLICT", f"{path} was in the sandbox already, with other content")
    )


def _file_entry(
    check: ConflictCheck,
    manifest: dict[str, RemoteEntry],
    path: str,
    info: SandboxEntry | None,
    *,
    removed_by_plan: bool,
) -> SandboxEntry | None:
    """`info` when the sandbox still holds the checked path as a file; None when it is
    gone (a conflict unless the plan removes it) or a directory now (a conflict)."""
    if info is None:
        if not removed_by_plan:  # else we wanted it gone, and it is
            check.issues.append(SyncIssue(path, "CONFLICT", f"{path} was deleted in the sandbox"))
            manifest.pop(path, None)
        return None
    if info.is_directory:
        check.issues.append(
            SyncIssue(path, "CONFLICT", f"{path} became a directory in the sandbox")
        )
        return None
    return info


def resolve_conflicts(
    plan: Plan,
    report: SyncReport,
    check: ConflictCheck,
    *,
    manifest: dict[str, RemoteEntry],
    policy: ConflictPolicy,
    emit: EmitEvent,
) -> None:
    """Apply the policy: `fail` raises, `sandbox-wins` drops the plan's steps on the
    conflicting files (a kept file is the sync's no longer: it is not deleted with the
    local file, nor overwritten until the local file changes), `local-wins` keeps them. A
    conflicting rename source is never moved (that would carry the guest's content): its
    target is uploaded instead."""
    for path in check.in_sync:
        upload = next(item for item in plan.uploads if item.relative == path)
        manifest[path] = replace(manifest[path], local_stat=upload.local.stat_key)
        report.unchanged_files.add(path)
    plan.uploads = [item for item in plan.uploads if item.relative not in check.in_sync]
    issues = check.issues
    if not issues:
        return
    report.conflicts.extend(issues)
    if policy is ConflictPolicy.FAIL:
        for issue in issues:
            emit(EventKind.CONFLICT, issue.message, issue=issue)
        raise SyncConflictError(issues)
    local_wins = policy is ConflictPolicy.LOCAL_WINS
    conflicting = {issue.path for issue in issues}
    sources = {source for source, _, _ in plan.renames}
    for issue in issues:
        if not local_wins:
            verdict = "sandbox version kept"
        elif issue.path in plan.removable or issue.path in sources:
            verdict = "deleted anyway (local-wins)"
        else:
            verdict = "local version wins"
        emit(EventKind.CONFLICT, f"{issue.message}; {verdict}", issue=issue)
    for source, _, upload in plan.renames:
        if source in conflicting:
            plan.uploads.append(upload)
            if local_wins:
                plan.deletes.append(source)
                plan.removable.add(source)
    plan.renames = [rename for rename in plan.renames if rename[0] not in conflicting]
    if local_wins:
        return
    uploads = {upload.relative: upload for upload in plan.uploads}
    for path in conflicting:
        baseline = check.sandbox_baselines.pop(path, None)
        if path in plan.removable or path in sources:
            manifest.pop(path, None)  # kept, and no longer the sync's to delete
        elif baseline is not None:
            # Kept: the guest's content is no longer the sync's to delete, and the local
            # file as it is now does not go over it on a later pass or a restart (only a
            # change of it does); both happened without a word (review).
            kept_over = uploads.get(path)
            local_stat = None if kept_over is None else kept_over.local.stat_key
            manifest[path] = replace(baseline, local_stat=local_stat, owned=False)
    plan.uploads = [item for item in plan.uploads if item.relative not in conflicting]
    plan.deletes = [path for path in plan.deletes if path not in conflicting]
    plan.early_deletes = [path for path in plan.early_deletes if path not in conflicting]
    plan.removable -= conflicting
