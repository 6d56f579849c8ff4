"""Folder sync: mirror a local folder into a sandbox's /workspace, once or while watching.

Headless (no Textual import); the `watch` command and the TUI build on `FolderSync`.
"""

from __future__ import annotations

from pathlib import Path

from workbench.api.client import SandboxClient
from workbench.sync.engine import (
    MAX_FILE_BYTES,
    FolderSync,
    RemoteEntry,
    SyncConflictError,
    TransientSyncError,
    remote_path,
)
from workbench.sync.events import (
    ConflictPolicy,
    EventKind,
    SyncEvent,
    SyncIssue,
    SyncReport,
    SyncStatus,
)
from workbench.sync.ignore import DEFAULT_IGNORES, IgnoreRules, parse_ignore_lines

__all__ = [
    "DEFAULT_IGNORES",
    "MAX_FILE_BYTES",
    "ConflictPolicy",
    "EventKind",
    "FolderSync",
    "IgnoreRules",
    "RemoteEntry",
    "SyncConflictError",
    "SyncEvent",
    "SyncIssue",
    "SyncReport",
    "SyncStatus",
    "TransientSyncError",
    "parse_ignore_lines",
    "remote_path",
    "sync_folder",
]


async def sync_folder(
    local_dir: Path | str,
    sandbox: SandboxClient,
    *,
    dest: str = "/workspace",
    policy: ConflictPolicy | str = ConflictPolicy.LOCAL_WINS,
    prune: bool = True,
) -> SyncReport:
    """One-shot sync of `local_dir` into `dest` (see `FolderSync.initial_sync`)."""
    sync = FolderSync(Path(local_dir), sandbox, dest=dest, policy=policy, prune=prune)
    return await sync.initial_sync()
