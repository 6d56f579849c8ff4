"""How a client reaches a gateway: one request in, one HTTP-shaped `Response` out.

The local backend answers in-process; the remote backend sends the same request over
HTTPS. Both speak the gateway protocol (docs/gateway-protocol.md), so one client
implementation serves both and they cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Protocol

from workbench.protocol.http import EventSink, Response


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
    ) -> Response:
        """Send one request; `body` is JSON-encoded when not None. With `on_event`, an
        execution's output events go to it as they arrive, on the event loop's thread,
        where the server streams them (`docs/gateway-protocol.md`)."""
        ...

    async def cancel(self, sandbox_id: str) -> bool:
        """Stop the running execution of a sandbox; False if only the request can be
        abandoned (the guest keeps running until its fuel runs out)."""
        ...

    async def aclose(self) -> None: ...
