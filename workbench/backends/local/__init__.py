"""The embedded local backend: sandbox semantics in-process, engines on wasmtime, SQLite."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engines.process import engine_process_pool, return_large_buffers
from engines.result import Limits
from workbench import __version__
from workbench.api.client import Backend
from workbench.api.transport import answer_in_process
from workbench.backends.local.gateway import LocalGateway
from workbench.backends.local.runtimes import EngineProgress, LocalEngineManager, local_runtimes
from workbench.backends.local.sessions import (
    DEFAULT_MAX_RESIDENT,
    DEFAULT_MEMORY_BUDGET_MIB,
    SessionPool,
)
from workbench.backends.local.settings import LocalResources, SandboxSettings, parse_ttl
from workbench.backends.owner import OwnerInfo, OwnerLock
from workbench.config import (
    HISTORY_LIMIT_ENV,
    MAX_RESIDENT_ENV,
    MEMORY_BUDGET_ENV,
    TIMEOUT_ENV,
    LocalSettings,
    env_count,
    local_settings,
    parse_timeout,
)
from workbench.core.clock import SYSTEM_CLOCK, Clock
from workbench.paths import DATABASE_NAME, private_data_dir
from workbench.protocol.http import EventSink, Response
from workbench.store import Store
from workbench.store.database import DEFAULT_HISTORY_LIMIT

IDLE_TTL_ENV = "SANDBOX_WORKBENCH_IDLE_TTL_MS"
__all__ = ["LocalGateway", "LocalTransport", "open_local_backend", "open_local_gateway"]


class LocalTransport:
    """Sends gateway requests to an in-process `LocalGateway`."""

    enforces_deadlines = True

    def __init__(self, gateway: LocalGateway, description: str) -> None:
        self.gateway = gateway
        self.description = description

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
        """One request; given up (its timeout, its task cancelled), it cancels the
        sandbox's execution, which still ends and is stored as any other."""
        return await answer_in_process(
            self.gateway.handle,
            method,
            path,
            body,
            timeout=timeout,
            on_event=on_event,
            headers=headers,
        )

    async def cancel(self, sandbox_id: str, context_id: str | None = None) -> bool:
        return self.gateway.cancel(sandbox_id, context_id)

    async def aclose(self) -> None:
        self.gateway.close()


def open_local_gateway(
    directory: Path | None = None,
    *,
    ttl_ms: float | None = None,
    max_resident: int | None = None,
    memory_budget: int | None = None,
    limits: Limits | None = None,
    clock: Clock = SYSTEM_CLOCK,
    history_limit: int | None = None,
    prepare_progress: EngineProgress | None = None,
    owner_kind: str = "embedded",
    socket: str | None = None,
    settings: LocalSettings | None = None,
) -> LocalGateway:
    """The local sandboxes stored under `directory` (default: the user data dir), owned by
    this process until the gateway is closed (`StoreOwnedError` when another process owns
    them: the daemon, or another embedded backend); `prepare_progress` hears about engines
    prepared on their first use. `owner_kind` and `socket` say who owns it (the daemon
    passes its own). `settings`: how it differs from a default deployment (default: the
    environment's and the config file's, `local_settings`). `max_resident` and
    `memory_budget` (bytes) bound the live sessions (default: their environment
    variables, else 32 and 448 MiB)."""
    root = private_data_dir(directory)
    owner = OwnerLock(root)
    owner.acquire(OwnerInfo(os.getpid(), owner_kind, __version__, socket, int(time.time() * 1000)))
    try:
        return _open_gateway(
            root,
            owner,
            ttl_ms=ttl_ms,
            max_resident=max_resident,
            memory_budget=memory_budget,
            limits=limits,
            clock=clock,
            history_limit=history_limit,
            prepare_progress=prepare_progress,
            settings=local_settings() if settings is None else settings,
        )
    except BaseException:
        owner.release()
        raise


def _open_gateway(
    root: Path,
    owner: OwnerLock,
    *,
    ttl_ms: float | None,
    max_resident: int | None,
    memory_budget: int | None,
    limits: Limits | None,
    clock: Clock,
    history_limit: int | None,
    prepare_progress: EngineProgress | None,
    settings: LocalSettings,
) -> LocalGateway:
    if history_limit is None:
        history_limit = env_count(HISTORY_LIMIT_ENV, DEFAULT_HISTORY_LIMIT)
    if ttl_ms is None:
        ttl_ms = parse_ttl(os.environ.get(IDLE_TTL_ENV))
    if max_resident is None:
        max_resident = env_count(MAX_RESIDENT_ENV, DEFAULT_MAX_RESIDENT)
    if memory_budget is None:
        memory_budget = env_count(MEMORY_BUDGET_ENV, DEFAULT_MEMORY_BUDGET_MIB) << 20
    if limits is None:
        limits = Limits(timeout_seconds=parse_timeout(os.environ.get(TIMEOUT_ENV)))
    return_large_buffers()
    engine_processes = engine_process_pool()
    engine_processes.prewarm()
    resources = LocalResources(
        store=Store(root / DATABASE_NAME, history_limit=history_limit),
        runtimes=local_runtimes(
            engine_processes, limits, prepare_progress, ruby_contexts=settings.ruby_contexts
        ),
        sessions=SessionPool(max_resident, memory_budget),
        clock=clock,
        settings=SandboxSettings(ttl_ms=ttl_ms, file_api=settings.file_api, limits=limits),
        local=settings,
        engine_process_pool=engine_processes,
    )
    return LocalGateway(resources, owner)


def open_local_backend(
    directory: Path | None = None, *, embedded: bool = False, **options: Any
) -> Backend:
    """The local backend of `directory` (default: the user data dir): through its daemon
    (started on demand; `execution_timeout` is the one option), or with `embedded=True`
    in this process, which then owns the store until the backend is closed (the options
    of `open_local_gateway`)."""
    if not embedded:
        from workbench.backends.daemon import open_daemon_backend

        unknown = set(options) - {"execution_timeout"}
        if unknown:
            raise TypeError(
                f"{', '.join(sorted(unknown))}: options of the embedded backend "
                "(pass embedded=True)"
            )
        return open_daemon_backend(directory, **options)
    gateway = open_local_gateway(directory, **options)
    transport = LocalTransport(gateway, f"local ({gateway.store.path.parent})")
    return Backend(transport, name="local", engines=LocalEngineManager(), served_by="this process")
