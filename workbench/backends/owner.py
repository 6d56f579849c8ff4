"""The one owner of a data dir's live state: whoever holds the lock on its `owner.lock`.

The local daemon holds it for its life; an embedded backend (tests, `--no-daemon`) holds
it while open. A second would-be owner fails at once with the holder's pid and kind, so
two processes can never both run live contexts of one store (their states would fork).
The lock is the kernel's (`flock`): it goes with the holder's process, however that ends,
so a crash leaves nothing stale behind. The file stays; its content says who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OWNER_FILE = "owner.lock"
LOOK_RETRIES = 20
"""`current_owner` holds a shared lock for an instant: the tries an owner makes past it."""


@dataclass(frozen=True)
class OwnerInfo:
    """Who holds a data dir."""

    pid: int
    kind: str
    """"daemon" or "embedded"."""
    version: str
    socket: str | None = None
    """The daemon's socket (None for an embedded owner)."""
    started_at: int = 0
    """Epoch milliseconds."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "kind": self.kind,
            "version": self.version,
            "socket": self.socket,
            "startedAt": self.started_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> OwnerInfo | None:
        """The info a holder wrote, or None for anything else (a file being written)."""
        if not isinstance(data, dict):
            return None
        pid, kind, version = data.get("pid"), data.get("kind"), data.get("version")
        if not isinstance(pid, int) or not isinstance(kind, str) or not isinstance(version, str):
            return None
        socket, started = data.get("socket"), data.get("startedAt")
        return cls(
            pid,
            kind,
            version,
            socket if isinstance(socket, str) else None,
            started if isinstance(started, int) else 0,
        )

    def describe(self) -> str:
        what = "the local daemon" if self.kind == "daemon" else "an embedded backend"
        return f"{what} (pid {self.pid}, sandbox-workbench {self.version})"


class StoreOwnedError(Exception):
    """The data dir already has an owner; the message names it and says what to do."""

    def __init__(self, data_dir: Path, holder: OwnerInfo | None) -> None:
        who = holder.describe() if holder is not None else "another process"
        advice = (
            "use the daemon (leave out --no-daemon / embedded=True), or stop it with "
            "`sandbox-workbench daemon stop`"
            if holder is not None and holder.kind == "daemon"
            else "close that process, or use another --data-dir"
        )
        super().__init__(f"the local store in {data_dir} is in use by {who}: {advice}")
        self.holder = holder


class OwnerLock:
    """The lock on one data dir, held from `acquire` until `release` (or the process ends)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / OWNER_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, info: OwnerInfo) -> None:
        """Take the lock and record `info`; `StoreOwnedError` when another process holds
        it. Never waits for a holder, only out a moment's look by `current_owner`."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            for attempt in range(LOOK_RETRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = current_owner(self.data_dir)
                    if holder is not None or attempt == LOOK_RETRIES - 1:
                        raise StoreOwnedError(self.data_dir, holder) from None
                    time.sleep(0.005)  # `current_owner` of another process had a look
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info.to_json()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def current_owner(data_dir: Path) -> OwnerInfo | None:
    """Who holds `data_dir` now (None: nobody). A holder that has just taken the lock may
    not have written its info yet: read again for a moment."""
    try:
        fd = os.open(data_dir / OWNER_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        for _ in range(50):
            raw = os.pread(fd, 4096, 0)
            try:
                info = OwnerInfo.from_json(json.loads(raw))
            except (ValueError, RecursionError):  # RecursionError: nested too deeply
                info = None
            if info is not None:
                return info
            time.sleep(0.01)
        return OwnerInfo(0, "unknown", "")
    finally:
        os.close(fd)
