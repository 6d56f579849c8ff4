"""The embedded local backend: sandbox semantics in-process, engines on wasmtime, SQLite."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from engines.isolated import worker_pool
from engines.session import Limits
from workbench.api.client import Backend
from workbench.backends.local.engine_manager import LocalEngineManager
from workbench.backends.local.gateway import LocalGateway
from workbench.backends.local.runtimes import EngineProgress, local_runtimes
from workbench.backends.local.sessions import DEFAULT_MAX_RESIDENT, SessionPool
from workbench.backends.local.settings import LocalResources, SandboxSettings, parse_ttl
from workbench.config import TIMEOUT_ENV, parse_timeout
from workbench.core.clock import SYSTEM_CLOCK, Clock
from workbench.paths import DATABASE_NAME, private_data_dir
from workbench.protocol.http import Request, Response
from workbench.store import Store
from workbench.store.database import DEFAULT_HISTORY_LIMIT

IDLE_TTL_ENV = "SANDBOX_WORKBENCH_IDLE_TTL_MS"
MAX_RESIDENT_ENV = "SANDBOX_WORKBENCH_MAX_RESIDENT"
HISTORY_LIMIT_ENV = "SANDBOX_WORKBENCH_HISTORY_LIMIT"
"""Execution history entries kept per context (a positive integer; default 1000)."""
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


def open_local_gateway(
    directory: Path | None = None,
    *,
    ttl_ms: float | None = None,
    max_resident: int | None = None,
    limits: Limits | None = None,
    clock: Clock = SYSTEM_CLOCK,
    history_limit: int | None = None,
    prepare_progress: EngineProgress | None = None,
) -> LocalGateway:
    """The local sandboxes stored under `directory` (default: the user data dir);
    `prepare_progress` hears about engines prepared on their first use."""
    root = private_data_dir(directory)
    if history_limit is None:
        raw = os.environ.get(HISTORY_LIMIT_ENV, "")
        history_limit = int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_HISTORY_LIMIT
    if ttl_ms is None:
        ttl_ms = parse_ttl(os.environ.get(IDLE_TTL_ENV))
    if max_resident is None:
        raw = os.environ.get(MAX_RESIDENT_ENV, "")
        max_resident = int(raw) if raw.isdigit() else DEFAULT_MAX_RESIDENT
    if limits is None:
        limits = Limits(timeout_seconds=parse_timeout(os.environ.get(TIMEOUT_ENV)))
    engine_pool = worker_pool()
    engine_pool.prewarm()
    resources = LocalResources(
        store=Store(root / DATABASE_NAME, history_limit=history_limit),
        runtimes=local_runtimes(engine_pool, limits, prepare_progress),
        sessions=SessionPool(max_resident),
        clock=clock,
        settings=SandboxSettings(ttl_ms=ttl_ms, limits=limits),
        engine_pool=engine_pool,
    )
    return LocalGateway(resources)


def open_local_backend(directory: Path | None = None, **options: Any) -> Backend:
    """The embedded backend over the local store and engines."""
    gateway = open_local_gateway(directory, **options)
    transport = LocalTransport(gateway, f"local ({gateway.store.path.parent})")
    return Backend(transport, name="local", engines=LocalEngineManager())
