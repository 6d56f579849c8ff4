"""The gateway protocol (`/v1/...`) over the local sandboxes and runtimes, in-process.

`sandbox-workbench serve` puts this same handler behind HTTP (adding bearer-token
auth), so the embedded backend and a served one answer identically.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from engines.isolated import IsolatedSession, WorkerPool
from workbench import __version__
from workbench.api.errors import SandboxError
from workbench.api.transport import Response
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.sandbox_object import (
    SandboxObject,
    SandboxSettings,
    idle_deadline_passed,
)
from workbench.backends.local.sessions import SessionPool
from workbench.core.clock import Clock, iso_from_ms
from workbench.core.ids import validate_sandbox_id
from workbench.gateway.http import Request, error_json, not_found, validation_error
from workbench.store import Store, StoredSandbox

PROTOCOL_VERSION = 1
MAX_CACHED_SANDBOXES = 128
"""Sandbox objects kept in memory (each may hold a 16 MiB workspace); the least recently
used idle ones beyond this are dropped and re-read from the store when used again."""
MAX_SWEEP_INTERVAL_S = 60.0
MIN_SWEEP_INTERVAL_S = 0.1


class LocalGateway:
    max_cached_sandboxes = MAX_CACHED_SANDBOXES
    _sweeper: asyncio.Task[None] | None = None
    """The periodic idle-expiry sweep, started by the first sandbox request."""

    def __init__(
        self,
        *,
        store: Store,
        runtimes: dict[str, LocalRuntime],
        sessions: SessionPool,
        clock: Clock,
        settings: SandboxSettings,
        mirror_root: Path,
        engine_pool: WorkerPool,
    ) -> None:
        self.store = store
        self.runtimes = runtimes
        self.sessions = sessions
        self.clock = clock
        self.settings = settings
        self.mirror_root = mirror_root
        self.engine_pool = engine_pool
        self._sandboxes: dict[str, SandboxObject] = {}
        sessions.before_close = self._save_session
        self._data_version = store.data_version()

    def _sandbox(self, sandbox_id: str) -> SandboxObject:
        """The object of `sandbox_id`, now the most recently used one."""
        self._start_sweeping()
        version = self.store.data_version()
        if version != self._data_version:
            # Another process committed: cached sandbox state may be stale.
            self._data_version = version
            for cached in self._sandboxes.values():
                cached.reload()
        sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            sandbox = SandboxObject(
                sandbox_id,
                store=self.store,
                runtimes=self.runtimes,
                sessions=self.sessions,
                clock=self.clock,
                settings=self.settings,
                mirror_root=self.mirror_root,
                engine_pool=self.engine_pool,
            )
        self._sandboxes[sandbox_id] = sandbox  # dicts keep insertion order: newest last
        self._evict_idle()
        return sandbox

    def _evict_idle(self) -> None:
        """Drop the least recently used sandbox objects beyond the bound. One that is busy
        is kept (two objects for one id would break one-request-at-a-time); the others
        write their pending snapshots first. The newest (about to be used) always stays."""
        excess = len(self._sandboxes) - self.max_cached_sandboxes
        for sandbox_id, sandbox in list(self._sandboxes.items())[:-1]:
            if excess <= 0:
                return
            if sandbox.busy:
                continue
            sandbox.stop_flush_timer()
            sandbox.flush_now()
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
        sandbox = self._sandbox(stored.id)
        await sandbox.sweep()
        return sandbox.meta

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except SandboxError as error:
            return error_json(error)

    async def _route(self, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        method = request.method
        if path == "/v1/health":
            self._allow(method, "GET")
            return Response.json(
                200, {"ok": True, "version": __version__, "protocol": PROTOCOL_VERSION}
            )
        if path == "/v1/runtimes":
            self._allow(method, "GET")
            return Response.json(
                200, {"runtimes": [runtime.info().to_json() for runtime in self.runtimes.values()]}
            )
        if path.startswith("/v1/runtimes/") and path.endswith("/execute"):
            binding = unquote(path[len("/v1/runtimes/") : -len("/execute")])
            self._allow(method, "POST")
            runtime = self.runtimes.get(binding)
            if runtime is None:
                raise validation_error(f"Unknown binding '{binding}'")
            return await runtime.execute(request)
        if path == "/v1/sandboxes":
            self._allow(method, "GET")
            return Response.json(200, {"sandboxes": await self.list_sandboxes()})
        if path.startswith("/v1/sandboxes/"):
            rest = path[len("/v1/sandboxes/") :]
            raw_id, _, tail = rest.partition("/")
            sandbox_id = unquote(raw_id)
            validate_sandbox_id(sandbox_id)
            sandbox = self._sandbox(sandbox_id)
            inner = Request(method, "/" + tail, request.body, request.headers)
            return await sandbox.handle(inner)
        raise not_found()

    @staticmethod
    def _allow(method: str, allowed: str) -> None:
        if method != allowed:
            raise validation_error("Method not allowed", 405)

    async def list_sandboxes(self) -> list[dict[str, Any]]:
        """Every stored sandbox, from its row alone (no workspace is read); idle ones past
        their deadline are expired first."""
        self._start_sweeping()
        listed = []
        for stored in self.store.sandboxes():
            meta = await self._expired_or_current(stored)
            if meta is None:
                continue
            listed.append(
                {
                    "id": meta.id,
                    "createdAt": iso_from_ms(meta.created_at),
                    "lastUsed": iso_from_ms(meta.last_used),
                    "expiresAt": meta.expires_at,
                }
            )
        return listed

    def _save_session(self, key: tuple[str, str], session: IsolatedSession) -> None:
        """An evicted or closing session writes its pending snapshot first."""
        sandbox = self._sandboxes.get(key[0])
        if sandbox is not None:
            sandbox.persist_snapshot(key[1], session)

    def cancel(self, sandbox_id: str) -> bool:
        sandbox = self._sandboxes.get(sandbox_id)
        return sandbox is not None and sandbox.cancel()

    def close(self) -> None:
        """Save pending snapshots, stop every session, release the store."""
        self.stop_sweeping()
        for sandbox in self._sandboxes.values():
            sandbox.stop_flush_timer()
        self.sessions.close()
        self.store.close()
        shutil.rmtree(self.mirror_root, ignore_errors=True)
