"""The local side of a folder sync: walking the folder under its ignore rules, with
symlinks kept inside the folder, reading files without following symlinks, content
digests, and what a pass reads of the folder.

A pass reads only what the sandbox can hold (spec 6.1 limits), checked here before
anything is read or sent. A file over the per-file limit is never read. The changed files
are read smallest first (so that as many as possible land), and only while they fit in the
room the workspace has left for the pass: its 16 MiB total less what the sync knows stays
there. A pass so holds at most 16 MiB of file data however large the folder is (a sparse
file counts by its size, not by its blocks on disk), and reads each file once, for both
its digest and its upload. What is not read is reported per path, and announced in one
event that names the files and their total.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from workbench.core.host_paths import host_path
from workbench.protocol import errors
from workbench.sync.events import EmitEvent, EventKind, SyncIssue, SyncReport
from workbench.sync.relative_paths import ancestors, is_under_any

if TYPE_CHECKING:
    from workbench.sync.ignore import IgnoreRules

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_WORKSPACE_BYTES",
    "LocalEntry",
    "LocalScan",
    "content_digest",
    "read_regular_file",
    "read_what_fits",
    "scan_folder",
    "skipped_link_above",
]

_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_SEGMENT_FLAGS: Final = _DIRECTORY_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK: a fifo swapped in after the scan must not block the open.
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_READ_CHUNK: Final = 1 << 20


def content_digest(data: bytes) -> str:
    """A fast content digest (BLAKE2b-128) for our own change detection.

    The sandbox lists no hashes, so both sides' digests are computed here from bytes we
    hold; the spec 6.4 `hashBytes` would add no interoperability, only ~0.3 s per MiB of
    pure-Python hashing.
    """
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class LocalEntry:
    """A file or directory of the folder as last stat'ed (`size`/`mtime_ns` 0 for dirs)."""

    is_dir: bool
    size: int = 0
    mtime_ns: int = 0

    @property
    def stat_key(self) -> tuple[int, int]:
        return (self.size, self.mtime_ns)


@dataclass
class LocalScan:
    """Entries by folder-relative path (`a/b.txt`), plus per-path notices."""

    entries: dict[str, LocalEntry] = field(default_factory=dict)
    notices: list[SyncIssue] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    """Symlinks to files and directories inside the folder: link path → target path
    (both folder-relative, the target without links). A change is an event of one of
    the paths only (the target's, as the watcher reports it)."""
    cut_links: set[str] = field(default_factory=set)
    """Links to directories skipped whole because the folder's links lead to more than
    a scan takes (`scan_folder`)."""


def _inside(root_real: str, target: str) -> bool:
    return target == root_real or target.startswith(root_real.rstrip(os.sep) + os.sep)


def _open_without_symlinks(root: Path, relative: str) -> int:
    """A read fd for `root/relative`, opened one segment at a time relative to the parent
    directory's fd with O_NOFOLLOW: any symlink on the way fails with ELOOP."""
    *directories, name = relative.split("/")
    parent = os.open(root, _DIRECTORY_FLAGS)
    try:
        for segment in directories:
            child = os.open(segment, _SEGMENT_FLAGS, dir_fd=parent)
            os.close(parent)
            parent = child
        return os.open(name, _FILE_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)


def read_regular_file(root: Path, relative: str, limit: int) -> bytes | None:
    """At most `limit + 1` bytes of the regular file `root/relative` (more than `limit`
    means too large), or None when it is missing, not a regular file, or reachable only
    through a symlink that leaves `root`.

    Symlinks are never followed by the open itself. A symlink on the way (the scanner
    accepts those that stay inside the folder) is resolved once, checked to stay inside
    `root`, and its target opened the same way, so a link swapped in after that check
    fails instead of being followed.
    """
    candidate = host_path(root, relative)
    try:
        fd = _open_without_symlinks(root, relative)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            return None
        root_real = os.path.realpath(root)
        target = os.path.realpath(candidate)
        if target == root_real or not _inside(root_real, target):
            return None
        inner = Path(os.path.relpath(target, root_real)).as_posix()
        try:
            fd = _open_without_symlinks(Path(root_real), inner)
        except OSError:
            return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _entry_for(
    root_real: str, full_path: str, relative: str, scan: LocalScan
) -> tuple[LocalEntry | None, str | None]:
    """Stat one path, following a symlink only when it stays inside the folder.

    Returns the entry (None when skipped or gone) and, for directories, the real path.
    """
    try:
        info = os.lstat(full_path)
    except OSError:
        return None, None
    real = full_path
    if stat.S_ISLNK(info.st_mode):
        real = os.path.realpath(full_path)
        if not _inside(root_real, real):
            scan.notices.append(
                SyncIssue(
                    relative,
                    "SYMLINK_OUTSIDE",
                    f"skipped symlink {relative}: it points outside the folder",
                )
            )
            return None, None
        try:
            info = os.stat(full_path)
        except OSError:
            return None, None  # dangling link
        if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
            scan.links[relative] = Path(os.path.relpath(real, root_real)).as_posix()
    if stat.S_ISDIR(info.st_mode):
        return LocalEntry(True), real
    if stat.S_ISREG(info.st_mode):
        return LocalEntry(False, info.st_size, info.st_mtime_ns), None
    return None, None  # sockets, fifos, devices


_LINKED_ENTRIES: Final = 8_192
"""Entries a scan takes through directory links before it stops following more of them:
twice what a sandbox holds, and links that fan out (two to `b` in `a`, two to `c` in
`b`, …) would otherwise double the scan at each level."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def scan_folder(
    root: Path, rules: IgnoreRules, start: str = "", *, cut_links: Collection[str] = ()
) -> LocalScan:
    """Every non-ignored entry at and under `start` ('' = the whole folder).

    Ancestors of `start` are not checked here (callers check `rules.is_ignored`).
    Symlinks inside the folder are followed, so what a link to a directory leads to is
    listed under the link's path too (the sandbox has no links), whichever of the two a
    scan starts from. A link to a directory that holds it (a cycle) is skipped. Once
    `_LINKED_ENTRIES` entries were taken through links, no more are listed, and a link
    whose copy could not be taken whole is skipped whole (`LocalScan.cut_links`), as are
    the `cut_links` an earlier scan of the whole folder skipped, so that a scan of a part
    decides as the scan of the whole did.
    """
    scan = LocalScan()
    root_real = os.path.realpath(root)
    cut = scan.cut_links
    # Breadth first, so that the copies cut by the bound are the deepest: (relative,
    # full path, the identities of the directories above it, the outermost link it was
    # reached through).
    waiting: deque[tuple[str, str, frozenset[tuple[int, int] | None], str | None]] = deque()
    if start:
        start_path = str(host_path(root, start))
        if skipped_link_above(root, start) is not None:
            return scan  # what the whole scan did not take through that link, nor does this
        top_link = _outermost_link(root, start)
        if top_link is not None and top_link in cut_links:
            cut.add(top_link)
            return _without_cut_links(scan)
        entry, real = _entry_for(root_real, start_path, start, scan)
        if entry is None:
            return scan
        scan.entries[start] = entry
        if not entry.is_dir:
            return scan
        above = frozenset(
            _identity(str(host_path(root, path)) if path else str(root))
            for path in ["", *ancestors(start)]
        )
        waiting.append((start, real or start_path, above, top_link))
    else:
        waiting.append(("", str(root), frozenset(), None))
    linked_entries = 0
    while waiting:
        relative_dir, full_dir, chain, top_link = waiting.popleft()
        if top_link in cut:
            continue  # its copy is dropped whole: listing more of it is wasted
        identity = _identity(full_dir)
        if identity is None:
            continue
        if identity in chain:
            del scan.entries[relative_dir]
            scan.links.pop(relative_dir, None)
            _skip_link(scan, relative_dir, "it leads to a directory that holds it")
            continue
        try:
            children = sorted(os.listdir(full_dir))
        except OSError:
            continue
        chain = chain | {identity}
        for name in children:
            relative = f"{relative_dir}/{name}" if relative_dir else name
            full = os.path.join(full_dir, name)
            entry, real = _entry_for(root_real, full, relative, scan)
            if entry is None or rules.is_ignored_child(relative, entry.is_dir):
                scan.links.pop(relative, None)
                continue
            reached_through = top_link
            if reached_through is None and entry.is_dir and relative in scan.links:
                reached_through = relative
            if reached_through is not None:
                if reached_through in cut_links or linked_entries >= _LINKED_ENTRIES:
                    cut.add(reached_through)
                    if top_link is not None:
                        break  # the rest of this directory is that copy's too
                    continue
                linked_entries += 1
            scan.entries[relative] = entry
            if entry.is_dir:
                waiting.append((relative, real or full, chain, reached_through))
    return _without_cut_links(scan)


def skipped_link_above(root: Path, relative: str) -> str | None:
    """The first of `relative`'s ancestors that is a symlink a scan of the whole folder
    skips, decided as that scan decides on its way down: one that leads out of the folder,
    or to a directory it came through (a cycle). The watcher follows such a link (`up` ->
    `..`) and reports paths under it, which a scan of them alone took (QA: `up/private/…`
    listed, `up/proj/a.py` uploaded twice)."""
    ancestors = relative.split("/")[:-1]
    if not any(
        os.path.islink(host_path(root, "/".join(ancestors[: depth + 1])))
        for depth in range(len(ancestors))
    ):
        return None  # no link on the way: nothing to skip (most paths; a burst is cheap)
    root_real = os.path.realpath(root)
    came_through = {_identity(str(root))}
    path = ""
    for segment in ancestors:
        path = f"{path}/{segment}" if path else segment
        full = str(host_path(root, path))
        if os.path.islink(full) and not _inside(root_real, os.path.realpath(full)):
            return path
        identity = _identity(full)
        if identity is None:
            return None  # gone: the scan of it finds nothing anyway
        if identity in came_through:
            return path
        came_through.add(identity)
    return None


def _outermost_link(root: Path, relative: str) -> str | None:
    """The first of `relative`'s ancestors, or itself, that is a symlink to a directory."""
    path = ""
    for segment in relative.split("/"):
        path = f"{path}/{segment}" if path else segment
        full = host_path(root, path)
        if full.is_symlink() and full.is_dir():
            return path
    return None


def _without_cut_links(scan: LocalScan) -> LocalScan:
    """`scan` less every entry and link at or under its cut links, each said once."""
    cut = scan.cut_links
    if cut:
        for path in [path for path in scan.entries if is_under_any(path, cut)]:
            del scan.entries[path]
        for link in [link for link in scan.links if is_under_any(link, cut)]:
            del scan.links[link]
        for link in sorted(cut):
            _skip_link(scan, link, f"the folder's links lead to over {_LINKED_ENTRIES} entries")
    return scan


def _skip_link(scan: LocalScan, relative: str, why: str) -> None:
    scan.notices.append(
        SyncIssue(relative, "SYMLINK_SKIPPED", f"skipped symlink {relative}: {why}")
    )


MAX_FILE_BYTES: Final = 1_048_576
"""Spec 6.1 per-file limit, checked before reading."""
MAX_WORKSPACE_BYTES: Final = 16 * 1_048_576
"""Spec 6.1 limit of a sandbox's whole workspace, checked before reading."""
_NAMED_IN_EVENT: Final = 5
"""Files an event names before it says how many more there are."""


def read_what_fits(
    root: Path,
    changed: Iterable[tuple[str, LocalEntry]],
    room: int,
    report: SyncReport,
    emit: EmitEvent,
) -> dict[str, bytes]:
    """The bytes of the `changed` files that fit: each within the per-file limit, all
    together within `room` bytes. Files too large or without room are reported (not
    read, or dropped when they grew since the scan); files that vanished, are no longer
    regular or now lead outside the folder are left out silently (a later event settles
    those)."""
    contents: dict[str, bytes] = {}
    too_large: list[tuple[str, str]] = []
    no_room: list[tuple[str, int]] = []
    used = 0
    for relative, entry in sorted(changed, key=lambda item: (item[1].size, item[0])):
        if entry.size > MAX_FILE_BYTES:
            too_large.append((relative, f"{entry.size} bytes"))
            continue
        if used + entry.size > room:
            no_room.append((relative, entry.size))
            continue
        data = read_regular_file(root, relative, MAX_FILE_BYTES)
        if data is None:
            continue
        if len(data) > MAX_FILE_BYTES:  # it grew since the scan
            too_large.append((relative, f"over {MAX_FILE_BYTES} bytes"))
        elif used + len(data) > room:
            no_room.append((relative, len(data)))
        else:
            used += len(data)
            contents[relative] = data
    _refuse(
        report,
        emit,
        errors.ErrorCode.FILE_TOO_LARGE,
        [
            (
                relative,
                f"{relative} is {size_text}; the sandbox allows at most {MAX_FILE_BYTES} per file",
            )
            for relative, size_text in too_large
        ],
        f"over the sandbox's limit of {_mib(MAX_FILE_BYTES)} per file",
    )
    _refuse(
        report,
        emit,
        errors.ErrorCode.NO_SPACE,
        [
            (
                relative,
                f"{relative} is {size} bytes; no room is left for it in the sandbox's workspace",
            )
            for relative, size in no_room
        ],
        f"{_mib(sum(size for _, size in no_room))} in all; the sandbox's workspace holds "
        f"{_mib(MAX_WORKSPACE_BYTES)}, {_mib(room)} of it left for this pass",
        lead="not uploaded for lack of room",
    )
    return contents


def _refuse(
    report: SyncReport,
    emit: EmitEvent,
    code: str,
    refused: list[tuple[str, str]],
    detail: str,
    *,
    lead: str = "not uploaded",
) -> None:
    """Report each refused path (path, message) with `code`, and emit one event naming
    them all: `lead: names, detail`."""
    if not refused:
        return
    for relative, message in refused:
        report.errors.append(SyncIssue(relative, code, message))
    emit(EventKind.ERROR, f"{lead}: {_names([relative for relative, _ in refused])}, {detail}")


def _mib(size: int) -> str:
    return f"{size / 1_048_576:.1f} MiB"


def _names(paths: list[str]) -> str:
    """`3 files (a, b, c)`, naming the first few only."""
    named = ", ".join(paths[:_NAMED_IN_EVENT])
    more = len(paths) - _NAMED_IN_EVENT
    count = f"{len(paths)} file" + ("s" if len(paths) > 1 else "")
    return f"{count} ({named}" + (f" and {more} more)" if more > 0 else ")")
