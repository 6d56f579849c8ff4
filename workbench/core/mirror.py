"""The host directory that holds a workspace tree for the engines (their ``/workspace``).

`WorkspaceMirror` writes the tree into its directory before a run and reads the run's
changes back as a `WorkspaceDiff`, which `apply_diff` puts into the tree. It keeps each
file's (size, mtime_ns) as of its last materialize or diff, so unchanged files are
neither rewritten nor re-read; a baseline is only valid for the tree it was taken of, so
whoever replaces the tree starts a new mirror.
"""

from __future__ import annotations

import os
import re
import shutil
import stat as stat_mod
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from workbench.core.changes import ChangeSet
from workbench.core.host_paths import host_path, host_path_str
from workbench.core.paths import ROOT, WorkspaceOSError
from workbench.core.workspace import (
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    DirNode,
    FileNode,
    Node,
    Workspace,
)
from workbench.core.workspace_sync import FileEntry, apply_sync

__all__ = ["WorkspaceDiff", "WorkspaceMirror", "apply_diff"]

_UNDECODABLE_RE: Final = re.compile("[\ud800-\udfff]")
"""A lone surrogate: how `os.scandir` returns a name that is not valid UTF-8."""


@dataclass(slots=True)
class WorkspaceDiff:
    """What a run changed in a materialized directory, relative to the tree.

    ``files`` = created + updated (raw bytes); ``deleted`` = removed files; ``dirs`` =
    the full post-run directory list (absolute, sorted). ``rejected`` lists entries
    that were ignored (symlinks, special files, undecodable names) with a reason.
    ``violation`` is set when the result would break a 6.1 limit; `apply_diff`
    then refuses the whole diff.
    """

    files: list[FileEntry] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    violation: WorkspaceOSError | None = None
    dirs_changed: bool = False

    @property
    def changed(self) -> bool:
        """True when the run created, updated or deleted anything (files or dirs)."""
        return bool(self.files or self.deleted) or self.dirs_changed


class WorkspaceMirror:
    """One host directory mirroring one workspace tree."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._files: dict[str, tuple[int, int, bytes]] = {}
        """Baseline: rel path -> (size, mtime_ns, the tree's bytes) as last written/read."""
        self._time_ns = 0

    def materialize(self, workspace: Workspace) -> None:
        """Make ``target_dir`` hold exactly this tree (the engine's ``/workspace`` preopen).

        Files whose on-disk (size, mtime_ns) still match the last materialize/diff and
        whose content is unchanged in the tree are not rewritten; anything on disk that
        is not in the tree (including symlinks and special files) is removed.
        """
        target_dir = self.directory
        target_dir.mkdir(parents=True, exist_ok=True)
        baseline = self._files
        disk = _scan(target_dir)
        wanted: dict[str, Node] = {p[len(ROOT) + 1 :]: n for p, n in workspace.walk()}
        # remove what must go (deepest first so directories empty out)
        for rel in sorted(disk, key=lambda r: r.count("/"), reverse=True):
            kind = disk[rel][0]
            node = wanted.get(rel)
            ok = (kind == "dir" and isinstance(node, DirNode)) or (
                kind == "file" and isinstance(node, FileNode)
            )
            if not ok:
                _remove_host(host_path(target_dir, rel), kind)
        new_base: dict[str, tuple[int, int, bytes]] = {}
        root_s = str(target_dir)
        for rel, node in wanted.items():
            host_s = host_path_str(root_s, rel)
            if isinstance(node, DirNode):
                if rel not in disk or disk[rel][0] != "dir":
                    os.mkdir(host_s)
                continue
            cur = disk.get(rel)
            base = baseline.get(rel)
            if (
                cur is not None
                and cur[0] == "file"
                and base is not None
                and cur[1] == base[0]
                and cur[2] == base[1]
                and (base[2] is node.data or base[2] == node.data)
            ):
                new_base[rel] = (base[0], base[1], node.data)
                continue
            fd = os.open(host_s, _WRITE_FLAGS, 0o644)
            try:
                os.write(fd, node.data) if node.data else None
                st = os.fstat(fd)
            finally:
                os.close(fd)
            new_base[rel] = (st.st_size, st.st_mtime_ns, node.data)
        self._files = new_base
        self._time_ns = time.time_ns()

    def _racy(self, mtime_ns: int) -> bool:
        """A file stamped within the racy window of the last baseline may hide a rewrite."""
        return mtime_ns >= self._time_ns - _RACY_WINDOW_NS

    def diff(self, workspace: Workspace) -> WorkspaceDiff:
        """Read a materialized directory back after a run and diff it against the tree.

        Never follows symlinks: symlinks, sockets, FIFOs, devices and names that are
        not valid UTF-8 are skipped and reported in ``rejected`` (the next
        ``materialize`` removes them). Only files whose (size, mtime_ns) moved, or that
        were stamped inside the racy window, are re-read. 6.1 limits are evaluated on
        the resulting tree and reported in ``violation`` (checked by `apply_diff`).
        """
        target_dir = self.directory
        diff = WorkspaceDiff()
        scan_time = time.time_ns()
        disk = _scan(target_dir, diff.rejected)
        baseline = self._files
        tree: dict[str, Node] = {p[len(ROOT) + 1 :]: n for p, n in workspace.walk()}
        new_base: dict[str, tuple[int, int, bytes]] = {}
        entries = 0
        total = 0
        for rel, (kind, size, mtime) in disk.items():
            entries += 1
            abs_path = f"{ROOT}/{rel}"
            if kind == "dir":
                diff.dirs.append(abs_path)
                continue
            total += size
            old = tree.get(rel)
            base = baseline.get(rel)
            if (
                isinstance(old, FileNode)
                and base is not None
                and base[0] == size
                and base[1] == mtime
                and base[2] is old.data
                and not self._racy(mtime)
            ):
                new_base[rel] = base
                continue
            if size > MAX_FILE_BYTES:
                if diff.violation is None:
                    diff.violation = WorkspaceOSError(
                        "EFBIG",
                        f"File exceeds {MAX_FILE_BYTES} bytes",
                        {"maxSize": MAX_FILE_BYTES, "actualSize": size, "path": abs_path},
                    )
                continue
            try:
                data = _read_regular(host_path(target_dir, rel), MAX_FILE_BYTES + 1)
            except OSError as exc:
                diff.rejected.append((abs_path, f"unreadable: {exc.strerror}"))
                continue
            if len(data) > MAX_FILE_BYTES:  # grew after the scan
                if diff.violation is None:
                    diff.violation = WorkspaceOSError(
                        "EFBIG",
                        f"File exceeds {MAX_FILE_BYTES} bytes",
                        {"maxSize": MAX_FILE_BYTES, "actualSize": len(data), "path": abs_path},
                    )
                continue
            total += len(data) - size
            if isinstance(old, FileNode) and old.data == data:
                new_base[rel] = (len(data), mtime, old.data)
                continue
            new_base[rel] = (len(data), mtime, data)
            diff.files.append(FileEntry(abs_path, data, 0))
            (diff.updated if isinstance(old, FileNode) else diff.created).append(abs_path)
        for rel, node in tree.items():
            if isinstance(node, FileNode) and disk.get(rel, ("",))[0] != "file":
                diff.deleted.append(f"{ROOT}/{rel}")
        diff.dirs.sort()
        diff.dirs_changed = diff.dirs != workspace.dirs()
        if diff.violation is None:
            if total > MAX_TOTAL_BYTES:
                diff.violation = WorkspaceOSError("ENOSPC", "Workspace exceeds 16 MiB total")
            elif entries > MAX_ENTRIES:
                diff.violation = WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        self._files = new_base
        self._time_ns = scan_time
        return diff


def apply_diff(workspace: Workspace, diff: WorkspaceDiff, now: int) -> ChangeSet:
    """Apply a run's diff (changed files stamped ``now``); refuses a limit violation.

    Raises the diff's ``violation`` (``WorkspaceOSError`` EFBIG/ENOSPC) without
    touching the tree; the caller reports it and the next ``materialize`` restores
    the directory to the unchanged tree.
    """
    if diff.violation is not None:
        raise diff.violation
    files = [FileEntry(f.path, f.data, now) for f in diff.files]
    result = apply_sync(workspace, diff.dirs, files, deleted=diff.deleted)
    # the tree now holds the bytes objects the baseline references
    return result.changes


_RACY_WINDOW_NS: Final = 50_000_000
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def _scan(
    root: Path, rejected: list[tuple[str, str]] | None = None
) -> dict[str, tuple[str, int, int]]:
    """Walk ``root`` without following symlinks: rel path -> (kind, size, mtime_ns).

    ``kind`` is ``"file"``, ``"dir"`` or ``"other"`` (symlinks, specials, bad names).
    Entries below an ``other`` are not visited.
    """
    out: dict[str, tuple[str, int, int]] = {}
    stack: list[tuple[str, str]] = [(str(root), "")]
    while stack:
        host, rel = stack.pop()
        with os.scandir(host) as it:
            for de in it:
                r = f"{rel}/{de.name}" if rel else de.name
                st = de.stat(follow_symlinks=False)
                mode = st.st_mode
                bad_name = _UNDECODABLE_RE.search(de.name) is not None
                if stat_mod.S_ISDIR(mode) and not bad_name:
                    out[r] = ("dir", 0, st.st_mtime_ns)
                    stack.append((de.path, r))
                elif stat_mod.S_ISREG(mode) and not bad_name:
                    out[r] = ("file", st.st_size, st.st_mtime_ns)
                else:
                    out[r] = ("other", 0, 0)
                    if rejected is not None:
                        what = (
                            "undecodable name"
                            if bad_name
                            else "symlink"
                            if stat_mod.S_ISLNK(mode)
                            else "special file"
                        )
                        rejected.append((f"{ROOT}/{r}", what))
    if rejected is not None:
        for r in [k for k, v in out.items() if v[0] == "other"]:
            del out[r]
    return out


_READ_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file, never through a symlink."""
    fd = os.open(path, _READ_FLAGS)
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _remove_host(path: Path, kind: str) -> None:
    """Remove a host entry without following symlinks."""
    if kind == "dir":
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
