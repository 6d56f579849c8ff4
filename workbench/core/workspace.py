"""The sandbox's ``/workspace`` tree (spec 5, 6): pure in-memory semantics plus change sets.

Every mutating operation validates completely before touching the tree, so a failing
operation leaves the workspace unchanged, and returns a ``ChangeSet`` that a store can
persist in one transaction; ``undo_on_error`` takes the change back out of the tree when
that transaction fails, so the tree always equals what the store holds. Reconciling with
another tree is `workspace_sync`, and the files API's wire handling is the local
backend's `files`.

The engines keep a copy of the tree in their own memory (`engines.vfs`): every change
is also logged by path with a version number, so `update_since` tells an engine process
what changed since the version it holds, and `apply_states` takes a run's changes back.
"""

from __future__ import annotations

import binascii
import bisect
import itertools
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final, Literal

from engines.result import well_formed
from engines.vfs import PathState, TreeUpdate, VfsLimits, ordered
from workbench.core.changes import ChangeSet
from workbench.core.paths import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    ROOT,
    NormalizedPath,
    WorkspaceOSError,
    normalize,
)

__all__ = [
    "LIMITS",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "DirNode",
    "Entry",
    "FileNode",
    "Node",
    "Workspace",
    "hash_bytes",
]

_FNV_PRIME: Final = 0x01000193
_FNV_OFFSET: Final = 0x811C9DC5
_MIX: Final = 0x85EBCA6B
_MASK: Final = 0xFFFFFFFF


def hash_bytes(data: bytes | bytearray | memoryview) -> str:
    """The workspace content hash ``hashBytes`` (spec 6.4): ``h1`` (FNV-1a) then ``h2``
    (add-multiply seeded with the length), each 8 hex digits. Only a change detector.
    Pure CPython manages roughly 3-4 MB/s; the lanes are computed in two separate tight
    loops because that beats one combined loop by about 25 %. The ``Workspace`` caches each
    file's hash on its (immutable) ``bytes`` object so unchanged content is not hashed
    again."""
    buf = bytes(data) if not isinstance(data, bytes) else data
    h1 = _FNV_OFFSET
    p = _FNV_PRIME
    m = _MASK
    for b in buf:
        h1 = ((h1 ^ b) * p) & m
    h2 = (_FNV_PRIME ^ len(buf)) & m
    q = _MIX
    for b in buf:
        h2 = ((h2 + b) * q) & m
    return f"{h1:08x}{h2:08x}"


MAX_FILE_BYTES: Final = 1024 * 1024
MAX_TOTAL_BYTES: Final = 16 * 1024 * 1024
MAX_ENTRIES: Final = 4096
GUEST_LIMITS: Final = VfsLimits(
    file_bytes=MAX_FILE_BYTES,
    total_bytes=MAX_TOTAL_BYTES,
    entries=MAX_ENTRIES,
    name_bytes=MAX_SEGMENT_BYTES,
    path_bytes=MAX_PATH_BYTES - len(ROOT) - 1,
)
"""The same limits for a guest's writes, enforced by the engine where they happen (its
paths are relative to the root)."""
LOG_PATHS: Final = 2 * MAX_ENTRIES
"""Changed paths the version log keeps; an engine further behind gets the whole tree."""
_identities = itertools.count(1)
LIMITS: Final[Mapping[str, int]] = {
    "MAX_FILE_BYTES": MAX_FILE_BYTES,
    "MAX_TOTAL_BYTES": MAX_TOTAL_BYTES,
    "MAX_ENTRIES": MAX_ENTRIES,
}

_B64_WS_RE: Final = re.compile(r"[\t\n\f\r ]")
_B64_RE: Final = re.compile(r"[A-Za-z0-9+/]*")


def _atob(text: str) -> bytes:
    """WHATWG forgiving-base64 decode (``atob``); ``EINVAL`` on failure."""
    s = _B64_WS_RE.sub("", text)
    if len(s) % 4 == 0 and s.endswith("="):
        s = s[:-2] if s.endswith("==") else s[:-1]
    if len(s) % 4 == 1 or _B64_RE.fullmatch(s) is None:
        raise WorkspaceOSError("EINVAL", "Invalid base64 content")
    try:
        return binascii.a2b_base64(s + "=" * (-len(s) % 4))
    except binascii.Error as exc:  # pragma: no cover - excluded by the checks above
        raise WorkspaceOSError("EINVAL", "Invalid base64 content") from exc


# --- tree nodes ----------------------------------------------------------------------


class FileNode:
    __slots__ = ("data", "hash", "updated_at")

    def __init__(self, data: bytes, updated_at: int) -> None:
        self.data = data
        self.updated_at = updated_at
        self.hash: str | None = None

    def content_hash(self) -> str:
        if self.hash is None:
            self.hash = hash_bytes(self.data)
        return self.hash


class DirNode:
    __slots__ = ("children",)

    def __init__(self) -> None:
        self.children: dict[str, FileNode | DirNode] = {}


Node = FileNode | DirNode


@dataclass(frozen=True, slots=True)
class Entry:
    """A listed or stat-ed entry: absolute path, type, size (0 for dirs), updatedAt ms."""

    path: str
    type: Literal["file", "directory"]
    size: int
    updated_at: int


# --- the workspace -------------------------------------------------------------------


class Workspace:
    """The ``/workspace`` tree of one sandbox (root implicit, directories first-class)."""

    def __init__(self) -> None:
        self._root = DirNode()
        self._entries = 0
        self._bytes = 0
        self._journal: list[Callable[[], object]] | None = None
        """Undo steps of the tree changes made inside ``undo_on_error``, oldest first."""
        self._identity = next(_identities)
        self._version = 0
        self._log: list[tuple[int, str]] = []
        """(version, absolute path) of the latest changes, oldest first."""
        self._log_floor = 0
        """Changes up to this version are no longer in the log."""

    @contextmanager
    def undo_on_error(self) -> Iterator[None]:
        """Take every tree change made inside the block back out if the block raises (the
        store could not commit it), restoring entries in their original listing order."""
        if self._journal is not None:  # nested: the outer block undoes everything
            yield
            return
        self._journal = []
        counters = (self._entries, self._bytes)
        try:
            yield
        except BaseException:
            for undo in reversed(self._journal):
                undo()
            self._entries, self._bytes = counters
            raise
        finally:
            self._journal = None

    # ----- loading / serialization ---------------------------------------------------

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, bytes | None, int]]) -> Workspace:
        """Rebuild from ``files`` rows ``(path, data or None for a dir, updated_at)``.

        A row whose path could never be materialized (stored by an older version that
        accepted any path) is left out, so it cannot break every run of the sandbox.
        """
        ws = cls()
        for path, data, updated_at in rows:
            try:
                rel = normalize(path).segments
            except WorkspaceOSError:
                continue
            if not rel:
                continue
            d = ws._root
            for seg in rel[:-1]:
                child = d.children.get(seg)
                if not isinstance(child, DirNode):
                    child = DirNode()
                    d.children[seg] = child
                d = child
            name = rel[-1]
            if data is None:
                if name not in d.children:
                    d.children[name] = DirNode()
            else:
                d.children[name] = FileNode(bytes(data), int(updated_at))
        ws._recount()
        return ws

    def rows(self) -> list[tuple[str, bytes | None, int]]:
        """Every entry as a ``files`` row (directories: ``None`` data, ``updated_at`` 0)."""
        out: list[tuple[str, bytes | None, int]] = []
        for path, node in self._walk(self._root, ROOT):
            if isinstance(node, DirNode):
                out.append((path, None, 0))
            else:
                out.append((path, node.data, node.updated_at))
        return out

    def _recount(self) -> None:
        entries = total = 0
        for _, node in self._walk(self._root, ROOT):
            entries += 1
            if isinstance(node, FileNode):
                total += len(node.data)
        self._entries, self._bytes = entries, total

    def walk(self) -> Iterator[tuple[str, Node]]:
        """Every entry with its absolute path, pre-order (a directory before its
        children), in insertion order."""
        return self._walk(self._root, ROOT)

    @staticmethod
    def _walk(d: DirNode, prefix: str) -> Iterator[tuple[str, Node]]:
        """Pre-order walk: a directory comes before its children, insertion order. With
        a stack, not recursion: the path limit allows about 1,500 levels."""
        stack = [(prefix, iter(d.children.items()))]
        while stack:
            base, children = stack[-1]
            for name, child in children:
                path = f"{base}/{name}"
                yield path, child
                if isinstance(child, DirNode):
                    stack.append((path, iter(child.children.items())))
                    break
            else:
                stack.pop()

    # ----- primitives (no validation; keep counters and record changes) ------------

    def _subtree_size(self, node: Node) -> tuple[int, int]:
        if isinstance(node, FileNode):
            return 1, len(node.data)
        entries, total = 1, 0
        for _, child in self._walk(node, ""):
            entries += 1
            if isinstance(child, FileNode):
                total += len(child.data)
        return entries, total

    def _logged(self, path: str) -> None:
        """Log a change of `path` (its state now is what an engine process is sent)."""
        self._version += 1
        self._log.append((self._version, path))
        if len(self._log) > LOG_PATHS:
            dropped = len(self._log) - LOG_PATHS // 2
            self._log_floor = self._log[dropped - 1][0]
            del self._log[:dropped]

    def _record_insert(self, path: str, node: Node, cs: ChangeSet) -> None:
        self._logged(path)
        if isinstance(node, FileNode):
            cs.upsert_file(path, node.data, node.updated_at)
            return
        cs.upsert_dir(path)
        for sub, child in self._walk(node, path):
            self._logged(sub)
            if isinstance(child, FileNode):
                cs.upsert_file(sub, child.data, child.updated_at)
            else:
                cs.upsert_dir(sub)

    def _record_remove(self, path: str, node: Node, cs: ChangeSet) -> None:
        self._logged(path)
        cs.delete(path)
        if isinstance(node, DirNode):
            for sub, _ in self._walk(node, path):
                self._logged(sub)
                cs.delete(sub)

    def _detach(self, parent: DirNode, name: str, path: str, cs: ChangeSet) -> Node:
        index = list(parent.children).index(name) if self._journal is not None else -1
        node = parent.children.pop(name)
        if self._journal is not None:
            self._journal.append(partial(_reinsert, parent.children, index, name, node))
        entries, total = self._subtree_size(node)
        self._entries -= entries
        self._bytes -= total
        self._record_remove(path, node, cs)
        return node

    def _attach(self, parent: DirNode, name: str, node: Node, path: str, cs: ChangeSet) -> None:
        old = parent.children.get(name)
        if self._journal is not None:
            self._journal.append(
                partial(parent.children.pop, name)
                if old is None
                else partial(parent.children.__setitem__, name, old)  # keeps its position
            )
        if old is not None:
            entries, total = self._subtree_size(old)
            self._entries -= entries
            self._bytes -= total
            self._record_remove(path, old, cs)
        parent.children[name] = node
        entries, total = self._subtree_size(node)
        self._entries += entries
        self._bytes += total
        self._record_insert(path, node, cs)

    # ----- lookups -------------------------------------------------------------------

    def _lookup(self, segments: tuple[str, ...]) -> Node | None:
        node: Node = self._root
        for seg in segments:
            if not isinstance(node, DirNode):
                raise WorkspaceOSError("ENOTDIR", "Not a directory")
            child = node.children.get(seg)
            if child is None:
                return None
            node = child
        return node

    def _walk_parent(self, segments: tuple[str, ...]) -> DirNode:
        d = self._root
        for seg in segments[:-1]:
            child = d.children.get(seg)
            if child is None:
                raise WorkspaceOSError("ENOENT", "No such file or directory")
            if not isinstance(child, DirNode):
                raise WorkspaceOSError("ENOTDIR", "Not a directory")
            d = child
        return d

    # ----- files-API operations (spec 5.2, messages 4.6) ------------------------------

    def read(self, path: str, cwd: str = ROOT) -> tuple[bytes, int]:
        """Raw bytes and updatedAt of a file (ENOENT / EISDIR / ENOTDIR)."""
        np = normalize(path, cwd)
        node = self._root if np.is_root else self._lookup(np.segments)
        if node is None:
            raise WorkspaceOSError("ENOENT", f"No such file: {path}")
        if isinstance(node, DirNode):
            raise WorkspaceOSError("EISDIR", f"Is a directory: {path}")
        return node.data, node.updated_at

    def write(
        self,
        path: str,
        content: str | bytes,
        *,
        now: int,
        encoding: str = "utf-8",
        cwd: str = ROOT,
    ) -> ChangeSet:
        """Create or replace a file with all 6.1 limit checks; ``str`` content is decoded."""
        np = normalize(path, cwd)
        if np.is_root:
            raise WorkspaceOSError("EISDIR", "Cannot write to the /workspace root")
        if isinstance(content, str):
            # `atob`, or `TextEncoder` (lone surrogates become U+FFFD)
            data = _atob(content) if encoding == "base64" else well_formed(content).encode()
        else:
            data = bytes(content)
        if len(data) > MAX_FILE_BYTES:
            raise WorkspaceOSError(
                "EFBIG",
                f"File exceeds {MAX_FILE_BYTES} bytes",
                {"maxSize": MAX_FILE_BYTES, "actualSize": len(data)},
            )
        parent = self._walk_parent(np.segments)
        existing = parent.children.get(np.name)
        if isinstance(existing, DirNode):
            raise WorkspaceOSError("EISDIR", f"Is a directory: {path}")
        previous = len(existing.data) if existing is not None else 0
        if self._bytes - previous + len(data) > MAX_TOTAL_BYTES:
            raise WorkspaceOSError("ENOSPC", "Workspace exceeds 16 MiB total")
        if existing is None and self._entries >= MAX_ENTRIES:
            raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        cs = ChangeSet()
        self._attach(parent, np.name, FileNode(data, now), np.absolute, cs)
        return cs

    def mkdir(self, path: str, *, recursive: bool = False, cwd: str = ROOT) -> ChangeSet:
        """Create a directory; ``/workspace`` itself is a no-op success."""
        np = normalize(path, cwd)
        cs = ChangeSet()
        if np.is_root:
            return cs
        if recursive:
            d = self._root
            missing_from = len(np.segments)
            for i, seg in enumerate(np.segments):
                child = d.children.get(seg)
                if child is None:
                    missing_from = i
                    break
                if not isinstance(child, DirNode):
                    raise WorkspaceOSError("ENOTDIR", "Not a directory")
                d = child
            to_create = np.segments[missing_from:]
            if to_create and self._entries + len(to_create) > MAX_ENTRIES:
                raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
            prefix = "/".join((ROOT, *np.segments[:missing_from]))
            for seg in to_create:
                prefix = f"{prefix}/{seg}"
                new = DirNode()
                self._attach(d, seg, new, prefix, cs)
                d = new
            return cs
        parent = self._walk_parent(np.segments)
        if np.name in parent.children:
            raise WorkspaceOSError("EEXIST", f"Already exists: {path}")
        if self._entries >= MAX_ENTRIES:
            raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        self._attach(parent, np.name, DirNode(), np.absolute, cs)
        return cs

    def delete(
        self, path: str, *, recursive: bool = False, force: bool = False, cwd: str = ROOT
    ) -> ChangeSet:
        """Delete a file, or a directory subtree with ``recursive``; ``force`` ignores ENOENT."""
        np = normalize(path, cwd)
        cs = ChangeSet()
        if np.is_root:
            raise WorkspaceOSError("EACCES", "Cannot delete the /workspace root")
        try:
            parent = self._walk_parent(np.segments)
        except WorkspaceOSError as exc:
            if force and exc.errno == "ENOENT":
                return cs
            raise
        node = parent.children.get(np.name)
        if node is None:
            if force:
                return cs
            raise WorkspaceOSError("ENOENT", f"No such file or directory: {path}")
        if isinstance(node, DirNode) and not recursive:
            raise WorkspaceOSError(
                "EISDIR",
                f"Cannot delete directory with deleteFile() at '{path}'. "
                "Pass { recursive: true } to delete a directory.",
            )
        self._detach(parent, np.name, np.absolute, cs)
        return cs

    def rename(self, src: str, dst: str, *, cwd: str = ROOT) -> ChangeSet:
        """Rename/move (identical semantics); updatedAt of moved files is preserved.

        Beyond the spec: moving a directory strictly inside itself fails with ``EINVAL``
        "Cannot move a directory into itself: <dst>" (the original silently lost it).
        """
        s = normalize(src, cwd)
        t = normalize(dst, cwd)
        if s.is_root:
            raise WorkspaceOSError("EACCES", "Cannot rename the /workspace root")
        if t.is_root:
            raise WorkspaceOSError("EACCES", "Cannot rename onto the /workspace root")
        src_parent = self._walk_parent(s.segments)
        node = src_parent.children.get(s.name)
        if node is None:
            raise WorkspaceOSError("ENOENT", f"No such file or directory: {src}")
        dst_parent = self._walk_parent(t.segments)
        existing = dst_parent.children.get(t.name)
        if existing is not None:
            src_dir = isinstance(node, DirNode)
            dst_dir = isinstance(existing, DirNode)
            if src_dir and not dst_dir:
                raise WorkspaceOSError("ENOTDIR", f"Not a directory: {dst}")
            if not src_dir and dst_dir:
                raise WorkspaceOSError("EISDIR", f"Is a directory: {dst}")
            if isinstance(existing, DirNode) and existing.children:
                raise WorkspaceOSError("ENOTEMPTY", f"Directory not empty: {dst}")
        if (
            isinstance(node, DirNode)
            and len(t.segments) > len(s.segments)
            and t.segments[: len(s.segments)] == s.segments
        ):
            raise WorkspaceOSError("EINVAL", f"Cannot move a directory into itself: {dst}")
        cs = ChangeSet()
        moved = self._detach(src_parent, s.name, s.absolute, cs)
        self._attach(dst_parent, t.name, moved, t.absolute, cs)
        return cs

    def move(self, src: str, dst: str, *, cwd: str = ROOT) -> ChangeSet:
        """Alias of ``rename`` (spec 5.2: identical semantics)."""
        return self.rename(src, dst, cwd=cwd)

    def list_dir(self, path: str, *, recursive: bool = False, cwd: str = ROOT) -> list[Entry]:
        """Entries of a directory (pre-order when recursive; insertion order)."""
        np = normalize(path, cwd)
        node = self._root if np.is_root else self._lookup(np.segments)
        if node is None:
            raise WorkspaceOSError("ENOENT", f"No such directory: {path}")
        if not isinstance(node, DirNode):
            raise WorkspaceOSError("ENOTDIR", f"Not a directory: {path}")
        if recursive:
            found: Iterable[tuple[str, Node]] = self._walk(node, np.absolute)
        else:
            found = ((f"{np.absolute}/{name}", child) for name, child in node.children.items())
        return [
            Entry(path, "directory", 0, 0)
            if isinstance(child, DirNode)
            else Entry(path, "file", len(child.data), child.updated_at)
            for path, child in found
        ]

    def exists(self, path: str, cwd: str = ROOT) -> bool:
        """True for ``/workspace`` and any existing entry; never raises."""
        try:
            np = normalize(path, cwd)
            return np.is_root or self._lookup(np.segments) is not None
        except WorkspaceOSError:
            return False

    def stat(self, path: str, cwd: str = ROOT) -> Entry:
        """Type, size and updatedAt (directories report 0, spec 6.3)."""
        np = normalize(path, cwd)
        node = self._root if np.is_root else self._lookup(np.segments)
        if node is None:
            raise WorkspaceOSError("ENOENT", f"No such file or directory: {path}")
        if isinstance(node, DirNode):
            return Entry(np.absolute, "directory", 0, 0)
        return Entry(np.absolute, "file", len(node.data), node.updated_at)

    def dirs(self) -> list[str]:
        """Every directory, absolute, sorted, root excluded."""
        return sorted(p for p, n in self.walk() if isinstance(n, DirNode))

    def info(self) -> dict[str, int]:
        """``SandboxInfo.workspace``: ``files`` = entries (files + dirs), ``bytes``."""
        return {"files": self._entries, "bytes": self._bytes}

    # ----- the engines' copy ------------------------------------------------------------

    @property
    def version(self) -> Hashable:
        """The name of the tree's state now (`update_since`)."""
        return (self._identity, self._version)

    def update_since(self, version: Hashable | None) -> tuple[TreeUpdate, Hashable]:
        """What an engine process holding `version` of this tree must apply to hold it
        now: the paths changed since (at their state now), or the whole tree when
        `version` is not one of this tree's or is older than the log."""
        if (
            not isinstance(version, tuple)
            or len(version) != 2
            or version[0] != self._identity
            or version[1] < self._log_floor
        ):
            return TreeUpdate(self._states(p for p, _ in self.walk()), replace=True), self.version
        start = bisect.bisect_right(self._log, version[1], key=lambda logged: logged[0])
        paths = dict.fromkeys(path for _, path in self._log[start:])
        return TreeUpdate(self._states(paths)), self.version

    def _states(self, paths: Iterable[str]) -> tuple[PathState, ...]:
        states = []
        for path in paths:
            try:
                node = self._lookup(normalize(path).segments)
            except WorkspaceOSError:  # below what is a file now
                node = None
            relative = path[len(ROOT) + 1 :]
            if isinstance(node, FileNode):
                states.append(PathState(relative, "file", node.data, node.updated_at))
            elif isinstance(node, DirNode):
                states.append(PathState(relative, "directory"))
            else:
                states.append(PathState(relative, "absent"))
        return tuple(states)

    def apply_states(self, states: Iterable[PathState], now: int) -> ChangeSet:
        """Take a run's changes (what its paths hold now; files stamped `now`). Refused
        with ``EINVAL`` for a path the tree cannot hold, and with the 6.1 errno when the
        result breaks a limit, leaving the tree unchanged (the engine enforced both as
        the guest wrote: this is the owner's own check of what it is sent)."""
        cs = ChangeSet()
        with self.undo_on_error():
            for state in ordered(states):
                np = normalize(f"{ROOT}/{state.path}")
                if np.is_root:
                    raise WorkspaceOSError("EINVAL", "A run changed the /workspace root")
                if state.kind == "absent":
                    self.remove_path(np.absolute, cs)
                elif state.kind == "directory":
                    self.ensure_directory(np, cs)
                else:
                    if len(state.data) > MAX_FILE_BYTES:
                        raise WorkspaceOSError("EFBIG", f"File exceeds {MAX_FILE_BYTES} bytes")
                    self.put_file(np, bytes(state.data), now, cs)
            if self._bytes > MAX_TOTAL_BYTES:
                raise WorkspaceOSError("ENOSPC", "Workspace exceeds 16 MiB total")
            if self._entries > MAX_ENTRIES:
                raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        return cs

    # ----- unchecked changes for reconciliation (no limits; see `workspace_sync`) ----

    def ensure_directory(self, np: NormalizedPath, cs: ChangeSet) -> DirNode:
        """The directory at ``np``, created with its missing parents; a file in the way
        is replaced."""
        d = self._root
        prefix = ROOT
        for seg in np.segments:
            prefix = f"{prefix}/{seg}"
            child = d.children.get(seg)
            if not isinstance(child, DirNode):
                child = DirNode()
                self._attach(d, seg, child, prefix, cs)
            d = child
        return d

    def put_file(self, np: NormalizedPath, data: bytes, updated_at: int, cs: ChangeSet) -> None:
        """Set the file at ``np`` (not the root), creating its parents."""
        parent = self.ensure_directory(
            NormalizedPath(np.segments[:-1], np.absolute.rsplit("/", 1)[0]), cs
        )
        self._attach(parent, np.name, FileNode(data, updated_at), np.absolute, cs)

    def remove_path(self, path: str, cs: ChangeSet) -> None:
        """Remove the entry at ``path`` with its subtree, if there is one."""
        try:
            np = normalize(path)
        except WorkspaceOSError:
            return
        if np.is_root:
            return
        d = self._root
        for seg in np.segments[:-1]:
            child = d.children.get(seg)
            if not isinstance(child, DirNode):
                return
            d = child
        if np.name in d.children:
            self._detach(d, np.name, np.absolute, cs)


def _reinsert(children: dict[str, Node], index: int, name: str, node: Node) -> None:
    """Put ``name`` back at ``index`` of an insertion-ordered ``children`` dict."""
    items = list(children.items())
    items.insert(index, (name, node))
    children.clear()
    children.update(items)
