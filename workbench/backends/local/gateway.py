"""The gateway protocol (`/v1/...`) over the local sandboxes and runtimes, in-process.

`sandbox-workbench serve` puts this same handler behind HTTP (adding bearer-token
auth), so the embedded backend and a served one answer identically.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from engines.session import Session
from workbench import __version__
from workbench.api.errors import SandboxError
from workbench.api.transport import Response
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.sandbox_object import SandboxObject, SandboxSettings
from workbench.backends.local.sessions import SessionPool
from workbench.core.clock import Clock, iso_from_ms
from workbench.core.ids import validate_sandbox_id
from workbench.gateway.http import Request, error_json, not_found, validation_error
from workbench.store import Store

PROTOCOL_VERSION = 1


class LocalGateway:
    def __init__(
        self,
        *,
        store: Store,
        runtimes: dict[str, LocalRuntime],
        sessions: SessionPool,
        clock: Clock,
        settings: SandboxSettings,
        mirror_root: Path,
    ) -> None:
        self.store = store
        self.runtimes = runtimes
        self.sessions = sessions
        self.clock = clock
        self.settings = settings
        self.mirror_root = mirror_root
        self._sandboxes: dict[str, SandboxObject] = {}
        sessions.before_close = self._save_session
        self._data_version = store.data_version()

    def _sandbox(self, sandbox_id: str) -> SandboxObject:
        version = self.store.data_version()
        if version != self._data_version:
            # Another process committed: cached sandbox state may be stale.
            self._data_version = version
            for cached in self._sandboxes.values():
                cached.reload()
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            sandbox = SandboxObject(
                sandbox_id,
                store=self.store,
                runtimes=self.runtimes,
                sessions=self.sessions,
                clock=self.clock,
                settings=self.settings,
                mirror_root=self.mirror_root,
            )
            self._sandboxes[sandbox_id] = sandbox
        return sandbox

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
        """Every stored sandbox (idle ones past their deadline are expired first)."""
        listed = []
        for stored in self.store.sandboxes():
            sandbox = self._sandbox(stored.id)
            if await sandbox.sweep():
                continue
            meta = sandbox.meta
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

    def _save_session(self, key: tuple[str, str], session: Session) -> None:
        """An evicted or closing session writes its pending snapshot first."""
        sandbox = self._sandboxes.get(key[0])
        if sandbox is not None:
            sandbox.persist_snapshot(key[1], session)

    def cancel(self, sandbox_id: str) -> bool:
        sandbox = self._sandboxes.get(sandbox_id)
        return sandbox is not None and sandbox.cancel()

    def close(self) -> None:
        """Save pending snapshots, stop every session, release the store."""
        for sandbox in self._sandboxes.values():
            sandbox.stop_flush_timer()
        self.sessions.close()
        self.store.close()
        shutil.rmtree(self.mirror_root, ignore_errors=True)
