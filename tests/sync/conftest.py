"""Fixtures for the folder-sync suite: the local backend and a real `serve` process,
temp folders, and helpers that watch a folder and wait for the sandbox to converge."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.serve_process import ServeProcess, serve_process
from workbench.api import Backend, FileInfo, SandboxClient
from workbench.backends.local import open_local_backend
from workbench.backends.remote import open_remote_backend
from workbench.protocol import errors
from workbench.sync import EventKind, FolderSync, SyncEvent

BACKEND_KINDS = ["local", "remote"]


@pytest.fixture(scope="session")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """One real `sandbox-workbench serve` for the whole session (tests use fresh ids)."""
    with serve_process(tmp_path_factory.mktemp("serve-data")) as process:
        yield process


def open_remote(url: str, token: str) -> Backend:
    return open_remote_backend("test", url, token, retries=0, timeout=httpx.Timeout(10.0))


@pytest.fixture(params=BACKEND_KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "local":
        opened = open_local_backend(tmp_path / "data", embedded=True)
    else:
        process: ServeProcess = request.getfixturevalue("serve")
        opened = open_remote(process.url, process.token)
    try:
        yield opened
    finally:
        await opened.aclose()


def fresh_id() -> str:
    return f"sync-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def sandbox(backend: Backend) -> AsyncIterator[SandboxClient]:
    client = backend.sandbox(fresh_id())
    try:
        yield client
    finally:
        await client.destroy()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


async def remote_tree(sandbox: SandboxClient, dest: str = "/workspace") -> dict[str, bytes | None]:
    """Every entry under `dest`: file bytes, or None for a directory."""
    listing = await sandbox.list_files(dest, recursive=True, include_hidden=True)
    readers = asyncio.Semaphore(4)  # reads overlap the gateway's work on others

    async def content(info: FileInfo) -> bytes | None:
        if info.is_directory:
            return None
        async with readers:
            try:
                return await sandbox.read_bytes(info.absolute_path)
            except errors.FileNotFoundError:  # deleted between list and read: mid-sync
                return b"<vanished>"

    contents = await asyncio.gather(*(content(info) for info in listing.files))
    return {info.relative_path: data for info, data in zip(listing.files, contents, strict=True)}


def local_tree(
    root: Path, skip: Callable[[str], bool] = lambda _: False
) -> dict[str, bytes | None]:
    tree: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if skip(relative):
            continue
        tree[relative] = None if path.is_dir() else path.read_bytes()
    return tree


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 15.0, interval: float = 0.05
) -> None:
    """Poll until `check()` holds (the watcher is asynchronous by nature)."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


class Watching:
    """A running `FolderSync.watch` with every event it emitted."""

    def __init__(self, sync: FolderSync) -> None:
        self.sync = sync
        self.events: list[SyncEvent] = []
        self.stop = asyncio.Event()
        sync.subscribe(self.events.append)

    def of(self, kind: EventKind) -> list[SyncEvent]:
        return [event for event in self.events if event.kind is kind]

    async def synced_passes(self) -> int:
        return len(self.of(EventKind.SYNCED))

    async def until_idle(self) -> None:
        """Wait until the sync has nothing pending and reported at least one pass."""

        async def idle() -> bool:
            return bool(self.of(EventKind.SYNCED)) and not self.sync.has_pending

        await eventually(idle)


@asynccontextmanager
async def watching(sync: FolderSync) -> AsyncIterator[Watching]:
    """Run `sync.watch()` in the background until the block ends."""
    handle = Watching(sync)
    task = asyncio.create_task(sync.watch(stop=handle.stop))
    try:
        await eventually(lambda: _true(bool(handle.of(EventKind.SYNCED)) or task.done()))
        if task.done():
            task.result()
        yield handle
    finally:
        handle.stop.set()
        await asyncio.wait_for(task, 10)


async def _true(value: bool) -> bool:
    return value
