"""Paths of a sandbox's `/workspace` as the tree's dialogs build them: one typed name under a
directory of the tree, checked before any request (the API checks again)."""

from __future__ import annotations

from pathlib import PurePosixPath

from workbench.api import neutralise

WORKSPACE = "/workspace"
MAX_NAME_BYTES = 255
"""A name's limit in the files API (a path segment)."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a new file or folder, or None: it is one path segment, so
    the path made from it stays in the directory it is typed for."""
    if not name:
        return "type a name"
    if not name.strip():
        return "a name, not only spaces"
    if "/" in name:
        return "a name, not a path: no /"
    if name in (".", ".."):
        return f"{name} names a directory that exists already"
    if any(character in "\t\n" for character in name) or neutralise(name) != name:
        return "no control characters"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return "not valid text"
    if size > MAX_NAME_BYTES:
        return f"at most {MAX_NAME_BYTES} bytes (this one has {size})"
    return None


def child_path(directory: str, name: str) -> str:
    """`directory/name` for a `name` that `name_problem` accepts."""
    if name_problem(name) is not None or not is_within(directory, WORKSPACE):
        raise ValueError(f"not a name under {WORKSPACE}: {name!r} in {directory!r}")
    return f"{directory.rstrip('/')}/{name}"


def parent_path(path: str) -> str:
    return str(PurePosixPath(path).parent)


def base_name(path: str) -> str:
    return PurePosixPath(path).name


def is_within(path: str, directory: str) -> bool:
    """`path` is `directory` or lies under it."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def moved_path(path: str, old: str, new: str) -> str:
    """Where `path` is after `old` was renamed to `new` (itself, when not under `old`)."""
    if not is_within(path, old):
        return path
    return new + path[len(old) :]
