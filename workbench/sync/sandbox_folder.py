"""The sandbox side of a folder sync: `dest` in the sandbox, addressed by folder-relative
paths, through calls retried on transient failures and run `concurrency` at a time.

Retries are bounded, with backoff; which failures are transient is decided here, and a
pass raises `TransientSyncError` when the sandbox stays unreachable through every retry."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Final, TypeVar

from workbench.api import FileInfo, SandboxClient
from workbench.protocol import errors
from workbench.protocol.types import BatchEntry, FilesBatchLimits, FilesBatchResult
from workbench.sync.local import LocalEntry, content_digest
from workbench.sync.manifest import RemoteEntry
from workbench.sync.relative_paths import parent_of, remote_path

__all__ = ["SandboxFolder", "TransientSyncError", "is_transient", "retrying"]

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


_LIST_PARENTS_THRESHOLD: Final = 4
"""More parent directories to check than this: list `dest` recursively once."""


class SandboxFolder:
    """`dest` in `sandbox`; every call through `retrying` is retried `retries` times."""

    def __init__(
        self,
        sandbox: SandboxClient,
        dest: str,
        *,
        retries: int,
        retry_backoff: float,
        concurrency: int,
    ) -> None:
        self.sandbox = sandbox
        self.dest = dest
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.concurrency = concurrency
        self.sandbox_created_at: str | None = None
        """When the sandbox was made, as the gateway last said (None: not said)."""
        self.replaced = False
        """An answer named another making than the one before: the sandbox was destroyed
        and made again since, without what this sync had put there."""
        self.told_this_pass = False
        """An answer of the pass under way said when the sandbox was made (a batch's)."""

    def note_sandbox_made(self, created_at: str | None) -> None:
        """An answer said when the sandbox was made (None: the gateway does not say)."""
        if created_at is None:
            return
        self.told_this_pass = True
        if self.sandbox_created_at not in (None, created_at):
            self.replaced = True
        self.sandbox_created_at = created_at

    def path(self, relative: str) -> str:
        return remote_path(self.dest, relative)

    async def retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, retried with exponential backoff on transient failures."""
        return await retrying(call, retries=self.retries, backoff=self.retry_backoff)

    async def batch_limits(self) -> FilesBatchLimits | None:
        """What one batch may hold on this gateway; None: it takes files one by one."""
        return await self.sandbox.files_batch_limits()

    async def send_batch(self, entries: list[BatchEntry]) -> FilesBatchResult:
        """One `files/batch` request, retried on transient failures. Sending a batch again
        after an attempt that did land is safe: writes, deletes with `force` and recursive
        mkdirs repeat cleanly, a rename falls back to upload and delete, and a write whose
        precondition the first attempt used up is found in sync by the conflict check."""
        answer = await self.retrying(lambda: self.sandbox.files_batch(entries))
        self.note_sandbox_made(answer.sandbox_created_at)
        return answer

    async def sandbox_made(self) -> None:
        """Ask when the sandbox was made (the baseline the batches' answers are held to)."""
        info = await self.retrying(self.sandbox.get_info)
        self.note_sandbox_made(info.created_at)

    async def list_entries(self, relative: str, recursive: bool) -> list[FileInfo] | None:
        """Entries under a sandbox directory (None when it does not exist)."""
        try:
            listing = await self.retrying(
                lambda: self.sandbox.list_files(
                    self.path(relative), recursive=recursive, include_hidden=True
                )
            )
        except (errors.FileNotFoundError, errors.FileSystemError):
            return None
        return listing.files

    async def read(self, relative: str) -> bytes | None:
        try:
            return await self.retrying(lambda: self.sandbox.read_bytes(self.path(relative)))
        except (errors.FileNotFoundError, errors.FileSystemError):
            return None

    async def entries_now(self, paths: list[str]) -> dict[str, FileInfo | None]:
        """Current sandbox `FileInfo` for each path (None: missing)."""
        parents = sorted({parent_of(path) for path in paths})
        found: dict[str, FileInfo] = {}
        if len(parents) > _LIST_PARENTS_THRESHOLD:
            for info in await self.list_entries("", recursive=True) or []:
                found[info.relative_path] = info
        else:
            for parent in parents:
                for info in await self.list_entries(parent, recursive=False) or []:
                    key = f"{parent}/{info.relative_path}" if parent else info.relative_path
                    found[key] = info
        return {path: found.get(path) for path in paths}

    async def fill_digests(
        self, remote: dict[str, RemoteEntry], local: dict[str, LocalEntry]
    ) -> None:
        """Read back sandbox files whose size matches a local file, to compare digests."""
        candidates = [
            path
            for path, entry in remote.items()
            if not entry.is_dir
            and entry.digest is None
            and (other := local.get(path)) is not None
            and not other.is_dir
            and other.size == entry.size
        ]

        async def fill(path: str) -> None:
            data = await self.read(path)
            if data is not None:
                remote[path] = replace(remote[path], digest=content_digest(data))

        await self.bounded(candidates, fill)

    async def bounded(self, items: Iterable[T], work: Callable[[T], Awaitable[None]]) -> None:
        """`work(item)` for every item, `concurrency` at a time. The first
        `TransientSyncError` stops new work and is re-raised once the rest settled."""
        semaphore = asyncio.Semaphore(self.concurrency)
        failures: list[TransientSyncError] = []

        async def one(item: T) -> None:
            async with semaphore:
                if failures:
                    return
                try:
                    await work(item)
                except TransientSyncError as error:
                    failures.append(error)

        await asyncio.gather(*(one(item) for item in items))
        if failures:
            raise failures[0]
