"""A TCP proxy on loopback that delays every byte by a fixed time in each direction.

It models distance, not a thin pipe: each chunk is forwarded `delay` seconds after it
arrived, in order, with no bandwidth cap, so a round trip through it costs twice `delay`
on top of the server's own time. It also counts the HTTP requests that pass through it
(request lines seen from the client), so a benchmark can report round trips per
operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from types import TracebackType

_REQUEST_LINE = re.compile(
    rb"(?:^|\r\n)(?:GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) /[^ ]* HTTP/1\.[01]\r\n"
)


class DelayProxy:
    """`async with DelayProxy(target_port, rtt_ms=50) as proxy:` then use `proxy.url`."""

    def __init__(self, target_port: int, *, rtt_ms: float, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.delay = rtt_ms / 2000
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> DelayProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        for source, sink, count in (
            (reader, upstream_writer, True),
            (upstream_reader, writer, False),
        ):
            task = asyncio.create_task(self._pump(source, sink, count))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, count: bool
    ) -> None:
        """Forward chunks in order, each `delay` after it arrived (a conveyor belt: many
        chunks can be in flight at once, so latency adds up but throughput does not drop)."""
        belt: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await belt.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    sink.close()
                    return
                sink.write(chunk)
                await sink.drain()

        delivery = asyncio.create_task(deliver())
        try:
            while True:
                chunk = await source.read(1 << 16)
                if count:
                    self.requests += len(_REQUEST_LINE.findall(chunk))
                await belt.put((time.monotonic() + self.delay, chunk))
                if not chunk:
                    break
            await delivery
        except (ConnectionError, asyncio.CancelledError):
            delivery.cancel()
            sink.close()
