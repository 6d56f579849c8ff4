"""What a folder sync knows about the sandbox side, and what it remembers across runs.

The sync's manifest maps folder-relative paths to `RemoteEntry`s. Entries the sync
created (uploaded, renamed into place, or made as directories) are `owned`; only those
are ever deleted without `--prune`. The owned entries are saved after every pass to a
small JSON state file per (backend, sandbox, dest, folder) under the user data dir, so a
later `watch` still knows what it may delete. So are the files it found holding the
folder's content that it did not create (`seenInSync`, a key older versions ignore): a
later watch takes them for files it knows, not for files another client wrote there (a
conflict). A missing, unreadable or corrupt state file means "the sync created nothing"
(the safe direction: nothing gets deleted).

A sync that uses a state file holds it for its whole life (`hold_state_file`): two syncs of
one (backend, sandbox, dest, folder) at once would each take the other's uploads for a
guest's changes (spurious conflicts) and overwrite each other's record of what they created
(so a local delete could leave a file behind, or delete one wrongly). The second one fails
at once instead, naming the holder's pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from workbench.core.host_paths import HostPathError, checked_relative, opaque_name
from workbench.paths import private_directory, private_file

__all__ = [
    "STATE_DIR_NAME",
    "RemoteEntry",
    "StateFileLock",
    "SyncAlreadyRunningError",
    "found_there",
    "hold_state_file",
    "load_entries",
    "normalize_dest",
    "remembered",
    "save_entries",
    "state_lock_file",
    "sync_state_file",
]

STATE_DIR_NAME: Final = "sync-state"
_STATE_VERSION: Final = 1
_MAX_STATE_BYTES: Final = 64 * 1_048_576
_PID_READS: Final = 20
"""Reads of a lock file that holds no pid yet (its holder has just taken the lock), 5 ms
apart, before the refusal says "another process"."""


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


def _entry_from_json(value: object, *, owned: bool = True) -> RemoteEntry | None:
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
    return RemoteEntry(is_dir, size, modified_at, digest, stat_key, owned=owned)


def load_entries(path: Path, identity: Mapping[str, str]) -> dict[str, RemoteEntry]:
    """The entries saved in `path` for `identity`, owned and seen in sync; {} when the
    file is missing, unreadable, corrupt or about something else. Entries with a path that
    could leave `dest` (`..`, absolute, NUL) are dropped, and so is a file seen in sync
    that is not one or has no local stat."""
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
    seen = document.get("seenInSync")
    entries: dict[str, RemoteEntry] = {}
    for owned, listed in (
        (False, seen if isinstance(seen, dict) else {}),
        (True, document["entries"]),
    ):
        for relative, value in listed.items():
            entry = _entry_from_json(value, owned=owned)
            try:
                checked_relative(relative)
            except HostPathError:
                continue
            if entry is not None and (owned or _seen_in_sync(entry)):
                entries[relative] = entry  # owned last: it wins
    return entries


def _found_file(entry: RemoteEntry) -> bool:
    return not entry.owned and not entry.is_dir


def _seen_in_sync(entry: RemoteEntry) -> bool:
    """A file the sync did not create, found holding the local file's content."""
    return _found_file(entry) and entry.local_stat is not None


def found_there(entry: RemoteEntry) -> bool:
    """A file the sync did not create and never found holding the folder's content."""
    return _found_file(entry) and entry.local_stat is None


def remembered(entry: RemoteEntry) -> bool:
    """Whether the state file keeps `entry`: owned, or seen in sync."""
    return entry.owned or _seen_in_sync(entry)


def save_entries(
    path: Path, identity: Mapping[str, str], manifest: Mapping[str, RemoteEntry]
) -> None:
    """Write the owned entries of `manifest`, and its files seen in sync, atomically (dir
    0700, file 0600).

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
        "seenInSync": {
            relative: _entry_to_json(entry)
            for relative, entry in sorted(manifest.items())
            if _seen_in_sync(entry)
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


class SyncAlreadyRunningError(Exception):
    """Another sync of the same (backend, sandbox, dest, folder) holds its state file: a
    `watch`, the workbench's folder watch or a one-shot sync, in this process or another.
    `holder_pid` is the holder's process id when its lock file says it."""

    def __init__(self, identity: Mapping[str, str], holder_pid: int | None) -> None:
        self.folder = identity.get("folder", "")
        self.sandbox_id = identity.get("sandbox", "")
        self.dest = identity.get("dest", "")
        self.holder_pid = holder_pid
        if holder_pid is None:
            holder = "another process"
        elif holder_pid == os.getpid():
            holder = f"process {holder_pid} (this one)"
        else:
            holder = f"process {holder_pid}"
        super().__init__(
            f"{self.folder} is already being watched into sandbox {self.sandbox_id} at "
            f"{self.dest} by {holder}"
        )


def state_lock_file(state_file: Path) -> Path:
    """The lock file of `state_file`, next to it (never deleted: it may be in use)."""
    return state_file.with_name(f"{state_file.name}.lock")


class StateFileLock:
    """An exclusive `flock` on a state file's lock file, held from `hold_state_file` until
    `release`, or until its process ends however it ends (the kernel drops the lock with
    the descriptor), so a killed sync never blocks the next one."""

    def __init__(self, fd: int) -> None:
        self._close = weakref.finalize(self, _let_go, fd)
        """Closing the descriptor releases the lock; also when the holder is collected."""

    def release(self) -> None:
        """Release the lock (again: nothing)."""
        self._close()


def _let_go(fd: int) -> None:
    """Release a lock: its pid goes first (a refusal in between would name this process
    after it let go), then the descriptor, which drops the lock."""
    try:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def hold_state_file(state_file: Path, identity: Mapping[str, str]) -> StateFileLock:
    """Lock `state_file` for one sync (see the module docstring), never waiting.

    Raises `SyncAlreadyRunningError` while another sync holds it, and OSError when its
    lock file cannot be opened (a symlink is never followed, a FIFO never waited for, and
    the file is 0600 whatever the umask: one it left unwritable would refuse every sync
    after)."""
    private_directory(state_file.parent)
    flags = os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(private_file(state_lock_file(state_file)), flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{state_lock_file(state_file)} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder_pid(fd)
        os.close(fd)
        raise SyncAlreadyRunningError(identity, holder) from None
    except BaseException:
        os.close(fd)
        raise
    lock = StateFileLock(fd)
    with contextlib.suppress(OSError):  # the pid only names the holder in a refusal
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return lock


def _holder_pid(fd: int) -> int | None:
    """The pid the lock's holder wrote in its lock file; None when it wrote none in a
    moment (or the file holds anything else)."""
    for _ in range(_PID_READS):
        try:
            text = os.pread(fd, 32, 0)
        except OSError:
            return None
        if text.strip().isdigit() and int(text) > 0:
            return int(text)
        time.sleep(0.005)
    return None
