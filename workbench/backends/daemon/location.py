"""Where a data dir's daemon listens and logs, and the checks that it is really ours.

The socket lives in a private runtime directory (`$SANDBOX_WORKBENCH_RUNTIME_DIR`, else
`$XDG_RUNTIME_DIR/sandbox-workbench`, else a per-user directory under the temp dir),
named by a digest of the data dir, so a private `SANDBOX_WORKBENCH_DATA_DIR` gets a
daemon of its own. The directory must be ours and 0700, the socket ours and 0600: a
client refuses anything else (someone else's socket could answer with anything), and
the daemon checks every peer's uid (`SO_PEERCRED`) on top.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import stat
import struct
import sys
from pathlib import Path

from workbench.paths import APP_NAME, private_directory

RUNTIME_DIR_ENV = "SANDBOX_WORKBENCH_RUNTIME_DIR"
STATE_DIR_ENV = "SANDBOX_WORKBENCH_STATE_DIR"
MAX_SOCKET_PATH = 100
"""AF_UNIX paths are at most 107 bytes on Linux (103 on macOS)."""


class UnsafeLocationError(Exception):
    """The runtime directory or the socket is not private to this user."""


def runtime_dir() -> Path:
    """The directory of the daemons' sockets (not created here)."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override:
        return Path(override).expanduser().absolute()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / APP_NAME
    if sys.platform.startswith("linux"):
        import tempfile

        return Path(tempfile.gettempdir()) / f"{APP_NAME}-{os.getuid()}"
    import platformdirs

    return Path(platformdirs.user_runtime_dir(APP_NAME))


def private_runtime_dir() -> Path:
    """`runtime_dir()`, created 0700; refused unless it is ours and private. Only a
    directory the user named gets its missing parents made (0700): `$XDG_RUNTIME_DIR` is
    the system's to make, so a missing one is an error that names it."""
    directory = runtime_dir()
    if not os.path.lexists(directory):
        try:
            if not os.environ.get(RUNTIME_DIR_ENV) and not directory.parent.is_dir():
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            private_directory(directory, tighten=True)
        except OSError as error:  # a file on its way, no permission: not the store's fault
            raise UnsafeLocationError(
                f"cannot make the runtime directory {directory}: {error.strerror or error}; "
                f"set {RUNTIME_DIR_ENV} to a private directory of yours"
            ) from error
    status = directory.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
        raise UnsafeLocationError(
            f"{directory} is not a directory of this user: refusing it; set "
            f"{RUNTIME_DIR_ENV} to a private directory of yours"
        )
    if status.st_mode & 0o077:
        raise UnsafeLocationError(
            f"{directory} is open to other users (mode {stat.S_IMODE(status.st_mode):o}): "
            "refusing it; remove it or make it 0700"
        )
    return directory


def daemon_key(data_dir: Path) -> str:
    """The name a data dir's daemon files share."""
    return hashlib.sha256(str(data_dir.resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def socket_location(data_dir: Path) -> Path:
    """Where the data dir's daemon listens (nothing created or checked here)."""
    return runtime_dir() / f"{daemon_key(data_dir)}.sock"


def socket_path(data_dir: Path) -> Path:
    """The daemon's socket in the private runtime dir (created), refused when too long."""
    path = private_runtime_dir() / socket_location(data_dir).name
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise UnsafeLocationError(
            f"the daemon's socket path {path} is too long for a Unix socket: set "
            f"{RUNTIME_DIR_ENV} to a shorter directory"
        )
    return path


def spawn_lock_path(data_dir: Path) -> Path:
    """Held by the client that starts the daemon, so that clients starting at once start
    one."""
    return private_runtime_dir() / f"{daemon_key(data_dir)}.spawn"


def log_path(data_dir: Path) -> Path:
    """The daemon's log (rotated by the daemon), under the state dir."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        base = Path(override).expanduser().absolute()
    else:
        import platformdirs

        base = Path(platformdirs.user_state_dir(APP_NAME))
    return base / "daemon" / f"{daemon_key(data_dir)}.log"


def check_socket(path: Path) -> None:
    """Refuse a socket that is not ours or not private (anyone else's could be an
    impostor); a missing one is `FileNotFoundError`."""
    status = path.lstat()
    if not stat.S_ISSOCK(status.st_mode):
        raise UnsafeLocationError(f"{path} is not a socket: refusing it")
    if status.st_uid != os.getuid():
        raise UnsafeLocationError(f"{path} belongs to another user: refusing it")
    if status.st_mode & 0o077:
        raise UnsafeLocationError(
            f"{path} is open to other users (mode {stat.S_IMODE(status.st_mode):o}): refusing it"
        )


def peer_is_this_user(connection: socket.socket | None) -> bool:
    """Whether the other end of a connected Unix socket runs as this user (`SO_PEERCRED`,
    Linux; True where the platform cannot tell, as on macOS: the file modes still hold)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None or connection is None:
        return True
    try:
        raw = connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("iII"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("iII", raw)  # struct ucred: pid_t, uid_t, gid_t
    return bool(uid == os.getuid())
