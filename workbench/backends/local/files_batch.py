"""`POST /files/batch` (an extension, docs/gateway-protocol.md): many changing files-API
requests in one, applied in order on one workspace.

Each entry succeeds or fails on its own with exactly the answer `POST /files` would give
it, or fails its precondition (`PRECONDITION_FAILED`, not applied). The caller stores the
changes of every applied entry in one transaction, so a failed commit fails the request as
a whole and takes every entry back out of the tree.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Literal

from workbench.backends.local.files_api import (
    FILES_OPS,
    FilesBody,
    invalid_request,
    parse_files_body,
    run_files_op,
)
from workbench.core.changes import Change, ChangeSet
from workbench.core.paths import WorkspaceOSError, normalize
from workbench.core.workspace import Workspace
from workbench.protocol.errors import ErrorCode, SandboxError, error_class_for, error_response
from workbench.protocol.http import FILES_BATCH_MAX_ENTRIES, validation_error
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import BatchEntryResult, FilesBatchResult, FileState, FileVersion

__all__ = ["BATCH_OPS", "files_batch"]

BATCH_OPS: Final = ("write", "mkdir", "delete", "rename", "move")
"""The ops a batch may hold: the ones that change the tree."""

Precondition = FileVersion | Literal["absent"] | None
"""`ifMatch`'s expected file, "absent" for `ifNoneMatch: "*"`, or None (no precondition)."""


async def files_batch(
    workspace: Workspace, body: dict[str, Any], *, now: int, sandbox_created_at: str
) -> tuple[FilesBatchResult, ChangeSet]:
    """Apply every entry of a batch body in order; the answer and the changes to store.

    Raises VALIDATION_FAILED for a body that is not a batch (no `entries` array, 400) or
    holds more than `FILES_BATCH_MAX_ENTRIES` (413): then nothing is applied. Between
    entries it lets other requests run (a thousand renames of a large directory take
    seconds); the caller holds the sandbox's turn, so none of them sees this tree.
    """
    entries = body.get("entries")
    if not isinstance(entries, list):
        raise validation_error("entries must be an array")
    if len(entries) > FILES_BATCH_MAX_ENTRIES:
        raise validation_error(
            f"Too many entries: at most {FILES_BATCH_MAX_ENTRIES} per batch", 413
        )
    timestamp = iso_from_ms(now)
    results: list[BatchEntryResult] = []
    changes: dict[str, Change] = {}
    """One change per path, the last one winning: what the entries left."""
    for entry in entries:
        await asyncio.sleep(0)
        try:
            parsed, precondition = _parse_entry(entry, timestamp)
            if precondition is not None:
                _check_precondition(
                    workspace, parsed, precondition, timestamp, sandbox_created_at, now
                )
            answer, applied = run_files_op(
                workspace, parsed, now=now, sandbox_created_at=sandbox_created_at
            )
        except SandboxError as error:
            results.append(BatchEntryResult(False, error=error.to_json()))
            continue
        changes.update((change.path, change) for change in applied)
        results.append(BatchEntryResult(True, result=answer.to_json()))
    return FilesBatchResult(results, timestamp), ChangeSet(changes.values())


def _parse_entry(entry: object, timestamp: str) -> tuple[FilesBody, Precondition]:
    """The entry's `POST /files` validation, with the batch's rules first: a changing op
    only, and a well-formed precondition (checked before the path, as the Worker gateway,
    which leaves the path to the Durable Object, does)."""
    precondition: Precondition = None
    op = entry.get("op") if isinstance(entry, dict) else None
    if isinstance(entry, dict) and isinstance(op, str) and op in FILES_OPS:
        if op not in BATCH_OPS:
            raise invalid_request(
                "op must be write, mkdir, delete, rename or move in a batch", timestamp
            )
        precondition = _precondition(entry, op, timestamp)
    return parse_files_body(entry, timestamp), precondition


def _precondition(entry: dict[str, Any], op: str, timestamp: str) -> Precondition:
    if_match, if_none_match = entry.get("ifMatch"), entry.get("ifNoneMatch")
    if if_match is None and if_none_match is None:
        return None
    if op == "mkdir":
        raise invalid_request("mkdir takes no precondition", timestamp)
    if if_match is not None and if_none_match is not None:
        raise invalid_request("Pass ifMatch or ifNoneMatch, not both", timestamp)
    if if_none_match is not None:
        if if_none_match != "*":
            raise invalid_request('ifNoneMatch must be "*"', timestamp)
        return "absent"
    size = if_match.get("size") if isinstance(if_match, dict) else None
    modified_at = if_match.get("modifiedAt") if isinstance(if_match, dict) else None
    if (
        not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
        or not isinstance(modified_at, str)
    ):
        raise invalid_request(
            "ifMatch must be an object with size (an integer >= 0) and modifiedAt (a string)",
            timestamp,
        )
    return FileVersion(size, modified_at)


def _check_precondition(
    workspace: Workspace,
    parsed: FilesBody,
    expected: FileVersion | Literal["absent"],
    timestamp: str,
    sandbox_created_at: str,
    now: int,
) -> None:
    """Raise PRECONDITION_FAILED unless `path` holds what the precondition expects. A path
    that names no place below /workspace (outside it, or the root) is left to the
    operation, which fails on it."""
    try:
        target = normalize(parsed.raw_path)
    except WorkspaceOSError:
        return
    if target.is_root:
        return
    current = _state_at(workspace, target.absolute, sandbox_created_at, now)
    if expected == "absent":
        if current is None:
            return
        reason = "already exists"
    elif current is None:
        reason = "does not exist"
    elif current.is_directory:
        reason = "is a directory"
    elif current.size == expected.size and current.modified_at == expected.modified_at:
        return
    else:
        reason = f"changed (size {current.size}, modifiedAt {current.modified_at})"
    code = ErrorCode.PRECONDITION_FAILED
    context = {
        "path": parsed.raw_path,
        "operation": parsed.operation,
        "current": None if current is None else current.to_json(),
    }
    raise error_class_for(code)(
        error_response(
            code,
            f"Precondition failed: {parsed.raw_path} {reason}",
            context,
            operation=parsed.operation,
            timestamp=timestamp,
        )
    )


def _state_at(
    workspace: Workspace, absolute: str, sandbox_created_at: str, now: int
) -> FileState | None:
    """What `list` of the parent would report for `absolute` (None: nothing there)."""
    try:
        entry = workspace.stat(absolute)
    except WorkspaceOSError:  # ENOENT, or a file where a parent should be (ENOTDIR)
        return None
    if entry.type == "directory":
        return FileState("directory", 0, sandbox_created_at)
    return FileState("file", entry.size, iso_from_ms(entry.updated_at or now))
