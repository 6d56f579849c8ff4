"""The per-file size limit (spec 6.1), checked on the local side before anything is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from workbench.protocol import errors
from workbench.sync.events import SyncIssue, SyncReport
from workbench.sync.local import LocalEntry, read_regular_file

__all__ = ["MAX_FILE_BYTES", "read_within_limit"]

MAX_FILE_BYTES: Final = 1_048_576
"""Spec 6.1 per-file limit, checked before sending."""


def read_within_limit(
    root: Path, relative: str, entry: LocalEntry, report: SyncReport
) -> bytes | None:
    """The file's bytes; None when it is too large (reported), vanished, no longer a
    regular file or now reached through a symlink leaving the folder (a later event
    settles those)."""
    too_large = entry.size > MAX_FILE_BYTES
    data = None if too_large else read_regular_file(root, relative, MAX_FILE_BYTES)
    if data is not None and len(data) <= MAX_FILE_BYTES:
        return data
    if too_large or data is not None:
        size = f"{entry.size} bytes" if data is None else f"over {MAX_FILE_BYTES} bytes"
        report.errors.append(
            SyncIssue(
                relative,
                errors.ErrorCode.FILE_TOO_LARGE,
                f"{relative} is {size}; the sandbox allows at most {MAX_FILE_BYTES} per file",
            )
        )
    return None
