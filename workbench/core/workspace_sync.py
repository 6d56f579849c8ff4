"""Workspace sync (spec 6.3-6.6): the manifest, `getFiles`, and reconciling a tree with
the directories and files another side reports (what a run left in the host mirror)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from workbench.core.changes import ChangeSet
from workbench.core.paths import WorkspaceOSError, normalize
from workbench.core.workspace import DirNode, FileNode, Workspace

__all__ = ["FileEntry", "SyncResult", "apply_sync", "get_files", "manifest_of"]


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A sync/getFiles entry: absolute path, raw bytes, updatedAt (epoch ms)."""

    path: str
    data: bytes
    updated_at: int


@dataclass(slots=True)
class SyncResult:
    """Outcome of ``apply_sync``: manifest paths still missing, and the row changes."""

    missing: list[str]
    changes: ChangeSet


def manifest_of(workspace: Workspace) -> dict[str, str]:
    """Absolute file path -> ``hash_bytes`` (hashes are cached per file content)."""
    return {p: n.content_hash() for p, n in workspace.walk() if isinstance(n, FileNode)}


def get_files(workspace: Workspace, paths: Iterable[str]) -> list[FileEntry]:
    """The ``getFiles`` callback: entries for readable files, unknown paths omitted."""
    out: list[FileEntry] = []
    for p in paths:
        try:
            data, updated_at = workspace.read(p)
        except WorkspaceOSError:
            continue
        out.append(FileEntry(normalize(p).absolute, data, updated_at))
    return out


def apply_sync(
    workspace: Workspace,
    dirs: Iterable[str],
    files: Iterable[FileEntry],
    deleted: Iterable[str] | None = None,
    manifest: Mapping[str, str] | None = None,
) -> SyncResult:
    """Reconcile in place (spec 6.5), bypassing limits; invalid paths are ignored.

    ``dirs`` is the complete directory list (any other directory goes); with a
    ``manifest`` every file it does not list goes, else the ``deleted`` ones do."""
    cs = ChangeSet()
    dir_list = list(dirs)
    for p in dir_list:
        try:
            np = normalize(p)
        except WorkspaceOSError:
            continue
        workspace.ensure_directory(np, cs)
    for f in files:
        try:
            np = normalize(f.path)
        except WorkspaceOSError:
            continue
        if np.is_root:
            continue
        workspace.put_file(np, bytes(f.data), int(f.updated_at), cs)
    if manifest is not None:
        keep = set(manifest)
        for p in [p for p, n in workspace.walk() if isinstance(n, FileNode)]:
            if p not in keep:
                workspace.remove_path(p, cs)
    elif deleted is not None:
        for p in deleted:
            workspace.remove_path(p, cs)
    keep_dirs = set(dir_list)
    stale = [p for p, n in workspace.walk() if isinstance(n, DirNode) and p not in keep_dirs]
    for p in sorted(stale, key=lambda x: x.count("/"), reverse=True):
        workspace.remove_path(p, cs)
    missing: list[str] = []
    if manifest is not None:
        current = manifest_of(workspace)
        missing = [p for p, h in manifest.items() if current.get(p) != h]
    return SyncResult(missing, cs)
