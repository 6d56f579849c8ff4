"""Host paths built from untrusted names: the one place that joins them, and checks.

Synced file names and sandbox ids come from outside (a sandbox's own files never touch
the host: they live in SQLite and in the engines' memory). None of them may pick a host
location: a per-sandbox file is named opaquely (a digest of the id), and every relative
path is joined below its root only after each segment is checked to be one plain name.
The check is lexical (no filesystem access); symlinks are handled where files are opened
(never followed).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

__all__ = ["HostPathError", "checked_relative", "host_path", "opaque_name"]

_FORBIDDEN_SEGMENTS: Final = frozenset({"", ".", ".."})


class HostPathError(ValueError):
    """A name that would leave its root (or is not a plain name) was refused."""


def opaque_name(key: str) -> str:
    """A directory name for `key` that says nothing about it and cannot be a path trick."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:32]


def checked_relative(relative: str) -> str:
    """`relative` itself once every '/'-separated segment is a plain name: not empty,
    `.` or `..`, and no NUL anywhere; an absolute path is refused."""
    if not relative or relative[0] == "/" or "\0" in relative:
        raise HostPathError(f"not a relative path below its root: {relative!r}")
    if not _FORBIDDEN_SEGMENTS.isdisjoint(relative.split("/")):
        raise HostPathError(f"path segment would leave its root: {relative!r}")
    return relative


def host_path(root: Path, relative: str) -> Path:
    """`root/relative`, refusing anything that could resolve outside `root` lexically."""
    return root / checked_relative(relative)
