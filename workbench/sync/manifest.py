"""What a folder sync knows about the sandbox side, and what it remembers across runs.

The sync's manifest maps folder-relative paths to `RemoteEntry`s. Entries the sync
created (uploaded, renamed into place, or made as directories) are `owned`; only those
are ever deleted without `--prune`. The owned entries are saved after every pass to a
small JSON state file per (backend, sandbox, dest, folder) under the user data dir, so a
later `watch` still knows what it may delete. A missing, unreadable or corrupt state file
means "the sync created nothing" (the safe direction: nothing gets deleted).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from workbench.core.host_paths import HostPathError, checked_relative, opaque_name
from workbench.paths import private_directory

__all__ = [
    "STATE_DIR_NAME",
    "RemoteEntry",
    "load_owned_entries",
    "normalize_dest",
    "save_owned_entries",
    "sync_state_file",
]

STATE_DIR_NAME: Final = "sync-state"
_STATE_VERSION: Final = 1
_MAX_STATE_BYTES: Final = 64 * 1_048_576


@dataclass(frozen=True)
class RemoteEntry:
    """What the sync believes is at a sandbox path (digest None: not known yet)."""

    is_dir: bool
    size: int = 0
    modified_at: str = ""
    digest: str | None = None
    local_stat: tuple[int, int] | None = None
    """(size, mtime_ns) of the local file this content was uploaded from."""
    owned: bool = False
    """Created by the sync (so it may delete it); False for what it only found there."""


def normalize_dest(dest: str) -> str:
    """`/workspace/a/./b/` → `/workspace/a/b`; ValueError outside /workspace."""
    segments = [segment for segment in dest.split("/") if segment and segment != "."]
    normalized = "/" + "/".join(segments)
    if ".." in segments or (
        normalized != "/workspace" and not normalized.startswith("/workspace/")
    ):
        raise ValueError(f"dest must be /workspace or under it, got {dest!r}")
    return normalized


def sync_state_file(
    data_root: Path, *, backend: str, sandbox_id: str, dest: str, folder: Path
) -> Path:
    """The state file of one (backend, sandbox, dest, folder); `backend` names the
    backend precisely (profile name and URL, or the local data dir)."""
    key = json.dumps([backend, sandbox_id, normalize_dest(dest), str(folder.resolve())])
    return data_root / STATE_DIR_NAME / f"{opaque_name(key)}.json"


def _entry_to_json(entry: RemoteEntry) -> dict[str, Any]:
    return {
        "dir": entry.is_dir,
        "size": entry.size,
        "modifiedAt": entry.modified_at,
        "digest": entry.digest,
        "localStat": list(entry.local_stat) if entry.local_stat is not None else None,
    }


def _entry_from_json(value: object) -> RemoteEntry | None:
    """The entry, or None for anything not exactly what `_entry_to_json` writes."""
    if not isinstance(value, dict):
        return None
    is_dir, size, modified_at = value.get("dir"), value.get("size"), value.get("modifiedAt")
    digest, local_stat = value.get("digest"), value.get("localStat")
    if not (
        isinstance(is_dir, bool)
        and type(size) is int
        and size >= 0
        and isinstance(modified_at, str)
        and (digest is None or isinstance(digest, str))
    ):
        return None
    stat_key: tuple[int, int] | None = None
    if local_stat is not None:
        if not (
            isinstance(local_stat, list)
            and len(local_stat) == 2
            and all(type(number) is int for number in local_stat)
        ):
            return None
        stat_key = (local_stat[0], local_stat[1])
    return RemoteEntry(is_dir, size, modified_at, digest, stat_key, owned=True)


def load_owned_entries(path: Path, identity: Mapping[str, str]) -> dict[str, RemoteEntry]:
    """The owned entries saved in `path` for `identity`; {} when the file is missing,
    unreadable, corrupt or about something else. Entries with a path that could leave
    `dest` (`..`, absolute, NUL) are dropped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as stream:
            raw = stream.read(_MAX_STATE_BYTES + 1)
        document = json.loads(raw) if len(raw) <= _MAX_STATE_BYTES else None
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return {}
    if not (
        isinstance(document, dict)
        and document.get("version") == _STATE_VERSION
        and all(document.get(key) == value for key, value in identity.items())
        and isinstance(document.get("entries"), dict)
    ):
        return {}
    owned: dict[str, RemoteEntry] = {}
    for relative, value in document["entries"].items():
        entry = _entry_from_json(value)
        try:
            checked_relative(relative)
        except HostPathError:
            continue
        if entry is not None:
            owned[relative] = entry
    return owned


def save_owned_entries(
    path: Path, identity: Mapping[str, str], manifest: Mapping[str, RemoteEntry]
) -> None:
    """Write the owned entries of `manifest` atomically (dir 0700, file 0600).

    Raises OSError when the state cannot be written.
    """
    document = {
        "version": _STATE_VERSION,
        **identity,
        "entries": {
            relative: _entry_to_json(entry)
            for relative, entry in sorted(manifest.items())
            if entry.owned
        },
    }
    data = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    private_directory(path.parent)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
