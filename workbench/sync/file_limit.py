"""What a pass reads of the folder: only what the sandbox can hold (spec 6.1 limits),
checked on the local side before anything is read or sent.

A file over the per-file limit is never read. The changed files are read smallest first
(so that as many as possible land), and only while they fit in the room the workspace
has left for the pass: its 16 MiB total less what the sync knows stays there. A pass so
holds at most 16 MiB of file data however large the folder is (a sparse file counts by
its size, not by its blocks on disk), and reads each file once, for both its digest and
its upload. What is not read is reported per path, and announced in one event that names
the files and their total.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from workbench.protocol import errors
from workbench.sync.events import EmitEvent, EventKind, SyncIssue, SyncReport
from workbench.sync.local import LocalEntry, read_regular_file

__all__ = ["MAX_FILE_BYTES", "MAX_WORKSPACE_BYTES", "read_what_fits"]

MAX_FILE_BYTES: Final = 1_048_576
"""Spec 6.1 per-file limit, checked before reading."""
MAX_WORKSPACE_BYTES: Final = 16 * 1_048_576
"""Spec 6.1 limit of a sandbox's whole workspace, checked before reading."""
_NAMED_IN_EVENT: Final = 5
"""Files an event names before it says how many more there are."""


def read_what_fits(
    root: Path,
    changed: Iterable[tuple[str, LocalEntry]],
    room: int,
    report: SyncReport,
    emit: EmitEvent,
) -> dict[str, bytes]:
    """The bytes of the `changed` files that fit: each within the per-file limit, all
    together within `room` bytes. Files too large or without room are reported (not
    read, or dropped when they grew since the scan); files that vanished, are no longer
    regular or now lead outside the folder are left out silently (a later event settles
    those)."""
    contents: dict[str, bytes] = {}
    too_large: list[tuple[str, str]] = []
    no_room: list[tuple[str, int]] = []
    used = 0
    for relative, entry in sorted(changed, key=lambda item: (item[1].size, item[0])):
        if entry.size > MAX_FILE_BYTES:
            too_large.append((relative, f"{entry.size} bytes"))
            continue
        if used + entry.size > room:
            no_room.append((relative, entry.size))
            continue
        data = read_regular_file(root, relative, MAX_FILE_BYTES)
        if data is None:
            continue
        if len(data) > MAX_FILE_BYTES:  # it grew since the scan
            too_large.append((relative, f"over {MAX_FILE_BYTES} bytes"))
        elif used + len(data) > room:
            no_room.append((relative, len(data)))
        else:
            used += len(data)
            contents[relative] = data
    _refuse(
        report,
        emit,
        errors.ErrorCode.FILE_TOO_LARGE,
        [
            (
                relative,
                f"{relative} is {size_text}; the sandbox allows at most {MAX_FILE_BYTES} per file",
            )
            for relative, size_text in too_large
        ],
        f"over the sandbox's limit of {_mib(MAX_FILE_BYTES)} per file",
    )
    _refuse(
        report,
        emit,
        errors.ErrorCode.NO_SPACE,
        [
            (
                relative,
                f"{relative} is {size} bytes; no room is left for it in the sandbox's workspace",
            )
            for relative, size in no_room
        ],
        f"{_mib(sum(size for _, size in no_room))} in all; the sandbox's workspace holds "
        f"{_mib(MAX_WORKSPACE_BYTES)}, {_mib(room)} of it left for this pass",
        lead="not uploaded for lack of room",
    )
    return contents


def _refuse(
    report: SyncReport,
    emit: EmitEvent,
    code: str,
    refused: list[tuple[str, str]],
    detail: str,
    *,
    lead: str = "not uploaded",
) -> None:
    """Report each refused path (path, message) with `code`, and emit one event naming
    them all: `lead: names, detail`."""
    if not refused:
        return
    for relative, message in refused:
        report.errors.append(SyncIssue(relative, code, message))
    emit(EventKind.ERROR, f"{lead}: {_names([relative for relative, _ in refused])}, {detail}")


def _mib(size: int) -> str:
    return f"{size / 1_048_576:.1f} MiB"


def _names(paths: list[str]) -> str:
    """`3 files (a, b, c)`, naming the first few only."""
    named = ", ".join(paths[:_NAMED_IN_EVENT])
    more = len(paths) - _NAMED_IN_EVENT
    count = f"{len(paths)} file" + ("s" if len(paths) > 1 else "")
    return f"{count} ({named}" + (f" and {more} more)" if more > 0 else ")")
