"""Resolving a guest path beneath a directory descriptor without ever leaving it.

The walk is openat-style: it holds a file descriptor for each directory it descends
into and opens one component at a time with `O_NOFOLLOW`, so the kernel never follows
a symlink or `..` for us and no check can be raced by a rename. `..` pops a directory
it entered (never past the start), and a symlink is followed only by the walk itself:
its target is read and walked the same way, so an absolute target or one that climbs
out is refused, like every absolute path (`NOTPERM`, as wasmtime's cap-std does).

The result is the directory that holds the final component (as a descriptor) and that
component's name, which the caller operates on with a `*at` call that does not follow
symlinks either.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass

from engines.decomposed.wasi.errors import FsError, WasiErrno

MAX_SYMLINKS = 40
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Resolved:
    """The directory holding the final component (`parent`, a descriptor the caller must
    close) and the component's `name` ("." when the path names that directory)."""

    parent: int
    names: list[str]
    """The parent's path beneath the preopen, one name per component."""
    name: str
    must_be_dir: bool
    """The path ended with "/" or "." (it must name a directory)."""

    @property
    def path(self) -> str:
        """The final component's path beneath the preopen ("" for the preopen itself)."""
        parts = self.names if self.name == "." else [*self.names, self.name]
        return "/".join(parts)

    def close(self) -> None:
        os.close(self.parent)


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _symlink_target(directory: int, name: str) -> str | None:
    """The target of `name` in `directory` if it is a symlink, else None."""
    try:
        status = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISLNK(status.st_mode):
        return None
    target = os.readlink(name, dir_fd=directory)
    if target.startswith("/"):
        raise FsError(WasiErrno.NOTPERM)
    if not target:
        raise FsError(WasiErrno.NOENT)
    return target


def resolve(start: int, start_names: list[str], path: str, *, follow: bool) -> Resolved:
    """Resolve `path` beneath the directory descriptor `start` (whose own path beneath
    the preopen is `start_names`); `follow`: follow a symlink in the final component."""
    if "\0" in path:
        raise FsError(WasiErrno.INVAL)
    if not path:
        raise FsError(WasiErrno.NOENT)
    if path.startswith("/"):
        raise FsError(WasiErrno.NOTPERM)
    last = path.rsplit("/", 1)[-1]
    must_be_dir = last in ("", ".")
    pending = deque(_components(path))
    stack = [os.dup(start)]
    names = list(start_names)
    links = 0
    try:
        while True:
            if not pending:  # the path names the directory reached so far
                return Resolved(stack.pop(), names[:], ".", True)
            part = pending.popleft()
            if part == "..":
                if len(stack) == 1:
                    raise FsError(WasiErrno.NOTPERM)
                os.close(stack.pop())
                names.pop()
                continue
            if not pending:
                target = _symlink_target(stack[-1], part) if follow or must_be_dir else None
                if target is None:
                    return Resolved(stack.pop(), names[:], part, must_be_dir)
            else:
                try:
                    stack.append(os.open(part, DIRECTORY_FLAGS, dir_fd=stack[-1]))
                    names.append(part)
                    continue
                except OSError as error:
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise
                    target = _symlink_target(stack[-1], part)
                    if target is None:
                        raise
            links += 1
            if links > MAX_SYMLINKS:
                raise FsError(WasiErrno.LOOP)
            if target.endswith("/") and not pending:
                must_be_dir = True
            pending.extendleft(reversed(_components(target)))
    finally:
        for descriptor in stack:
            os.close(descriptor)
