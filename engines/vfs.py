"""The guest's `/workspace`: a tree of directories and files in the engine process's memory.

Nothing a guest does with its files ever touches a host file: both WASI hosts (preview 2
for Python and JavaScript, `engines.components.wasi`; preview 1 for Perl and Ruby,
`engines.preview1`) serve their file calls from a `VirtualFS`. Every operation checks the
limits where the change happens and fails with an errno the guest can catch:

- a file larger than `file_bytes` (EFBIG), more than `total_bytes` in all (ENOSPC), more
  than `entries` files and directories (ENOSPC), a name longer than `name_bytes` or a path
  longer than `path_bytes` (ENAMETOOLONG), a name that is not UTF-8 (EILSEQ);
- the bytes of a file that was unlinked while open count until its last handle closes,
  so unlinking frees nothing early;
- there are no links of any kind: `link` and `symlink` fail (EPERM), and `..` never
  leaves the directory a path starts from (EPERM, as wasmtime's cap-std answers);
- a tree with `denied` limits refuses every path below its root and every listing with
  EACCES: the guest of a deployment with the File API off sees `/workspace` so (spec
  6.7). The root itself is there, so that it stays the guest's current directory.

A run is a transaction: `begin` starts it, every change records the original state of
the paths it touches (once), and `finish` either returns the run's change set (the paths
whose state differs from before the run) or puts those originals back (the spec's
rollback after an error). Between runs the owner brings the tree up to date with
`apply` (the changes others made since), so a run that touches no file costs nothing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

Kind = Literal["file", "directory", "absent"]


class VfsError(Exception):
    """A file operation failed; `errno` is the POSIX name ("ENOENT", "EFBIG", ...)."""

    def __init__(self, errno: str) -> None:
        super().__init__(errno)
        self.errno = errno


@dataclass(frozen=True)
class VfsLimits:
    """What a writable tree may hold (spec 6.1, plus name and path lengths of ours)."""

    file_bytes: int = 1 << 20
    total_bytes: int = 16 << 20
    entries: int = 4096
    """Files and directories, the root excluded."""
    name_bytes: int = 255
    path_bytes: int = 3072
    """Of a path below the root ("a/b"), in UTF-8."""
    denied: bool = False
    """Every use of the tree is refused (EACCES), whatever the other limits say."""


@dataclass(frozen=True, slots=True)
class PathState:
    """What is at `path` (below the root, "a/b"): a file with `data`, a directory, or
    nothing. A change set and a sync are lists of these: each says what a path is now,
    so they can be applied in the order `ordered` gives, whatever happened between."""

    path: str
    kind: Kind
    data: bytes = b""
    mtime_ms: int = 0


@dataclass(frozen=True)
class TreeUpdate:
    """What the owner's tree holds and the engine's may not yet: the states of the paths
    changed since the engine last saw it, or (`replace`) every path of the tree."""

    states: tuple[PathState, ...] = ()
    replace: bool = False


def ordered(states: Iterable[PathState]) -> list[PathState]:
    """Removals deepest first, then directories and files shallowest first: applied in
    this order, each state holds whatever the others say."""
    states = list(states)
    absent = sorted((s for s in states if s.kind == "absent"), key=_depth, reverse=True)
    present = sorted((s for s in states if s.kind != "absent"), key=_depth)
    return absent + present


def _depth(state: PathState) -> int:
    return state.path.count("/")


_inodes = itertools.count(1)


class Node:
    """A file, a directory or a device; `ino` is unique within the process."""

    __slots__ = ("atime_ns", "ino", "mtime_ns", "name", "parent")

    def __init__(self, mtime_ns: int) -> None:
        self.ino = next(_inodes)
        self.mtime_ns = self.atime_ns = mtime_ns
        self.parent: Directory | None = None
        """The directory that holds it; None for a root, and for a node that was removed."""
        self.name = ""


class File(Node):
    __slots__ = ("data", "opens", "revoked")

    def __init__(self, data: bytes = b"", mtime_ns: int = 0) -> None:
        super().__init__(mtime_ns or time.time_ns())
        self.data = bytearray(data)
        self.opens = 0
        """Handles on it: while it has some, its bytes count even once it is unlinked."""
        self.revoked = False
        """Unlinked while open and then given up for room (`VirtualFS.update`): its handles
        can no longer read or write (EBADF)."""


class Directory(Node):
    __slots__ = ("children",)

    def __init__(self, mtime_ns: int = 0) -> None:
        super().__init__(mtime_ns or time.time_ns())
        self.children: dict[str, Node] = {}


class NullDevice(Node):
    """`/dev/null`: reads end at once, writes vanish."""

    __slots__ = ()


@dataclass(frozen=True)
class Found:
    """Where a path leads: the directory holding its last component, that component's
    `name` ("." when the path names `parent` itself), and what is there now."""

    parent: Directory
    name: str
    node: Node | None
    must_be_dir: bool
    """The path ended with "/" or "." (it must name a directory)."""


def file_kind(node: Node) -> Literal["directory", "character-device", "regular-file"]:
    """What a node is, in the words both WASI versions use."""
    if isinstance(node, Directory):
        return "directory"
    if isinstance(node, NullDevice):
        return "character-device"
    return "regular-file"


def existing(found: Found) -> Node:
    """The node a resolved path names (ENOENT, ENOTDIR as the path demands)."""
    if found.node is None:
        raise VfsError("ENOENT")
    if found.must_be_dir and not isinstance(found.node, Directory):
        raise VfsError("ENOTDIR")
    return found.node


_N = TypeVar("_N", bound=Node)


@dataclass(frozen=True)
class _Original:
    """A path's state before the run touched it: the node there (None: nothing), and a
    file's bytes and mtime then."""

    node: Node | None
    data: bytes = b""
    mtime_ns: int = 0

    @property
    def kind(self) -> Kind:
        if isinstance(self.node, File):
            return "file"
        return "absent" if self.node is None else "directory"


class VirtualFS:
    """One tree (the root is the mount point) with its limits and its run's journal."""

    def __init__(self, limits: VfsLimits | None = None, *, writable: bool = True) -> None:
        self.limits = limits or VfsLimits()
        self.writable = writable
        self.root = Directory()
        self.entries = 0
        self.total_bytes = 0
        """Bytes of every file in the tree or still open after it was unlinked."""
        self._orphans: set[File] = set()
        """Files taken out of the tree while open: their bytes count until they close."""
        self._journal: dict[str, _Original] | None = None

    @classmethod
    def devices(cls) -> VirtualFS:
        """A read-only `/dev` holding only `null` (Perl opens it while parsing)."""
        fs = cls(writable=False)
        null = NullDevice(time.time_ns())
        null.parent, null.name = fs.root, "null"
        fs.root.children["null"] = null
        return fs

    # -- paths -----------------------------------------------------------------------------
    def path_of(self, node: Node) -> str | None:
        """`node`'s path below the root ("" for the root); None once it was removed."""
        names: list[str] = []
        while node is not self.root:
            parent = node.parent
            if parent is None:
                return None
            names.append(node.name)
            node = parent
        return "/".join(reversed(names))

    def resolve(self, start: Directory, path: str) -> Found:
        """Follow `path` from directory `start`: "." and empty components are skipped, ".."
        goes back up but never above `start` (EPERM, as cap-std answers for a directory
        descriptor), and an absolute path is EPERM."""
        if self.limits.denied and any(part not in ("", ".") for part in path.split("/")):
            raise VfsError("EACCES")  # only the root itself is there (a guest's cwd)
        if "\0" in path:
            raise VfsError("EINVAL")
        if not path:
            raise VfsError("ENOENT")
        if path.startswith("/"):
            raise VfsError("EPERM")
        if self.path_of(start) is None:
            raise VfsError("ENOENT")  # a directory that was removed holds nothing
        parts = path.split("/")
        must_be_dir = parts[-1] in ("", ".")
        names = [part for part in parts if part not in ("", ".")]
        walked = [start]
        for index, part in enumerate(names):
            if part == "..":
                if len(walked) == 1:
                    raise VfsError("EPERM")
                walked.pop()
                continue
            child = walked[-1].children.get(part)
            if index == len(names) - 1:
                return Found(walked[-1], part, child, must_be_dir)
            if child is None:
                raise VfsError("ENOENT")
            if not isinstance(child, Directory):
                raise VfsError("ENOTDIR")
            walked.append(child)
        return Found(walked[-1], ".", walked[-1], True)

    def listing(self, directory: Directory) -> list[tuple[str, Node]]:
        """The entries of `directory`, by name, as a guest lists them."""
        if self.limits.denied:
            raise VfsError("EACCES")
        return list(directory.children.items())

    def lookup(self, start: Directory, path: str) -> Node:
        """The node `path` names (ENOENT, ENOTDIR as the path demands)."""
        return existing(self.resolve(start, path))

    def _new_name(self, found: Found, *, creates: bool = True) -> str:
        """The checked name of an entry about to be created (or, not `creates`, moved)
        where `found` points."""
        if not self.writable:
            raise VfsError("EPERM")
        name = found.name
        if name == ".":
            raise VfsError("EEXIST")
        parent_path = self.path_of(found.parent)
        if parent_path is None:
            raise VfsError("ENOENT")
        try:
            encoded = name.encode()
        except UnicodeEncodeError:
            raise VfsError("EILSEQ") from None
        if len(encoded) > self.limits.name_bytes:
            raise VfsError("ENAMETOOLONG")
        if len(parent_path.encode()) + 1 + len(encoded) > self.limits.path_bytes:
            raise VfsError("ENAMETOOLONG")
        if creates and self.entries >= self.limits.entries:
            raise VfsError("ENOSPC")
        return name

    # -- handles ---------------------------------------------------------------------------
    def retain(self, node: Node) -> None:
        """A handle was opened on `node`."""
        if isinstance(node, File):
            node.opens += 1

    def release(self, node: Node) -> None:
        """A handle on `node` was closed: a file unlinked meanwhile frees its bytes now."""
        if isinstance(node, File) and node.opens > 0:
            node.opens -= 1
            if node.opens == 0 and node in self._orphans:
                self._orphans.discard(node)
                self.total_bytes -= len(node.data)

    # -- changes the guest makes -----------------------------------------------------------
    def create_file(self, found: Found) -> File:
        """A new empty file where `found` points (which must be free)."""
        name = self._new_name(found)
        if found.node is not None:
            raise VfsError("EEXIST")
        if found.must_be_dir:
            raise VfsError("EISDIR")
        self._touch(found.parent, name)
        return self._attach(found.parent, name, File())

    def mkdir(self, found: Found) -> Directory:
        name = self._new_name(found)
        if found.node is not None:
            raise VfsError("EEXIST")
        self._touch(found.parent, name)
        return self._attach(found.parent, name, Directory())

    def rmdir(self, found: Found) -> None:
        node = found.node
        if found.name == ".":
            raise VfsError("EBUSY" if node is self.root else "EINVAL")
        if node is None:
            raise VfsError("ENOENT")
        if not isinstance(node, Directory):
            raise VfsError("ENOTDIR")
        self._check_writable()
        if node.children:
            raise VfsError("ENOTEMPTY")
        self._touch(found.parent, found.name)
        self._detach(found.parent, found.name)

    def unlink(self, found: Found) -> None:
        node = found.node
        if node is None:
            raise VfsError("ENOENT")
        if isinstance(node, Directory):
            raise VfsError("EISDIR")
        if found.must_be_dir:
            raise VfsError("ENOTDIR")
        self._check_writable()
        self._touch(found.parent, found.name)
        self._detach(found.parent, found.name)

    def rename(self, source: Found, target: Found) -> None:
        """POSIX rename within this tree: a file replaces a file, a directory an empty
        directory; never a directory into itself."""
        node = source.node
        if node is None:
            raise VfsError("ENOENT")
        if source.name == "." or target.name == ".":
            raise VfsError("EBUSY" if self.root in (source.node, target.node) else "EINVAL")
        self._check_writable()
        existing = target.node
        if existing is node:
            return
        if isinstance(node, Directory):
            ancestor: Directory | None = target.parent
            while ancestor is not None:
                if ancestor is node:
                    raise VfsError("EINVAL")
                ancestor = ancestor.parent
            if existing is not None and not isinstance(existing, Directory):
                raise VfsError("ENOTDIR")
        elif isinstance(existing, Directory):
            raise VfsError("EISDIR")
        elif source.must_be_dir or target.must_be_dir:
            raise VfsError("ENOTDIR")
        if isinstance(existing, Directory) and existing.children:
            raise VfsError("ENOTEMPTY")
        self._new_name(target, creates=False)
        self._check_moved_paths(target.parent, target.name, node)
        self._touch_subtree(source.parent, source.name, node)
        self._touch(target.parent, target.name)
        self._touch_new_places(target.parent, target.name, node)
        if existing is not None:
            self._detach(target.parent, target.name)
        self._attach(target.parent, target.name, self._detach(source.parent, source.name))

    def _check_moved_paths(self, parent: Directory, name: str, node: Node) -> None:
        """Every path of the moved subtree must stay within `path_bytes`."""
        base = len((self.path_of(parent) or "").encode()) + 1 + len(name.encode())
        if base + _longest_below(node) > self.limits.path_bytes:
            raise VfsError("ENAMETOOLONG")

    def check_write(self, file: File | NullDevice, offset: int, length: int) -> None:
        """Raise what writing `length` bytes at `offset` would (before they are read)."""
        if isinstance(file, File) and length:
            self._resize_check(file, max(offset + length, len(file.data)))

    def write(self, file: File | NullDevice, offset: int, data: bytes) -> int:
        """Write `data` at `offset` (growing the file with zeroes before it if need be)."""
        if isinstance(file, NullDevice) or not data:
            return len(data)
        end = offset + len(data)
        self._resize_check(file, max(end, len(file.data)))
        self._touch_file(file)
        size = len(file.data)
        if offset > size:
            file.data.extend(bytes(offset - size))
        file.data[offset:end] = data
        self._grew(file, size)
        file.mtime_ns = time.time_ns()
        return len(data)

    def truncate(self, file: File, size: int) -> None:
        self._resize_check(file, size)
        self._touch_file(file)
        before = len(file.data)
        if size < before:
            del file.data[size:]
        else:
            file.data.extend(bytes(size - before))
        self._grew(file, before)
        file.mtime_ns = time.time_ns()

    def read(self, node: Node, offset: int, length: int) -> bytes:
        with self.view(node, offset, length) as data:
            return bytes(data)

    def view(self, node: Node, offset: int, length: int) -> memoryview:
        """The bytes `read` would copy, without a copy: release it (`with`) before the
        file can change."""
        if isinstance(node, Directory):
            raise VfsError("EISDIR")
        if not isinstance(node, File):
            return memoryview(bytearray())
        if node.revoked:
            raise VfsError("EBADF")
        node.atime_ns = time.time_ns()
        return memoryview(node.data)[offset : offset + length]

    def _check_writable(self) -> None:
        if not self.writable:
            raise VfsError("EPERM")

    def _resize_check(self, file: File, size: int) -> None:
        self._check_writable()
        if file.revoked:
            raise VfsError("EBADF")
        if size > self.limits.file_bytes:
            raise VfsError("EFBIG")
        if self.total_bytes - len(file.data) + size > self.limits.total_bytes:
            raise VfsError("ENOSPC")

    def _grew(self, file: File, before: int) -> None:
        self.total_bytes += len(file.data) - before

    # -- the tree's bookkeeping --------------------------------------------------------------
    def _attach(self, parent: Directory, name: str, node: _N) -> _N:
        """Put `node` (new, or taken out before) under `parent`: its bytes count again,
        but those of its files that stayed counted while they were out and open."""
        node.parent, node.name = parent, name
        parent.children[name] = node
        parent.mtime_ns = time.time_ns()
        for file in _files(node):
            if file in self._orphans:
                self._orphans.discard(file)
            else:
                self.total_bytes += len(file.data)
        self.entries += _count(node)
        return node

    def _detach(self, parent: Directory, name: str) -> Node:
        """Take `name` out of `parent`: its bytes stop counting, but an open file's, which
        count until it closes."""
        node = parent.children.pop(name)
        parent.mtime_ns = time.time_ns()
        for file in _files(node):
            if file.opens:
                self._orphans.add(file)
            else:
                self.total_bytes -= len(file.data)
        self.entries -= _count(node)
        node.parent = None
        return node

    def _reclaim(self) -> None:
        """After changes the limits did not check (updates from the owner, a rollback),
        give up files held open after they were taken out, largest first, until the tree
        is within its total again: their handles fail from then on."""
        for orphan in sorted(self._orphans, key=lambda file: len(file.data), reverse=True):
            if self.total_bytes <= self.limits.total_bytes:
                return
            self._orphans.discard(orphan)
            self.total_bytes -= len(orphan.data)
            orphan.data = bytearray()
            orphan.revoked = True

    # -- a run's transaction -----------------------------------------------------------------
    def begin(self) -> None:
        """Start recording what the run changes."""
        self._journal = {}

    def finish(self, *, keep: bool) -> list[PathState]:
        """End the run: keep its changes and return them (the paths that differ from before
        the run, in `ordered` order), or put every touched path back as it was, with the
        same nodes (a handle opened before the run sees its file as it was)."""
        journal, self._journal = self._journal, None
        if not journal:
            return []
        if not keep:
            self._roll_back(journal)
            return []
        changes = []
        for path, original in journal.items():
            now = self.state(path)
            if now.kind != original.kind or (now.kind == "file" and now.data != original.data):
                changes.append(now)
        return ordered(changes)

    def _roll_back(self, journal: dict[str, _Original]) -> None:
        """Take out whatever is not the original node at each touched path (deepest
        first), then put the originals back (shallowest first) with their bytes."""
        by_depth = sorted(journal, key=lambda path: path.count("/"))
        for path in reversed(by_depth):
            current = self._at(path)
            if current is not None and current is not journal[path].node:
                parent = current.parent
                assert parent is not None
                self._detach(parent, current.name)
        for path in by_depth:
            original = journal[path]
            node = original.node
            if node is None:
                continue
            if self._at(path) is not node:
                names = path.split("/")
                parent = self._directory_at(names[:-1], create=True)
                assert parent is not None
                if names[-1] in parent.children:
                    self._detach(parent, names[-1])
                if node.parent is not None:  # still attached elsewhere: move it back
                    self._detach(node.parent, node.name)
                self._attach(parent, names[-1], node)
            if isinstance(node, File) and node.data != original.data:
                before = len(node.data)
                node.data[:] = original.data
                self._grew(node, before)
            node.mtime_ns = original.mtime_ns
        self._reclaim()

    def _touch(self, parent: Directory, name: str) -> None:
        """Record what `name` in `parent` holds before the run first changes it."""
        if self._journal is None:
            return
        parent_path = self.path_of(parent)
        if parent_path is None:
            return  # below a removed directory: not part of the tree
        path = f"{parent_path}/{name}" if parent_path else name
        if path in self._journal:
            return
        node = parent.children.get(name)
        if isinstance(node, File):
            self._journal[path] = _Original(node, bytes(node.data), node.mtime_ns)
        else:
            self._journal[path] = _Original(node, b"", 0 if node is None else node.mtime_ns)

    def _touch_file(self, file: File) -> None:
        if self._journal is not None and file.parent is not None:
            self._touch(file.parent, file.name)

    def _touch_subtree(self, parent: Directory, name: str, node: Node) -> None:
        """`_touch` every path of a subtree that is about to move away."""
        if self._journal is None:
            return
        stack: list[tuple[Directory, str, Node]] = [(parent, name, node)]
        while stack:  # not recursion: the path limit allows about 1,500 levels
            parent, name, node = stack.pop()
            self._touch(parent, name)
            if isinstance(node, Directory):  # reversed: popped in order, as recursion went
                stack.extend(
                    reversed(
                        [(node, child_name, child) for child_name, child in node.children.items()]
                    )
                )

    def _touch_new_places(self, parent: Directory, name: str, node: Node) -> None:
        """Record the paths below `name` in `parent` that a subtree moving there will
        take: whatever the run did not touch there yet held nothing before it."""
        if self._journal is None or not isinstance(node, Directory):
            return
        prefix = self.path_of(parent)
        if prefix is None:
            return
        base = f"{prefix}/{name}" if prefix else name
        for relative, _ in _walk(node):
            self._journal.setdefault(f"{base}/{relative}", _Original(None))

    # -- state from and for the owner --------------------------------------------------------
    def state(self, path: str) -> PathState:
        """What `path` holds now."""
        node = self._at(path)
        if isinstance(node, File):
            return PathState(path, "file", bytes(node.data), node.mtime_ns // 1_000_000)
        if isinstance(node, Directory):
            return PathState(path, "directory")
        return PathState(path, "absent")

    def files(self) -> dict[str, bytes]:
        """Every file's bytes by path (for tests and tools)."""
        return {path: bytes(node.data) for path, node in self.walk() if isinstance(node, File)}

    def walk(self) -> Iterator[tuple[str, Node]]:
        """Every entry with its path, a directory before its children."""
        return _walk(self.root)

    def update(self, update: TreeUpdate) -> None:
        """Bring the tree up to date with what the owner says its paths hold now (checked
        by the owner already: no limits here); open handles keep their nodes."""
        if update.replace:
            for name in list(self.root.children):
                self._detach(self.root, name)
        self._put(update.states)
        self._reclaim()

    def _put(self, states: Iterable[PathState]) -> None:
        for state in ordered(states):
            names = [name for name in state.path.split("/") if name]
            if not names:
                continue
            parent = self._directory_at(names[:-1], create=state.kind != "absent")
            if parent is None:
                continue
            name = names[-1]
            node = parent.children.get(name)
            mtime_ns = state.mtime_ms * 1_000_000
            if state.kind == "absent":
                if node is not None:
                    self._detach(parent, name)
            elif state.kind == "directory":
                if not isinstance(node, Directory):
                    if node is not None:
                        self._detach(parent, name)
                    self._attach(parent, name, Directory(mtime_ns))
            elif isinstance(node, File):  # the same file: its handles see the new bytes
                before = len(node.data)
                node.data[:] = state.data
                self._grew(node, before)
                node.mtime_ns = mtime_ns or node.mtime_ns
            else:
                if node is not None:
                    self._detach(parent, name)
                self._attach(parent, name, File(state.data, mtime_ns))

    def _at(self, path: str) -> Node | None:
        node: Node = self.root
        for name in path.split("/"):
            if not name:
                continue
            if not isinstance(node, Directory):
                return None
            child = node.children.get(name)
            if child is None:
                return None
            node = child
        return node

    def _directory_at(self, names: list[str], *, create: bool) -> Directory | None:
        directory = self.root
        for name in names:
            child = directory.children.get(name)
            if not isinstance(child, Directory):
                if not create:
                    return None
                if child is not None:
                    self._detach(directory, name)
                child = self._attach(directory, name, Directory())
            directory = child
        return directory


@dataclass(frozen=True)
class Mount:
    """A tree the guest sees at `guest_path` (a preopen)."""

    guest_path: str
    fs: VirtualFS


def _walk(top: Directory) -> Iterator[tuple[str, Node]]:
    """Every entry below `top` with its path relative to it, a directory before its
    children. With a stack, not recursion (as every walk here): the path limit allows
    about 1,500 levels."""
    stack: list[tuple[str, Directory]] = [("", top)]
    while stack:
        prefix, directory = stack.pop()
        for name, child in directory.children.items():
            path = f"{prefix}{name}"
            yield path, child
            if isinstance(child, Directory):
                stack.append((f"{path}/", child))


def _files(node: Node) -> Iterator[File]:
    """Every file of a subtree."""
    if isinstance(node, File):
        yield node
    elif isinstance(node, Directory):
        for _, child in _walk(node):
            if isinstance(child, File):
                yield child


def _count(node: Node) -> int:
    """Entries of a subtree."""
    if isinstance(node, Directory):
        return 1 + sum(1 for _ in _walk(node))
    return 1


def _longest_below(node: Node) -> int:
    """Bytes the longest path below `node` adds to `node`'s own path."""
    if not isinstance(node, Directory):
        return 0
    return max((1 + len(relative.encode()) for relative, _ in _walk(node)), default=0)
