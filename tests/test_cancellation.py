"""A cancelled request is cancelled, whenever the cancel comes: the CLI ends a command on
Ctrl+C, SIGTERM or SIGHUP by cancelling its task, and a request that swallowed the
cancel went on to run the code (Python 3.11's `asyncio.wait_for` returns the result when
its awaitable finishes in the same step as the cancel; seen as `sandbox-workbench run`
ignoring 2 SIGTERMs in 120 sent in its first 0.8 s, and running the guest to its
timeout)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from workbench.api.transport import Request, answer_in_process
from workbench.backends.daemon.transport import SocketTransport
from workbench.core.tasks import cancel_and_wait
from workbench.protocol.http import Response

STEPS = 40
"""Cancel after each number of event loop steps up to this: past where the answer came."""


async def _cancelled_after(task: asyncio.Future[object], steps: int) -> str:
    """Cancel `task` after `steps` loop steps: "cancelled", "first" (it ended before the
    cancel came) or "ended" (it ended as if not cancelled: the cancel lost)."""
    for _ in range(steps):
        await asyncio.sleep(0)
    if task.done():
        return "first"
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
    return "ended"


async def _outcomes(request: Callable[[], Awaitable[Response]]) -> set[str]:
    """How the request ended when cancelled after 0, 1, 2… loop steps: "cancelled",
    "answered first" (done before the cancel came) or "answered" (the cancel lost)."""
    named = {"first": "answered first", "ended": "answered", "cancelled": "cancelled"}
    return {
        named[await _cancelled_after(asyncio.ensure_future(request()), steps)]
        for steps in range(STEPS)
    }


def test_a_request_to_the_daemon_is_never_answered_once_cancelled(tmp_path: Path) -> None:
    async def main() -> set[str]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
            writer.close()

        path = tmp_path / "daemon.sock"
        server = await asyncio.start_unix_server(answer, str(path))
        transport = SocketTransport(path, "a test daemon")
        try:
            return await _outcomes(lambda: transport.request("GET", "/v1/daemon", timeout=5))
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(main()) == {"cancelled", "answered first"}


def test_a_request_answered_in_process_is_never_answered_once_cancelled() -> None:
    def handler(request: Request) -> Response:
        return Response(200, b"{}")

    async def main() -> set[str]:
        return await _outcomes(lambda: answer_in_process(handler, "GET", "/v1/x", timeout=5))

    assert asyncio.run(main()) == {"cancelled", "answered first"}


def test_serve_giving_up_a_request_to_the_daemon_keeps_its_own_cancel(tmp_path: Path) -> None:
    """`serve` in front of the daemon: a request its client gave up is cancelled at the
    daemon (499). A cancel of `forward` itself while it waits for that ends it, at every
    step: it returned the 499 instead (`suppress(CancelledError)` around the wait)."""

    async def main() -> set[str]:
        async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                await reader.read()  # until the client closes
            writer.close()

        path = tmp_path / "daemon.sock"
        server = await asyncio.start_unix_server(never_answer, str(path))
        transport = SocketTransport(path, "a test daemon")
        outcomes: set[str] = set()
        try:
            for steps in range(STEPS):
                request = Request("GET", "/v1/daemon")
                task = asyncio.ensure_future(transport.forward(request))
                for _ in range(3):
                    await asyncio.sleep(0)
                request.given_up.set()
                for _ in range(steps):
                    await asyncio.sleep(0)
                if task.done():
                    outcomes.add(f"answered {task.result().status} first")
                    continue
                task.cancel()
                try:
                    answer = await task
                except asyncio.CancelledError:
                    outcomes.add("cancelled")
                else:
                    outcomes.add(f"answered {answer.status}")
        finally:
            server.close()
            await server.wait_closed()
        return outcomes

    assert asyncio.run(main()) == {"cancelled", "answered 499 first"}


def test_serve_cancelled_while_it_waits_leaves_no_request_at_the_daemon(tmp_path: Path) -> None:
    """`forward` cancelled while it waits for the daemon's answer (a shutdown): its request
    to the daemon, and the connection that holds it open there, go with it."""

    async def main() -> tuple[list[str], int]:
        open_connections: list[asyncio.StreamWriter] = []

        async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            open_connections.append(writer)
            with contextlib.suppress(ConnectionError):
                await reader.read()
            open_connections.remove(writer)
            writer.close()

        path = tmp_path / "daemon.sock"
        server = await asyncio.start_unix_server(never_answer, str(path))
        transport = SocketTransport(path, "a test daemon")
        before = asyncio.all_tasks()
        task = asyncio.ensure_future(transport.forward(Request("GET", "/v1/daemon")))
        await asyncio.sleep(0.05)  # it waits for the answer
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

        def left() -> list[str]:
            return [
                str(other.get_coro())
                for other in asyncio.all_tasks() - before
                if not other.done() and other is not asyncio.current_task()
            ]

        for _ in range(500):  # the daemon's end sees the connection close
            if not left() and not open_connections:
                break
            await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()
        return left(), len(open_connections)

    assert asyncio.run(main()) == ([], 0)


def test_cancel_and_wait_raises_the_caller_s_cancel_and_only_that() -> None:
    """A cancel of the caller while the task ends is raised even when the task ended with
    another error; a count of cancels the caller already had (one caught earlier) is not."""

    class Ended(Exception):
        pass

    async def slow_to_end() -> None:
        for _ in range(3):  # its cleanup, which takes the caller's cancel too
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)
        raise Ended

    async def caller() -> str:
        task = asyncio.ensure_future(slow_to_end())
        await asyncio.sleep(0)  # it runs
        with contextlib.suppress(Ended):
            await cancel_and_wait(task)
        return "went on"

    async def cancelled_meanwhile() -> str:
        task = asyncio.ensure_future(caller())
        await asyncio.sleep(0.005)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    async def with_an_old_cancel() -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)  # caught, and not `uncancel`led
        return await caller()

    assert asyncio.run(cancelled_meanwhile()) == "cancelled"
    assert asyncio.run(with_an_old_cancel()) == "went on"


def test_no_timeout_is_an_asyncio_wait_for() -> None:
    """The rule the tests above sample, checked everywhere: `asyncio.wait_for` can lose a
    cancel on Python 3.11, `asyncio.timeout` cannot."""
    root = Path(__file__).resolve().parent.parent
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for package in ("workbench", "engines", "tour")
        for path in sorted((root / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if _names_wait_for(node)
    ]
    assert found == []


def _names_wait_for(node: ast.AST) -> bool:
    """`asyncio.wait_for`, `asyncio.tasks.wait_for`, or `wait_for` imported from them."""
    if isinstance(node, ast.ImportFrom):
        return node.module in ("asyncio", "asyncio.tasks") and any(
            alias.name == "wait_for" for alias in node.names
        )
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "wait_for"
        and ast.unparse(node.value) in ("asyncio", "asyncio.tasks")
    )


def test_a_watch_cancelled_as_it_stops_is_cancelled(tmp_path: Path) -> None:
    """The watch's last wait (for its watcher to end) swallowed a cancel that came then:
    the watch returned as if it had just stopped."""
    from workbench.backends.local import open_local_backend
    from workbench.sync import EventKind, FolderSync, SyncEvent

    async def main() -> set[str]:
        backend = open_local_backend(tmp_path / "data", embedded=True)
        folder = tmp_path / "project"
        folder.mkdir()
        outcomes: set[str] = set()
        try:
            for steps in range(STEPS):
                sync = FolderSync(folder, backend.sandbox("watched"), debounce=0.01)
                events: list[SyncEvent] = []
                sync.subscribe(events.append)
                stop, ready = asyncio.Event(), asyncio.Event()
                task = asyncio.ensure_future(sync.watch(stop=stop, ready=ready))
                await ready.wait()
                stop.set()
                outcome = await _cancelled_after(task, steps)
                named = {"first": "stopped first", "ended": "stopped", "cancelled": "cancelled"}
                outcomes.add(named[outcome])
                if outcome != "first":
                    assert events[-1].kind is EventKind.STOPPED
        finally:
            await backend.aclose()
        return outcomes

    assert asyncio.run(main()) <= {"cancelled", "stopped first"}


def test_a_watch_cancelled_while_idle_leaves_no_task_behind(tmp_path: Path) -> None:
    """Its wait for the folder's next changes stayed pending on the queue ("Task was
    destroyed but it is pending!" at the loop's end)."""
    from workbench.backends.local import open_local_backend
    from workbench.sync import FolderSync

    async def main() -> list[asyncio.Task[object]]:
        backend = open_local_backend(tmp_path / "data", embedded=True)
        folder = tmp_path / "project"
        folder.mkdir()
        try:
            sync = FolderSync(folder, backend.sandbox("watched"), debounce=0.01)
            ready = asyncio.Event()
            task = asyncio.ensure_future(sync.watch(ready=ready))
            await ready.wait()
            for _ in range(20):  # past its first pass, waiting for changes
                await asyncio.sleep(0.01)
            await cancel_and_wait(task)
            await asyncio.sleep(0)  # a task cancelled on the way out ends
            return [
                left
                for left in asyncio.all_tasks()
                if left.get_coro().__qualname__ == "Queue.get"  # type: ignore[union-attr]
            ]
        finally:
            await backend.aclose()

    assert asyncio.run(main()) == []
