"""The sandbox's ``/workspace`` tree (spec 5, 6): pure in-memory semantics plus change sets.

Every mutating operation validates completely before touching the tree, so a failing
operation leaves the workspace unchanged, and returns a ``ChangeSet`` that a store can
persist in one transaction (``files(path, data, updated_at)``; a ``dir`` change is a
``NULL``-data row); ``undo_on_error`` takes the change back out of the tree when that
transaction fails, so the tree always equals what the store holds.
``materialize``/``diff_directory``/``apply_diff`` bridge the tree to a real host
directory that an engine preopens as ``/workspace``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
import stat as stat_mod
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal

from workbench.api.errors import (
    ErrorCode,
    Operation,
    SandboxError,
    error_class_for,
    error_code_for_errno,
    error_response,
)
from workbench.core.clock import iso_from_ms
from workbench.core.hashing import hash_bytes
from workbench.core.host_paths import host_path, host_path_str
from workbench.core.paths import (
    ROOT,
    InvalidPathError,
    NormalizedPath,
    WorkspaceOSError,
    normalize,
)

__all__ = [
    "LIMITS",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "Change",
    "ChangeSet",
    "Entry",
    "FileEntry",
    "SyncResult",
    "Workspace",
    "WorkspaceDiff",
    "file_info",
    "is_hidden",
    "looks_binary",
    "mime_type_for",
]

MAX_FILE_BYTES: Final = 1024 * 1024
MAX_TOTAL_BYTES: Final = 16 * 1024 * 1024
MAX_ENTRIES: Final = 4096
LIMITS: Final[Mapping[str, int]] = {
    "MAX_FILE_BYTES": MAX_FILE_BYTES,
    "MAX_TOTAL_BYTES": MAX_TOTAL_BYTES,
    "MAX_ENTRIES": MAX_ENTRIES,
}

_OPS: Final = frozenset(Operation.FOR_FILES_OP)

MIME_TYPES: Final[Mapping[str, str]] = {
    ".json": "application/json",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".py": "text/x-python",
    ".pl": "text/x-perl",
    ".rb": "text/x-ruby",
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".html": "text/html",
    ".css": "text/css",
    ".csv": "text/csv",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
    ".pdf": "application/pdf",
    ".wasm": "application/wasm",
    ".zip": "application/zip",
    ".gz": "application/gzip",
}
_EXT_RE: Final = re.compile(r"\.[^./]+\Z")
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")
_B64_WS_RE: Final = re.compile(r"[\t\n\f\r ]")
_B64_RE: Final = re.compile(r"[A-Za-z0-9+/]*")


# --- small pure helpers --------------------------------------------------------------


def mime_type_for(path: str, is_binary: bool) -> str:
    """MIME type by lower-cased extension of the last segment (spec 5.4)."""
    m = _EXT_RE.search(path)
    found = MIME_TYPES.get(m.group(0).lower()) if m else None
    return found or ("application/octet-stream" if is_binary else "text/plain")


def looks_binary(data: bytes) -> bool:
    """Not valid UTF-8, or valid but containing NUL (spec 5.5); empty is not binary."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return b"\x00" in data


def is_hidden(relative_path: str) -> bool:
    """True when any segment of ``relative_path`` starts with ``.`` (spec 5.3)."""
    return any(seg.startswith(".") for seg in relative_path.split("/"))


def _decode_utf8(data: bytes) -> str:
    """``TextDecoder("utf-8")``: replacement characters and a leading BOM stripped."""
    return data.decode("utf-8-sig", errors="replace")


def _encode_utf8(text: str) -> bytes:
    """``TextEncoder``: lone surrogates become U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("\ufffd", text).encode("utf-8")


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


def _js_string(value: object) -> str:
    """JavaScript ``String(value)`` for JSON values (used for non-string ``content``)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, list):
        return ",".join("" if v is None else _js_string(v) for v in value)
    return "[object Object]"


def _js_truthy(value: object) -> bool:
    """JavaScript truthiness of a JSON value (``[]`` and ``{}`` are truthy)."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


# --- change sets ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One row-level change: ``file`` upsert, ``dir`` upsert, or ``delete`` of one path."""

    kind: Literal["file", "dir", "delete"]
    path: str
    data: bytes | None = None
    updated_at: int = 0


class ChangeSet:
    """Row changes of one operation, at most one per path (last write wins).

    Because each path appears once, the changes can be applied in any order; the
    store's transaction does ``INSERT OR REPLACE`` for file/dir and ``DELETE`` for
    delete. Deleting a directory lists every path of its subtree explicitly.
    """

    __slots__ = ("_by_path",)

    def __init__(self, changes: Iterable[Change] = ()) -> None:
        self._by_path: dict[str, Change] = {}
        for c in changes:
            self._by_path[c.path] = c

    def upsert_file(self, path: str, data: bytes, updated_at: int) -> None:
        """Record a file row."""
        self._by_path[path] = Change("file", path, data, updated_at)

    def upsert_dir(self, path: str) -> None:
        """Record a directory row (``data`` NULL, ``updated_at`` 0)."""
        self._by_path[path] = Change("dir", path)

    def delete(self, path: str) -> None:
        """Record the removal of one row."""
        self._by_path[path] = Change("delete", path)

    @property
    def changes(self) -> list[Change]:
        """The changes in recording order."""
        return list(self._by_path.values())

    def get(self, path: str) -> Change | None:
        """The change recorded for ``path``, if any."""
        return self._by_path.get(path)

    def __iter__(self) -> Iterator[Change]:
        return iter(list(self._by_path.values()))

    def __len__(self) -> int:
        return len(self._by_path)

    def __bool__(self) -> bool:
        return bool(self._by_path)

    def __repr__(self) -> str:
        return f"ChangeSet({self.changes!r})"


# --- tree nodes ----------------------------------------------------------------------


class _File:
    __slots__ = ("data", "hash", "updated_at")

    def __init__(self, data: bytes, updated_at: int) -> None:
        self.data = data
        self.updated_at = updated_at
        self.hash: str | None = None

    def content_hash(self) -> str:
        if self.hash is None:
            self.hash = hash_bytes(self.data)
        return self.hash


class _Dir:
    __slots__ = ("children",)

    def __init__(self) -> None:
        self.children: dict[str, _File | _Dir] = {}


_Node = _File | _Dir


@dataclass(frozen=True, slots=True)
class Entry:
    """A listed or stat-ed entry: absolute path, type, size (0 for dirs), updatedAt ms."""

    path: str
    type: Literal["file", "directory"]
    size: int
    updated_at: int


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


@dataclass(slots=True)
class WorkspaceDiff:
    """What a run changed in a materialized directory, relative to the tree.

    ``files`` = created + updated (raw bytes); ``deleted`` = removed files; ``dirs`` =
    the full post-run directory list (absolute, sorted). ``rejected`` lists entries
    that were ignored (symlinks, special files, undecodable names) with a reason.
    ``violation`` is set when the result would break a 6.1 limit; ``apply_diff``
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


def file_info(entry: Entry, base: str, sandbox_created_at: str, now_ms: int) -> dict[str, Any]:
    """``FileInfo`` (spec 5.3) for ``entry`` listed under directory ``base``."""
    name = entry.path.rsplit("/", 1)[-1]
    prefix = base + "/"
    rel = entry.path[len(prefix) :] if entry.path.startswith(prefix) else name
    is_dir = entry.type == "directory"
    return {
        "name": name,
        "absolutePath": entry.path,
        "relativePath": rel,
        "type": entry.type,
        "size": entry.size,
        "modifiedAt": sandbox_created_at if is_dir else iso_from_ms(entry.updated_at or now_ms),
        "mode": "drwxr-xr-x" if is_dir else "-rw-r--r--",
        "permissions": {"readable": True, "writable": True, "executable": is_dir},
    }


# --- the workspace -------------------------------------------------------------------


class Workspace:
    """The ``/workspace`` tree of one sandbox (root implicit, directories first-class)."""

    def __init__(self) -> None:
        self._root = _Dir()
        self._entries = 0
        self._bytes = 0
        # materialization baseline: rel path -> (size, mtime_ns, data) / None for dirs
        self._mat_dir: Path | None = None
        self._mat_files: dict[str, tuple[int, int, bytes]] = {}
        self._mat_time_ns = 0
        self._journal: list[Callable[[], object]] | None = None
        """Undo steps of the tree changes made inside ``undo_on_error``, oldest first."""

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
                if not isinstance(child, _Dir):
                    child = _Dir()
                    d.children[seg] = child
                d = child
            name = rel[-1]
            if data is None:
                if name not in d.children:
                    d.children[name] = _Dir()
            else:
                d.children[name] = _File(bytes(data), int(updated_at))
        ws._recount()
        return ws

    def rows(self) -> list[tuple[str, bytes | None, int]]:
        """Every entry as a ``files`` row (directories: ``None`` data, ``updated_at`` 0)."""
        out: list[tuple[str, bytes | None, int]] = []
        for path, node in self._walk(self._root, ROOT):
            if isinstance(node, _Dir):
                out.append((path, None, 0))
            else:
                out.append((path, node.data, node.updated_at))
        return out

    def _recount(self) -> None:
        entries = total = 0
        for _, node in self._walk(self._root, ROOT):
            entries += 1
            if isinstance(node, _File):
                total += len(node.data)
        self._entries, self._bytes = entries, total

    @staticmethod
    def _walk(d: _Dir, prefix: str) -> Iterator[tuple[str, _Node]]:
        """Pre-order walk: a directory comes before its children, insertion order."""
        for name, child in d.children.items():
            path = f"{prefix}/{name}"
            yield path, child
            if isinstance(child, _Dir):
                yield from Workspace._walk(child, path)

    # ----- primitives (no validation; keep counters and record changes) ------------

    def _subtree_size(self, node: _Node) -> tuple[int, int]:
        if isinstance(node, _File):
            return 1, len(node.data)
        entries, total = 1, 0
        for _, child in self._walk(node, ""):
            entries += 1
            if isinstance(child, _File):
                total += len(child.data)
        return entries, total

    def _record_insert(self, path: str, node: _Node, cs: ChangeSet) -> None:
        if isinstance(node, _File):
            cs.upsert_file(path, node.data, node.updated_at)
            return
        cs.upsert_dir(path)
        for sub, child in self._walk(node, path):
            if isinstance(child, _File):
                cs.upsert_file(sub, child.data, child.updated_at)
            else:
                cs.upsert_dir(sub)

    def _record_remove(self, path: str, node: _Node, cs: ChangeSet) -> None:
        cs.delete(path)
        if isinstance(node, _Dir):
            for sub, _ in self._walk(node, path):
                cs.delete(sub)

    def _detach(self, parent: _Dir, name: str, path: str, cs: ChangeSet) -> _Node:
        index = list(parent.children).index(name) if self._journal is not None else -1
        node = parent.children.pop(name)
        if self._journal is not None:
            self._journal.append(partial(_reinsert, parent.children, index, name, node))
        entries, total = self._subtree_size(node)
        self._entries -= entries
        self._bytes -= total
        self._record_remove(path, node, cs)
        return node

    def _attach(self, parent: _Dir, name: str, node: _Node, path: str, cs: ChangeSet) -> None:
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

    def _lookup(self, segments: tuple[str, ...]) -> _Node | None:
        node: _Node = self._root
        for seg in segments:
            if not isinstance(node, _Dir):
                raise WorkspaceOSError("ENOTDIR", "Not a directory")
            child = node.children.get(seg)
            if child is None:
                return None
            node = child
        return node

    def _walk_parent(self, segments: tuple[str, ...]) -> _Dir:
        d = self._root
        for seg in segments[:-1]:
            child = d.children.get(seg)
            if child is None:
                raise WorkspaceOSError("ENOENT", "No such file or directory")
            if not isinstance(child, _Dir):
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
        if isinstance(node, _Dir):
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
            data = _atob(content) if encoding == "base64" else _encode_utf8(content)
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
        if isinstance(existing, _Dir):
            raise WorkspaceOSError("EISDIR", f"Is a directory: {path}")
        previous = len(existing.data) if existing is not None else 0
        if self._bytes - previous + len(data) > MAX_TOTAL_BYTES:
            raise WorkspaceOSError("ENOSPC", "Workspace exceeds 16 MiB total")
        if existing is None and self._entries >= MAX_ENTRIES:
            raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        cs = ChangeSet()
        self._attach(parent, np.name, _File(data, now), np.absolute, cs)
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
                if not isinstance(child, _Dir):
                    raise WorkspaceOSError("ENOTDIR", "Not a directory")
                d = child
            to_create = np.segments[missing_from:]
            if to_create and self._entries + len(to_create) > MAX_ENTRIES:
                raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
            prefix = "/".join((ROOT, *np.segments[:missing_from]))
            for seg in to_create:
                prefix = f"{prefix}/{seg}"
                new = _Dir()
                self._attach(d, seg, new, prefix, cs)
                d = new
            return cs
        parent = self._walk_parent(np.segments)
        if np.name in parent.children:
            raise WorkspaceOSError("EEXIST", f"Already exists: {path}")
        if self._entries >= MAX_ENTRIES:
            raise WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        self._attach(parent, np.name, _Dir(), np.absolute, cs)
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
        if isinstance(node, _Dir) and not recursive:
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
            src_dir = isinstance(node, _Dir)
            dst_dir = isinstance(existing, _Dir)
            if src_dir and not dst_dir:
                raise WorkspaceOSError("ENOTDIR", f"Not a directory: {dst}")
            if not src_dir and dst_dir:
                raise WorkspaceOSError("EISDIR", f"Is a directory: {dst}")
            if isinstance(existing, _Dir) and existing.children:
                raise WorkspaceOSError("ENOTEMPTY", f"Directory not empty: {dst}")
        if (
            isinstance(node, _Dir)
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
        if not isinstance(node, _Dir):
            raise WorkspaceOSError("ENOTDIR", f"Not a directory: {path}")
        out: list[Entry] = []

        def walk(d: _Dir, prefix: str) -> None:
            for name, child in d.children.items():
                p = f"{prefix}/{name}"
                if isinstance(child, _Dir):
                    out.append(Entry(p, "directory", 0, 0))
                    if recursive:
                        walk(child, p)
                else:
                    out.append(Entry(p, "file", len(child.data), child.updated_at))

        walk(node, np.absolute)
        return out

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
        if isinstance(node, _Dir):
            return Entry(np.absolute, "directory", 0, 0)
        return Entry(np.absolute, "file", len(node.data), node.updated_at)

    # ----- POST /files ---------------------------------------------------------------

    def files_request(
        self, body: object, *, now: int, sandbox_created_at: str
    ) -> tuple[dict[str, Any], ChangeSet]:
        """Handle a whole ``POST /files`` body (spec 5.1-5.5, 4.3).

        Returns the success JSON and the change set to persist; raises the matching
        ``SandboxError`` subclass (with the exact ``ErrorResponse``) on failure.
        """
        timestamp = iso_from_ms(now)

        def invalid(message: str) -> SandboxError:
            return error_class_for(ErrorCode.VALIDATION_FAILED)(
                error_response(
                    ErrorCode.VALIDATION_FAILED, message, http_status=400, timestamp=timestamp
                )
            )

        if not isinstance(body, dict):
            raise invalid("Expected an object")
        op = body.get("op")
        if not isinstance(op, str) or op not in _OPS:
            raise invalid("Unknown op")
        raw_path = body.get("path")
        if not isinstance(raw_path, str) or not raw_path:
            raise invalid("path is required")
        new_path = body.get("newPath")
        if op in ("rename", "move") and (not isinstance(new_path, str) or not new_path):
            raise invalid(f"newPath is required for {op}")
        if "encoding" in body and body["encoding"] not in ("utf-8", "base64"):
            raise invalid("encoding must be utf-8 or base64")
        encoding: str = body.get("encoding") or "utf-8"
        # Beyond the spec: a path the host could not materialize is a malformed request,
        # refused before anything runs (an escaping path stays the operation's 403).
        checked: list[tuple[str, object]] = [("path", raw_path)]
        if op in ("rename", "move"):
            checked.append(("newPath", new_path))
        for name, value in checked:
            try:
                normalize(value)
            except InvalidPathError as exc:
                raise invalid(f"Invalid {name}: {exc.reason}") from None
            except WorkspaceOSError:
                pass
        recursive = _js_truthy(body.get("recursive"))
        operation = Operation.FOR_FILES_OP[op]
        cs = ChangeSet()
        try:
            path = normalize(raw_path).absolute
            result: dict[str, Any]
            if op == "read":
                data, _ = self.read(raw_path)
                binary = looks_binary(data)
                content = (
                    base64.b64encode(data).decode("ascii")
                    if encoding == "base64"
                    else _decode_utf8(data)
                )
                result = {
                    "success": True,
                    "path": path,
                    "content": content,
                    "encoding": encoding,
                    "isBinary": binary,
                    "mimeType": mime_type_for(path, binary),
                    "size": len(data),
                    "timestamp": timestamp,
                }
            elif op == "write":
                raw_content = body.get("content")
                text = "" if raw_content is None else _js_string(raw_content)
                cs = self.write(raw_path, text, now=now, encoding=encoding)
                result = {"success": True, "path": path, "timestamp": timestamp}
            elif op == "mkdir":
                cs = self.mkdir(raw_path, recursive=recursive)
                result = {
                    "success": True,
                    "path": path,
                    "recursive": recursive,
                    "timestamp": timestamp,
                }
            elif op == "delete":
                cs = self.delete(raw_path, recursive=recursive, force=_js_truthy(body.get("force")))
                result = {"success": True, "path": path, "timestamp": timestamp}
            elif op in ("rename", "move"):
                assert isinstance(new_path, str)
                cs = self.rename(raw_path, new_path)
                result = {
                    "success": True,
                    "path": path,
                    "newPath": normalize(new_path).absolute,
                    "timestamp": timestamp,
                }
            elif op == "list":
                include_hidden = _js_truthy(body.get("includeHidden"))
                files = [
                    info
                    for info in (
                        file_info(e, path, sandbox_created_at, now)
                        for e in self.list_dir(raw_path, recursive=recursive)
                    )
                    if include_hidden or not is_hidden(info["relativePath"])
                ]
                result = {
                    "success": True,
                    "path": path,
                    "files": files,
                    "count": len(files),
                    "timestamp": timestamp,
                }
            else:  # exists
                result = {
                    "success": True,
                    "path": path,
                    "exists": self.exists(raw_path),
                    "timestamp": timestamp,
                }
        except WorkspaceOSError as exc:
            code = (
                ErrorCode.FILESYSTEM_ERROR
                if op == "mkdir" and exc.errno not in ("EACCES", "ENOSPC")
                else error_code_for_errno(exc.errno)
            )
            context = {"path": raw_path, "operation": operation, **exc.extra, "errno": exc.errno}
            raise error_class_for(code)(
                error_response(code, exc.message, context, operation=operation, timestamp=timestamp)
            ) from exc
        return result, cs

    # ----- sync helpers (spec 6.3-6.6) -----------------------------------------------

    def dirs(self) -> list[str]:
        """Every directory, absolute, sorted, root excluded."""
        return sorted(p for p, n in self._walk(self._root, ROOT) if isinstance(n, _Dir))

    def manifest(self) -> dict[str, str]:
        """Absolute file path -> ``hash_bytes`` (hashes are cached per file content)."""
        return {
            p: n.content_hash() for p, n in self._walk(self._root, ROOT) if isinstance(n, _File)
        }

    def info(self) -> dict[str, int]:
        """``SandboxInfo.workspace``: ``files`` = entries (files + dirs), ``bytes``."""
        return {"files": self._entries, "bytes": self._bytes}

    def get_files(self, paths: Iterable[str]) -> list[FileEntry]:
        """The ``getFiles`` callback: entries for readable files, unknown paths omitted."""
        out: list[FileEntry] = []
        for p in paths:
            try:
                data, updated_at = self.read(p)
            except WorkspaceOSError:
                continue
            out.append(FileEntry(normalize(p).absolute, data, updated_at))
        return out

    def _ensure_dir(self, np: NormalizedPath, cs: ChangeSet) -> _Dir:
        d = self._root
        prefix = ROOT
        for seg in np.segments:
            prefix = f"{prefix}/{seg}"
            child = d.children.get(seg)
            if not isinstance(child, _Dir):
                child = _Dir()
                self._attach(d, seg, child, prefix, cs)
            d = child
        return d

    def _remove_path(self, path: str, cs: ChangeSet) -> None:
        try:
            np = normalize(path)
        except WorkspaceOSError:
            return
        if np.is_root:
            return
        d = self._root
        for seg in np.segments[:-1]:
            child = d.children.get(seg)
            if not isinstance(child, _Dir):
                return
            d = child
        if np.name in d.children:
            self._detach(d, np.name, np.absolute, cs)

    def apply_sync(
        self,
        dirs: Iterable[str],
        files: Iterable[FileEntry],
        deleted: Iterable[str] | None = None,
        manifest: Mapping[str, str] | None = None,
    ) -> SyncResult:
        """Reconcile in place (spec 6.5), bypassing limits; invalid paths are ignored."""
        cs = ChangeSet()
        dir_list = list(dirs)
        for p in dir_list:
            try:
                np = normalize(p)
            except WorkspaceOSError:
                continue
            self._ensure_dir(np, cs)
        for f in files:
            try:
                np = normalize(f.path)
            except WorkspaceOSError:
                continue
            if np.is_root:
                continue
            parent = self._ensure_dir(
                NormalizedPath(np.segments[:-1], np.absolute.rsplit("/", 1)[0]), cs
            )
            self._attach(parent, np.name, _File(bytes(f.data), int(f.updated_at)), np.absolute, cs)
        if manifest is not None:
            keep = set(manifest)
            for p in [p for p, n in self._walk(self._root, ROOT) if isinstance(n, _File)]:
                if p not in keep:
                    self._remove_path(p, cs)
        elif deleted is not None:
            for p in deleted:
                self._remove_path(p, cs)
        keep_dirs = set(dir_list)
        stale = [
            p for p, n in self._walk(self._root, ROOT) if isinstance(n, _Dir) and p not in keep_dirs
        ]
        for p in sorted(stale, key=lambda x: x.count("/"), reverse=True):
            self._remove_path(p, cs)
        missing: list[str] = []
        if manifest is not None:
            current = self.manifest()
            missing = [p for p, h in manifest.items() if current.get(p) != h]
        return SyncResult(missing, cs)

    # ----- materialization for engines -----------------------------------------------

    def materialize(self, target_dir: Path) -> None:
        """Make ``target_dir`` hold exactly this tree (the engine's ``/workspace`` preopen).

        Files whose on-disk (size, mtime_ns) still match the last materialize/diff and
        whose content is unchanged in the tree are not rewritten; anything on disk that
        is not in the tree (including symlinks and special files) is removed.
        """
        target_dir.mkdir(parents=True, exist_ok=True)
        same_dir = self._mat_dir == target_dir
        baseline = self._mat_files if same_dir else {}
        disk = _scan(target_dir)
        wanted: dict[str, _Node] = {p[len(ROOT) + 1 :]: n for p, n in self._walk(self._root, ROOT)}
        # remove what must go (deepest first so directories empty out)
        for rel in sorted(disk, key=lambda r: r.count("/"), reverse=True):
            kind = disk[rel][0]
            node = wanted.get(rel)
            ok = (kind == "dir" and isinstance(node, _Dir)) or (
                kind == "file" and isinstance(node, _File)
            )
            if not ok:
                _remove_host(host_path(target_dir, rel), kind)
        new_base: dict[str, tuple[int, int, bytes]] = {}
        root_s = str(target_dir)
        for rel, node in wanted.items():
            host_s = host_path_str(root_s, rel)
            if isinstance(node, _Dir):
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
        self._mat_dir = target_dir
        self._mat_files = new_base
        self._mat_time_ns = time.time_ns()

    def _racy(self, mtime_ns: int) -> bool:
        """A file stamped within the racy window of the last baseline may hide a rewrite."""
        return mtime_ns >= self._mat_time_ns - _RACY_WINDOW_NS

    def diff_directory(self, target_dir: Path) -> WorkspaceDiff:
        """Read a materialized directory back after a run and diff it against the tree.

        Never follows symlinks: symlinks, sockets, FIFOs, devices and names that are
        not valid UTF-8 are skipped and reported in ``rejected`` (the next
        ``materialize`` removes them). Only files whose (size, mtime_ns) moved, or that
        were stamped inside the racy window, are re-read. 6.1 limits are evaluated on
        the resulting tree and reported in ``violation`` (checked by ``apply_diff``).
        """
        diff = WorkspaceDiff()
        scan_time = time.time_ns()
        disk = _scan(target_dir, diff.rejected)
        baseline = self._mat_files if self._mat_dir == target_dir else {}
        tree: dict[str, _Node] = {p[len(ROOT) + 1 :]: n for p, n in self._walk(self._root, ROOT)}
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
                isinstance(old, _File)
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
            if isinstance(old, _File) and old.data == data:
                new_base[rel] = (len(data), mtime, old.data)
                continue
            new_base[rel] = (len(data), mtime, data)
            diff.files.append(FileEntry(abs_path, data, 0))
            (diff.updated if isinstance(old, _File) else diff.created).append(abs_path)
        for rel, node in tree.items():
            if isinstance(node, _File) and disk.get(rel, ("",))[0] != "file":
                diff.deleted.append(f"{ROOT}/{rel}")
        diff.dirs.sort()
        diff.dirs_changed = diff.dirs != self.dirs()
        if diff.violation is None:
            if total > MAX_TOTAL_BYTES:
                diff.violation = WorkspaceOSError("ENOSPC", "Workspace exceeds 16 MiB total")
            elif entries > MAX_ENTRIES:
                diff.violation = WorkspaceOSError("ENOSPC", "Workspace exceeds 4096 entries")
        self._mat_dir = target_dir
        self._mat_files = new_base
        self._mat_time_ns = scan_time
        return diff

    def apply_diff(self, diff: WorkspaceDiff, now: int) -> ChangeSet:
        """Apply a run's diff (changed files stamped ``now``); refuses a limit violation.

        Raises the diff's ``violation`` (``WorkspaceOSError`` EFBIG/ENOSPC) without
        touching the tree; the caller reports it and the next ``materialize`` restores
        the directory to the unchanged tree.
        """
        if diff.violation is not None:
            raise diff.violation
        files = [FileEntry(f.path, f.data, now) for f in diff.files]
        result = self.apply_sync(diff.dirs, files, deleted=diff.deleted)
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
                bad_name = _SURROGATE_RE.search(de.name) is not None
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


def _reinsert(children: dict[str, _Node], index: int, name: str, node: _Node) -> None:
    """Put ``name`` back at ``index`` of an insertion-ordered ``children`` dict."""
    items = list(children.items())
    items.insert(index, (name, node))
    children.clear()
    children.update(items)


def _remove_host(path: Path, kind: str) -> None:
    """Remove a host entry without following symlinks."""
    if kind == "dir":
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
