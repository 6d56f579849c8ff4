"""Folder sync: mirror a local folder into a sandbox's /workspace, once or while watching.

Headless (no Textual import); the `watch` command and the TUI build on `FolderSync`.
One room per concept: `folder_sync` (the orchestrator), `watching` (the watch loop and the
changes pending for the next pass), `planning` (what a pass does), `conflicts`, `applying`
(a plan against the sandbox, file by file or in `files/batch` requests), `sandbox_folder`
(the sandbox side, its calls retried), `manifest` (what the sync owns, across runs),
`local` (the folder side and what a pass reads of it), `ignore`, `relative_paths`,
`events`, `runner`.
"""

from __future__ import annotations

from pathlib import Path

from workbench.api import SandboxClient
from workbench.sync.conflicts import SyncConflictError
from workbench.sync.events import (
    ConflictPolicy,
    EventKind,
    SyncEvent,
    SyncIssue,
    SyncReport,
    SyncStatus,
)
from workbench.sync.folder_sync import FolderSync
from workbench.sync.ignore import DEFAULT_IGNORES, IgnoreRules, compile_ignore_lines
from workbench.sync.local import MAX_FILE_BYTES, MAX_WORKSPACE_BYTES
from workbench.sync.manifest import RemoteEntry, SyncAlreadyRunningError, sync_state_file
from workbench.sync.relative_paths import remote_path
from workbench.sync.sandbox_folder import TransientSyncError
from workbench.sync.watching import FolderGoneError

__all__ = [
    "DEFAULT_IGNORES",
    "MAX_FILE_BYTES",
    "MAX_WORKSPACE_BYTES",
    "ConflictPolicy",
    "EventKind",
    "FolderGoneError",
    "FolderSync",
    "IgnoreRules",
    "RemoteEntry",
    "SyncAlreadyRunningError",
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
    """One-shot sync of `local_dir` into `dest` (see `FolderSync.initial_sync`), holding
    `state_file` for the pass (`SyncAlreadyRunningError` while another sync holds it)."""
    with FolderSync(
        Path(local_dir), sandbox, dest=dest, policy=policy, prune=prune, state_file=state_file
    ) as sync:
        return await sync.initial_sync()
