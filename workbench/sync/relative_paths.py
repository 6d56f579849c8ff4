"""Folder-relative paths (`a/b.txt`; '' is the folder itself) as a sync compares them, and
where they land under `dest` in the sandbox."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

from workbench.core.host_paths import HostPathError, checked_relative

__all__ = [
    "ancestors",
    "is_plain",
    "is_under",
    "is_under_any",
    "parent_of",
    "path_segments",
    "remote_path",
    "top_level",
]


def remote_path(dest: str, relative: str) -> str:
    """`/workspace/dest` + `a/b.txt`."""
    return f"{dest}/{relative}" if relative else dest


def parent_of(relative: str) -> str:
    return relative.rpartition("/")[0]


def is_under(relative: str, prefix: str) -> bool:
    return not prefix or relative == prefix or relative.startswith(prefix + "/")


def is_under_any(relative: str, tops: Collection[str]) -> bool:
    """`is_under` one of `tops` (a set: one look per level of `relative`)."""
    while True:
        if relative in tops:
            return True
        if not relative:
            return False
        relative = parent_of(relative)


def path_segments(relative: str) -> list[str]:
    """Sort key that puts a directory right before its contents (`a`, `a/b`, `a-b`)."""
    return relative.split("/")


def ancestors(relative: str) -> Iterator[str]:
    """`a/b/c` → `a/b`, `a`."""
    parent = parent_of(relative)
    while parent:
        yield parent
        parent = parent_of(parent)


def is_plain(relative: str) -> bool:
    """Whether a path from the sandbox is one we can reason about (no `..`, not absolute)."""
    try:
        checked_relative(relative)
    except HostPathError:
        return False
    return True


def top_level(paths: Iterable[str]) -> list[str]:
    """The paths not inside another of the paths, sorted."""
    tops: list[str] = []
    for path in sorted(paths, key=path_segments):  # a path's children follow it
        if not tops or not is_under(path, tops[-1]):
            tops.append(path)
    return tops
