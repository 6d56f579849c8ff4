"""`wasi:filesystem/types` error codes and how host errors map onto them."""

from __future__ import annotations

import errno
from enum import IntEnum

from engines.vfs import VfsError


class WasiErrno(IntEnum):
    """`wasi:filesystem/types#error-code` (the enum's case indices)."""

    ACCESS = 0
    WOULD_BLOCK = 1
    ALREADY = 2
    BADF = 3
    BUSY = 4
    DEADLOCK = 5
    QUOTA = 6
    EXIST = 7
    FILE_TOO_LARGE = 8
    ILLEGAL_BYTE_SEQUENCE = 9
    IN_PROGRESS = 10
    INTERRUPTED = 11
    INVAL = 12
    IO = 13
    ISDIR = 14
    LOOP = 15
    TOO_MANY_LINKS = 16
    MESSAGE_SIZE = 17
    NAME_TOO_LONG = 18
    NO_DEVICE = 19
    NOENT = 20
    NO_LOCK = 21
    INSUFFICIENT_MEMORY = 22
    INSUFFICIENT_SPACE = 23
    NOTDIR = 24
    NOT_EMPTY = 25
    NOT_RECOVERABLE = 26
    UNSUPPORTED = 27
    NO_TTY = 28
    NO_SUCH_DEVICE = 29
    OVERFLOW = 30
    NOTPERM = 31
    PIPE = 32
    READ_ONLY = 33
    INVALID_SEEK = 34
    TEXT_FILE_BUSY = 35
    CROSS_DEVICE = 36


_FROM_ERRNO = {
    errno.EACCES: WasiErrno.ACCESS,
    errno.EAGAIN: WasiErrno.WOULD_BLOCK,
    errno.EALREADY: WasiErrno.ALREADY,
    errno.EBADF: WasiErrno.BADF,
    errno.EBUSY: WasiErrno.BUSY,
    errno.EDEADLK: WasiErrno.DEADLOCK,
    errno.EDQUOT: WasiErrno.QUOTA,
    errno.EEXIST: WasiErrno.EXIST,
    errno.EFBIG: WasiErrno.FILE_TOO_LARGE,
    errno.EILSEQ: WasiErrno.ILLEGAL_BYTE_SEQUENCE,
    errno.EINPROGRESS: WasiErrno.IN_PROGRESS,
    errno.EINTR: WasiErrno.INTERRUPTED,
    errno.EINVAL: WasiErrno.INVAL,
    errno.EIO: WasiErrno.IO,
    errno.EISDIR: WasiErrno.ISDIR,
    errno.ELOOP: WasiErrno.LOOP,
    errno.EMLINK: WasiErrno.TOO_MANY_LINKS,
    errno.EMSGSIZE: WasiErrno.MESSAGE_SIZE,
    errno.ENAMETOOLONG: WasiErrno.NAME_TOO_LONG,
    errno.ENODEV: WasiErrno.NO_DEVICE,
    errno.ENOENT: WasiErrno.NOENT,
    errno.ENOLCK: WasiErrno.NO_LOCK,
    errno.ENOMEM: WasiErrno.INSUFFICIENT_MEMORY,
    errno.ENOSPC: WasiErrno.INSUFFICIENT_SPACE,
    errno.ENOTDIR: WasiErrno.NOTDIR,
    errno.ENOTEMPTY: WasiErrno.NOT_EMPTY,
    errno.ENOTRECOVERABLE: WasiErrno.NOT_RECOVERABLE,
    errno.ENOTSUP: WasiErrno.UNSUPPORTED,
    errno.ENOTTY: WasiErrno.NO_TTY,
    errno.ENXIO: WasiErrno.NO_SUCH_DEVICE,
    errno.EOVERFLOW: WasiErrno.OVERFLOW,
    errno.EPERM: WasiErrno.NOTPERM,
    errno.EPIPE: WasiErrno.PIPE,
    errno.EROFS: WasiErrno.READ_ONLY,
    errno.ESPIPE: WasiErrno.INVALID_SEEK,
    errno.ETXTBSY: WasiErrno.TEXT_FILE_BUSY,
    errno.EXDEV: WasiErrno.CROSS_DEVICE,
}


class FsError(Exception):
    """A filesystem operation failed with `code` (the guest sees it as its errno)."""

    def __init__(self, code: WasiErrno) -> None:
        super().__init__(code.name)
        self.code = code


HOST_ERRORS = (OSError, FsError, VfsError, ValueError, OverflowError)
"""What a host operation raises for bad input from the guest: reported to it as an error
code (`error_code`). Anything else is a trap."""


def error_code(error: BaseException) -> WasiErrno:
    """The WASI error code for a failed host operation."""
    if isinstance(error, FsError):
        return error.code
    if isinstance(error, VfsError):
        return _FROM_ERRNO.get(getattr(errno, error.errno, 0), WasiErrno.IO)
    if isinstance(error, OSError):
        return _FROM_ERRNO.get(error.errno or 0, WasiErrno.IO)
    if isinstance(error, ValueError | OverflowError):  # a NUL in a name, an offset past 2**63
        return WasiErrno.INVAL
    raise error
