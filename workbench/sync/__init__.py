"""Folder sync: mirror a local folder into a sandbox's /workspace, once or while watching.

Headless (no Textual import); the `watch` command and the TUI build on `FolderSync`.
"""

from __future__ import annotations

from pathlib import Path

from workbench.api.client import SandboxClient
from workbench.sync.engine import (
    MAX_FILE_BYTES,
    FolderSync,
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
from workbench.sync.ignore import DEFAULT_IGNORES, IgnoreRules, compile_ignore_lines
from workbench.sync.manifest import RemoteEntry, sync_state_file

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
    "compile_ignore_lines",
    "remote_path",
    "sync_folder",
    "sync_state_file",
]


async def sync_folder(
    local_dir: Path | str,
    sandbox: SandboxClient,
    *,
    dest: str = "/workspace",
    policy: ConflictPolicy | str = ConflictPolicy.LOCAL_WINS,
    prune: bool = False,
    state_file: Path | None = None,
) -> SyncReport:
    """One-shot sync of `local_dir` into `dest` (see `FolderSync.initial_sync`)."""
    sync = FolderSync(
        Path(local_dir), sandbox, dest=dest, policy=policy, prune=prune, state_file=state_file
    )
    return await sync.initial_sync()
