"""Bounded retries with backoff for sandbox calls: which failures are transient, and the
error a pass raises when the sandbox stays unreachable through every retry."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from workbench.protocol import errors

__all__ = ["TransientSyncError", "is_transient", "retrying"]

T = TypeVar("T")

_PERMANENT_CODES: Final = frozenset(
    {
        errors.ErrorCode.FILE_TOO_LARGE,
        errors.ErrorCode.NO_SPACE,
        errors.ErrorCode.PERMISSION_DENIED,
        errors.ErrorCode.VALIDATION_FAILED,
        errors.ErrorCode.NOT_SUPPORTED,
        errors.ErrorCode.IS_DIRECTORY,
        errors.ErrorCode.NOT_DIRECTORY,
        errors.ErrorCode.FILE_EXISTS,
        errors.ErrorCode.FILE_NOT_FOUND,
    }
)


class TransientSyncError(Exception):
    """The sandbox stayed unreachable (or kept answering 5xx) through every retry."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause


def is_transient(error: BaseException) -> bool:
    """Connection failures, timeouts and 5xx answers other than filesystem errors."""
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    if isinstance(error, errors.SandboxError):
        if error.code in _PERMANENT_CODES or error.code == errors.ErrorCode.FILESYSTEM_ERROR:
            return False
        return error.code == "CONNECTION_FAILED" or error.http_status >= 500
    return False


async def retrying(call: Callable[[], Awaitable[T]], *, retries: int, backoff: float) -> T:
    """`call()`, retried with exponential backoff on transient failures."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except Exception as error:
            if not is_transient(error):
                raise
            if attempt == retries:
                raise TransientSyncError(error) from error
            await asyncio.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")
