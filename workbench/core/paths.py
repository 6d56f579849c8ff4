"""``/workspace`` path normalization (spec 6.2) and the workspace errno exception.

Beyond the spec, a path must be one a guest could make: no NUL, valid Unicode (no lone
surrogates: names are UTF-8 in every engine), every segment at most 255 bytes of UTF-8 and
the whole path at most ``MAX_PATH_BYTES``, the limits the engines enforce on guest writes
(``workspace.GUEST_LIMITS``). The real system sets no length limit; ours keeps every name
and path bounded, whoever made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "MAX_PATH_BYTES",
    "MAX_SEGMENT_BYTES",
    "ROOT",
    "InvalidPathError",
    "NormalizedPath",
    "WorkspaceOSError",
    "normalize",
]

ROOT: Final = "/workspace"
MAX_SEGMENT_BYTES: Final = 255
"""NAME_MAX of Linux and macOS file systems."""
MAX_PATH_BYTES: Final = 3072
"""Of the absolute ``/workspace/...`` path."""


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


class InvalidPathError(WorkspaceOSError):
    """A path the host could not materialize (``EINVAL``); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__("EINVAL", f"Invalid path: {reason}")
        self.reason = reason


def _check_names(path: str) -> None:
    """Raise ``InvalidPathError`` unless every segment of ``path`` is a name a guest could make."""
    if "\0" in path:
        raise InvalidPathError("it contains a NUL character")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPathError("it is not valid Unicode (a lone surrogate)") from None
    if len(encoded) > MAX_SEGMENT_BYTES and max(map(len, encoded.split(b"/"))) > MAX_SEGMENT_BYTES:
        raise InvalidPathError(f"a segment is longer than {MAX_SEGMENT_BYTES} bytes")


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
    path, ``InvalidPathError`` (``EINVAL``) for a path the host cannot materialize, and
    ``EACCES`` "Path escapes /workspace: <path>" for anything outside.
    """
    if not isinstance(path, str) or not path:
        raise WorkspaceOSError("ENOENT", "Path is required")
    _check_names(path)
    base = path if path.startswith("/") else f"{cwd}/{path}"
    pieces = base.split("/")
    if ".." in pieces:
        parts: list[str] = []
        for seg in pieces:
            if seg in ("", "."):
                continue
            if seg == "..":
                if not parts:
                    raise WorkspaceOSError("EACCES", f"Path escapes /workspace: {path}")
                parts.pop()
                continue
            parts.append(seg)
    else:  # the common case: one comprehension, no branches per segment
        parts = [seg for seg in pieces if seg and seg != "."]
    if not parts or parts[0] != "workspace":
        raise WorkspaceOSError("EACCES", f"Path escapes /workspace: {path}")
    segments = tuple(parts[1:])
    absolute = f"{ROOT}/{'/'.join(segments)}" if segments else ROOT
    if len(absolute) > MAX_PATH_BYTES // 4 and len(absolute.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidPathError(f"it is longer than {MAX_PATH_BYTES} bytes")
    return NormalizedPath(segments, absolute)
