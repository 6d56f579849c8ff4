"""``/workspace`` path normalization (spec 6.2) and the workspace errno exception."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ROOT", "NormalizedPath", "WorkspaceOSError", "normalize"]

ROOT: Final = "/workspace"


class WorkspaceOSError(Exception):
    """A workspace failure carrying a Node-style errno string (``"ENOENT"``, ...).

    ``extra`` holds additional error-context fields (e.g. ``maxSize``/``actualSize``
    for ``EFBIG``) that the files API merges into the ``ErrorResponse`` context.
    """

    def __init__(self, errno: str, message: str, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.message = message
        self.extra: dict[str, Any] = dict(extra) if extra else {}

    def __repr__(self) -> str:
        return f"WorkspaceOSError({self.errno!r}, {self.message!r})"


@dataclass(frozen=True, slots=True)
class NormalizedPath:
    """A path inside ``/workspace``: its segments below the root and its absolute form."""

    segments: tuple[str, ...]
    absolute: str

    @property
    def is_root(self) -> bool:
        """True for ``/workspace`` itself."""
        return not self.segments

    @property
    def name(self) -> str:
        """Last segment (``""`` for the root)."""
        return self.segments[-1] if self.segments else ""

    @property
    def relative(self) -> str:
        """Path relative to ``/workspace`` (``""`` for the root)."""
        return "/".join(self.segments)


def normalize(path: object, cwd: str = ROOT) -> NormalizedPath:
    """Resolve ``path`` against ``cwd`` and confine it to ``/workspace`` (spec 6.2).

    Raises ``WorkspaceOSError`` ``ENOENT`` "Path is required" for an empty or non-string
    path and ``EACCES`` "Path escapes /workspace: <path>" for anything outside.
    """
    if not isinstance(path, str) or not path:
        raise WorkspaceOSError("ENOENT", "Path is required")
    base = path if path.startswith("/") else f"{cwd}/{path}"
    parts: list[str] = []
    for seg in base.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not parts:
                raise WorkspaceOSError("EACCES", f"Path escapes /workspace: {path}")
            parts.pop()
            continue
        parts.append(seg)
    if not parts or parts[0] != "workspace":
        raise WorkspaceOSError("EACCES", f"Path escapes /workspace: {path}")
    segments = tuple(parts[1:])
    absolute = f"{ROOT}/{'/'.join(segments)}" if segments else ROOT
    return NormalizedPath(segments, absolute)
