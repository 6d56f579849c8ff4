"""Where engines are cached, and creating private files and directories.

No wasmtime here: the command line's light commands (`locate`, `profiles`, `--help`)
and the config file import this without loading an engine. `engines.cache` builds on it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CACHE_ENV = "SANDBOX_WORKBENCH_CACHE_DIR"

PRIVATE_DIRECTORY_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
"""Modes of everything we create: engines hold compiled native code that is loaded and
run, the data dir holds env vars and history."""


def _tighten(path: Path) -> None:
    """Drop group and other bits from an entry we own (never one of another user, nor
    what a symlink there leads to: its opening, without following it, fails after)."""
    status = path.lstat()
    if stat.S_ISLNK(status.st_mode):
        return
    if status.st_uid == os.geteuid() and status.st_mode & 0o077:
        os.chmod(path, stat.S_IMODE(status.st_mode) & ~0o077, follow_symlinks=False)


def private_directory(path: Path, *, tighten: bool = False) -> Path:
    """Make `path` a directory: each missing component is created 0700 whatever the
    umask. An existing `path` is tightened (group and other bits dropped) only when
    `tighten`, i.e. when it is a directory of our own and not one the user named."""
    missing: list[Path] = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIRECTORY_MODE)
        except FileExistsError:
            continue  # made concurrently: left as its creator made it
        os.chmod(directory, PRIVATE_DIRECTORY_MODE)  # the umask may have dropped owner bits
    if not path.is_dir():
        raise NotADirectoryError(f"not a directory: {path}")
    if tighten and not missing:
        _tighten(path)
    return path


def private_file(path: Path) -> Path:
    """Create `path` empty with mode 0600 whatever the umask, or tighten it if it exists
    (a file of ours that an older version created with the default mode)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        _tighten(path)
        return path
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)  # the umask may have dropped owner bits
    finally:
        os.close(descriptor)
    return path


def cache_root() -> Path:
    """The cache directory: `$SANDBOX_WORKBENCH_CACHE_DIR` or the platform's user cache."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("sandbox-workbench"))
