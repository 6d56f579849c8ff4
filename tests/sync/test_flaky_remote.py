"""A remote that fails mid-sync and recovers: a real HTTP proxy on loopback in front of
a real `serve` process, switched between forwarding, answering 503 and dropping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.serve_process import ServeProcess
from tests.sync.conftest import eventually, fresh_id, local_tree, open_remote, remote_tree
from workbench.sync import EventKind, FolderSync, SyncEvent


class SwitchableProxy:
    """TCP proxy whose `mode` is `forward`, `503` or `drop`; switching closes live
    connections so keep-alive cannot bypass the new mode."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.mode = "forward"
        self._writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def switch(self, mode: str) -> None:
        self.mode = mode
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "drop":
            writer.close()
            return
        if self.mode == "503":
            with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                body = b'{"error":"unavailable"}'
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    async def close(self) -> None:
        self.switch("drop")
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def proxy(serve: ServeProcess) -> AsyncIterator[SwitchableProxy]:
    port = int(serve.url.rsplit(":", 1)[1].strip("/"))
    started = SwitchableProxy(port)
    await started.start()
    yield started
    await started.close()


async def test_remote_fails_mid_sync_then_recovers(
    folder: Path, serve: ServeProcess, proxy: SwitchableProxy
) -> None:
    direct = open_remote(serve.url, serve.token)
    flaky = open_remote(proxy.url, serve.token)
    sandbox_id = fresh_id()
    truth = direct.sandbox(sandbox_id)
    (folder / "first.txt").write_text("1")
    proxy.switch("drop")  # unreachable from the very start
    sync = FolderSync(
        folder,
        flaky.sandbox(sandbox_id),
        debounce=0.03,
        retries=1,
        retry_backoff=0.02,
        max_retry_delay=0.3,
    )
    events: list[SyncEvent] = []
    sync.subscribe(events.append)
    stop = asyncio.Event()
    task = asyncio.create_task(sync.watch(stop=stop))
    try:

        async def retrying() -> bool:
            return any(event.kind is EventKind.RETRYING for event in events)

        await eventually(retrying)
        proxy.switch("forward")

        async def converged() -> bool:
            return not sync.has_pending and await remote_tree(truth) == local_tree(folder)

        await eventually(converged)

        # Fails mid-way: 503s while a batch of files is pending, then drops, then heals.
        proxy.switch("503")
        retries_before = sum(event.kind is EventKind.RETRYING for event in events)
        for index in range(30):
            (folder / f"batch{index}.txt").write_text(f"content {index}")
        (folder / "first.txt").unlink()

        async def retried_again() -> bool:
            return sum(event.kind is EventKind.RETRYING for event in events) > retries_before

        await eventually(retried_again)
        assert "batch0.txt" not in await remote_tree(truth)
        proxy.switch("drop")
        await asyncio.sleep(0.3)
        proxy.switch("forward")
        await eventually(converged)
        assert not task.done()  # the watcher kept running throughout
        assert not any(event.kind is EventKind.ERROR for event in events)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await truth.destroy()
        await direct.aclose()
        await flaky.aclose()
