"""The embedded local backend: sandbox semantics in-process, engines on wasmtime, SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from engines.session import Limits
from workbench.api.client import Backend
from workbench.api.transport import Response
from workbench.backends.local.engine_manager import LocalEngineManager
from workbench.backends.local.gateway import LocalGateway
from workbench.backends.local.runtimes import local_runtimes
from workbench.backends.local.sandbox_object import SandboxSettings, parse_ttl
from workbench.backends.local.sessions import DEFAULT_MAX_RESIDENT, SessionPool
from workbench.core.clock import SYSTEM_CLOCK, Clock
from workbench.gateway.http import Request
from workbench.paths import DATABASE_NAME, data_dir
from workbench.store import Store

IDLE_TTL_ENV = "SANDBOX_WORKBENCH_IDLE_TTL_MS"
MAX_RESIDENT_ENV = "SANDBOX_WORKBENCH_MAX_RESIDENT"

__all__ = ["LocalGateway", "LocalTransport", "open_local_backend", "open_local_gateway"]


class LocalTransport:
    """Sends gateway requests to an in-process `LocalGateway`."""

    def __init__(self, gateway: LocalGateway, description: str) -> None:
        self.gateway = gateway
        self.description = description

    async def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Response:
        payload = b"" if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json", "content-length": str(len(payload))}
        call = self.gateway.handle(Request(method, path, payload, headers))
        if timeout is None:
            return await call
        return await asyncio.wait_for(call, timeout)

    async def cancel(self, sandbox_id: str) -> bool:
        return self.gateway.cancel(sandbox_id)

    async def aclose(self) -> None:
        self.gateway.close()


def _mirror_root() -> Path:
    """A private scratch dir for materialized workspaces: tmpfs when there is one (the
    mirrors are caches of the SQLite tree; each process keeps its own)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="sandbox-workbench-", dir=base))


def open_local_gateway(
    directory: Path | None = None,
    *,
    ttl_ms: float | None = None,
    max_resident: int | None = None,
    limits: Limits | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> LocalGateway:
    """The local sandboxes stored under `directory` (default: the user data dir)."""
    root = data_dir(directory)
    root.mkdir(parents=True, exist_ok=True)
    if ttl_ms is None:
        ttl_ms = parse_ttl(os.environ.get(IDLE_TTL_ENV))
    if max_resident is None:
        raw = os.environ.get(MAX_RESIDENT_ENV, "")
        max_resident = int(raw) if raw.isdigit() else DEFAULT_MAX_RESIDENT
    return LocalGateway(
        store=Store(root / DATABASE_NAME),
        runtimes=local_runtimes(limits),
        sessions=SessionPool(max_resident),
        clock=clock,
        settings=SandboxSettings(ttl_ms=ttl_ms, limits=limits or Limits()),
        mirror_root=_mirror_root(),
    )


def open_local_backend(directory: Path | None = None, **options: Any) -> Backend:
    """The embedded backend over the local store and engines."""
    gateway = open_local_gateway(directory, **options)
    transport = LocalTransport(gateway, f"local ({gateway.store.path.parent})")
    return Backend(transport, name="local", engines=LocalEngineManager())
