"""How a client reaches a gateway: one request in, one HTTP-shaped `Response` out.

The local backend answers in-process; the remote backend sends the same request over
HTTPS. Both speak the gateway protocol (docs/gateway-protocol.md), so one client
implementation serves both and they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from workbench.protocol.http import EventSink, Handler, Request, Response, json_payload


class Transport(Protocol):
    """Sends gateway-protocol requests (paths start with `/v1/`)."""

    description: str
    """Where requests go, for status bars and error messages (never contains secrets)."""
    enforces_deadlines: bool
    """The server ends an execution at its `timeoutMs` itself (and cancels one whose
    request is given up), so a client waits a little longer than that for its answer."""

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: EventSink | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request; `body` is JSON-encoded when not None. With `on_event`, an
        execution's output events go to it as they arrive, on the event loop's thread,
        where the server streams them (`docs/gateway-protocol.md`). `headers`: extension
        headers of the protocol (lower-case names), sent as they are."""
        ...

    async def cancel(self, sandbox_id: str, context_id: str | None = None) -> bool:
        """Stop the running execution of a sandbox (with `context_id`, only one in that
        context); False if none was interrupted: none is running there, or only the
        request can be abandoned (the guest keeps running until its fuel runs out)."""
        ...

    async def aclose(self) -> None: ...


async def answer_in_process(
    handler: Handler | Callable[[Request], Response],
    method: str,
    path: str,
    body: Any = None,
    *,
    timeout: float | None = None,
    on_event: EventSink | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """`handler`'s answer to the request a `Transport.request` describes, encoded as a
    gateway receives it. Given up (its timeout, its task cancelled), the request's
    `given_up` is set and the handler's work still ends: a gateway then cancels the
    sandbox's execution, which is stored as any other."""
    payload = b"" if body is None else json_payload(body)
    sent = {
        **(headers or {}),
        "content-type": "application/json",
        "content-length": str(len(payload)),
    }
    events = None if on_event is None else _on_this_loop(on_event)
    request = Request(method, path, payload, sent, events=events)
    call = asyncio.ensure_future(_answer(handler, request))
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.shield(call)
    except (asyncio.CancelledError, TimeoutError):
        request.given_up.set()
        raise


async def _answer(handler: Handler | Callable[[Request], Response], request: Request) -> Response:
    answer = handler(request)
    return await answer if inspect.isawaitable(answer) else answer


def _on_this_loop(sink: EventSink) -> EventSink:
    """`sink`, called on the running event loop's thread whichever thread the event
    comes from (an execution's output comes from an engine thread)."""
    loop = asyncio.get_running_loop()

    def forward(event: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(sink, event)

    return forward


class MockTransport:
    """A `Transport` whose answers come from `handler`, in this process (httpx's
    `MockTransport` pattern): a client, or the whole TUI, against a gateway that a test
    writes as a function, with no network and no engine. `handler` gets each request as
    a gateway would (`Request`: the JSON body encoded, `events` where the client takes an
    output stream) and returns its `Response`, or an awaitable of one; an exception it
    raises reaches the caller as is. `cancel` answers `Transport.cancel` (default: only
    the request can be abandoned, as with a remote gateway)."""

    def __init__(
        self,
        handler: Handler | Callable[[Request], Response],
        *,
        description: str = "mock gateway",
        enforces_deadlines: bool = True,
        cancel: Callable[[str, str | None], bool] | None = None,
    ) -> None:
        self.handler = handler
        self.description = description
        self.enforces_deadlines = enforces_deadlines
        self._cancel = cancel
        self.closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: EventSink | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        return await answer_in_process(
            self.handler, method, path, body, timeout=timeout, on_event=on_event, headers=headers
        )

    async def cancel(self, sandbox_id: str, context_id: str | None = None) -> bool:
        return self._cancel(sandbox_id, context_id) if self._cancel is not None else False

    async def aclose(self) -> None:
        self.closed = True
