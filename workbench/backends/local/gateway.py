"""The local gateway: the gateway protocol (`/v1/...`) over the local sandboxes and
runtimes, in-process.

It keeps the sandbox objects (at most `MAX_CACHED_SANDBOXES` in memory), sweeps idle
ones away on time and hands each request to the route table (`routes`).
`sandbox-workbench serve` puts this same handler behind HTTP (adding bearer-token auth),
so the embedded backend and a served one answer identically.
"""

from __future__ import annotations

import asyncio
import sqlite3

from engines.process import Cancellation
from workbench.backends.local.routes import dispatch
from workbench.backends.local.sandbox_object import SandboxObject, not_carried_out
from workbench.backends.local.settings import LocalResources, idle_deadline_passed
from workbench.backends.owner import OwnerLock
from workbench.protocol.http import Request, Response
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import SandboxSummary
from workbench.store import StoredSandbox

MAX_CACHED_SANDBOXES = 128
"""Sandbox objects kept in memory (each may hold a 16 MiB workspace); the least recently
used idle ones beyond this are dropped and re-read from the store when used again."""
MAX_SWEEP_INTERVAL_S = 60.0
MIN_SWEEP_INTERVAL_S = 0.1


class LocalGateway:
    max_cached_sandboxes = MAX_CACHED_SANDBOXES
    _sweeper: asyncio.Task[None] | None = None
    """The periodic idle-expiry sweep, started by the first sandbox request."""

    def __init__(self, resources: LocalResources, owner: OwnerLock | None = None) -> None:
        """`owner`: the data dir's lock this gateway holds (released at `close`)."""
        self.resources = resources
        self._owner = owner
        self.store, self.runtimes = resources.store, resources.runtimes
        self.sessions, self.clock = resources.sessions, resources.clock
        self.settings = resources.settings
        self._sandboxes: dict[str, SandboxObject] = {}
        self.stateless_runs: set[Cancellation] = set()
        """The cancels of `POST /v1/runtimes/:binding/execute` runs in progress."""
        self.closing: str | None = None
        """Why the gateway closes, once `cancel_all` said so: a request whose turn comes
        after that is not carried out (`refuse_if_closing`)."""

    def sandbox(self, sandbox_id: str) -> SandboxObject:
        """The object of `sandbox_id`, now the most recently used one."""
        self._start_sweeping()
        sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            sandbox = SandboxObject(sandbox_id, self.resources)
            sandbox.closing = self.closing
        self._sandboxes[sandbox_id] = sandbox  # dicts keep insertion order: newest last
        self._evict_idle()
        return sandbox

    def _evict_idle(self) -> None:
        """Drop the least recently used sandbox objects beyond the bound. One that is busy
        is kept (two objects for one id would break one-request-at-a-time). The newest
        (about to be used) always stays."""
        excess = len(self._sandboxes) - self.max_cached_sandboxes
        for sandbox_id, sandbox in list(self._sandboxes.items())[:-1]:
            if excess <= 0:
                return
            if sandbox.busy:
                continue
            del self._sandboxes[sandbox_id]
            excess -= 1

    def _start_sweeping(self) -> None:
        """Start the periodic idle-expiry sweep (it needs the running loop, so it starts
        with the first request); none when expiry is off."""
        if self._sweeper is None and self.settings.ttl_ms != 0:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def stop_sweeping(self) -> None:
        """Cancel the periodic sweep (on `close`)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        """Expire idle sandboxes every TTL/10 (at most every minute), so an idle sandbox
        is wiped on time even when nothing touches it again (spec 8.3)."""
        interval = min(self.settings.ttl_ms / 10_000, MAX_SWEEP_INTERVAL_S)
        while True:
            await asyncio.sleep(max(interval, MIN_SWEEP_INTERVAL_S))
            try:
                for stored in self.store.sandboxes():
                    await self._expired_or_current(stored)
            except sqlite3.OperationalError:
                continue  # busy or failing store: the next sweep (or request) tries again

    async def _expired_or_current(self, stored: StoredSandbox) -> StoredSandbox | None:
        """`stored` when its idle deadline has not passed; else its object decides (spec
        8.3: wiped, or re-armed if it was used since), and its row is returned, or None."""
        if not idle_deadline_passed(stored, self.settings.ttl_ms, self.clock.now_ms()):
            return stored
        sandbox = self.sandbox(stored.id)
        await sandbox.sweep()
        return sandbox.meta

    async def handle(self, request: Request) -> Response:
        """Answer one gateway-protocol request."""
        return await dispatch(self, request)

    async def list_sandboxes(self) -> list[SandboxSummary]:
        """Every stored sandbox, from its row alone (no workspace is read); idle ones past
        their deadline are expired first."""
        self._start_sweeping()
        listed = []
        for stored in self.store.sandboxes():
            meta = await self._expired_or_current(stored)
            if meta is None:
                continue
            listed.append(
                SandboxSummary(
                    meta.id,
                    iso_from_ms(meta.created_at),
                    iso_from_ms(meta.last_used),
                    meta.expires_at,
                )
            )
        return listed

    def cancel(self, sandbox_id: str, context_id: str | None = None) -> bool:
        sandbox = self._sandboxes.get(sandbox_id)
        return sandbox is not None and sandbox.cancel(context_id)

    def cancel_all(self, reason: str | None = None) -> None:
        """Cancel every execution in progress, in sandboxes and stateless (closing); their
        results say `reason`."""
        closing = self.closing = reason or "the gateway closed"
        for sandbox in list(self._sandboxes.values()):
            sandbox.close_down(closing)
        for cancellation in list(self.stateless_runs):
            cancellation.cancel(reason)

    def refuse_if_closing(self) -> None:
        """Raise for a stateless run that comes after `cancel_all` (see
        `SandboxObject.refuse_if_closing`)."""
        if self.closing is not None:
            raise not_carried_out(self.closing)

    def close(self) -> None:
        """Stop every session, release the store."""
        self.stop_sweeping()
        self.sessions.close()
        self.store.close()
        if self._owner is not None:
            self._owner.release()
