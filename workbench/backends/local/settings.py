"""Settings of the local sandboxes, the idle-expiry rules they follow (spec 8.3), and
the resources they share."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from engines.process import EngineProcessPool
from engines.result import Limits
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.sessions import SessionPool
from workbench.config import LocalSettings
from workbench.core.clock import Clock
from workbench.store import Store, StoredSandbox

DEFAULT_TTL_MS = 86_400_000
MAX_TTL_MS = 100 * 365 * DEFAULT_TTL_MS
"""Longer TTLs count as a hundred years (ours, not the spec's): a deadline past the
range of a date (JavaScript's, which the wire's timestamps follow) broke the sandbox's
row and every listing of it."""


def parse_ttl(value: str | None) -> float:
    """Spec 8.3: unset/empty → 24 h; a finite number ≥ 0 → that (at most `MAX_TTL_MS`);
    anything else → 24 h."""
    if value is None or value.strip() == "":
        return DEFAULT_TTL_MS
    try:
        ttl = float(value)
    except ValueError:
        return DEFAULT_TTL_MS
    return min(ttl, MAX_TTL_MS) if ttl >= 0 and ttl != float("inf") else DEFAULT_TTL_MS


def idle_deadline_passed(sandbox: StoredSandbox, ttl_ms: float, now_ms: int) -> bool:
    """The idle alarm of `sandbox` would fire now (spec 8.3): expiry is on and its armed
    deadline is reached. Decided from the stored row alone."""
    return ttl_ms != 0 and sandbox.expires_at is not None and now_ms >= sandbox.expires_at


@dataclass
class SandboxSettings:
    ttl_ms: float = DEFAULT_TTL_MS
    """0 disables idle expiry."""
    file_api: bool = True
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class LocalResources:
    """What every local sandbox shares: the store, the runtimes and their engine
    processes, the resident sessions, the clock and the settings."""

    store: Store
    runtimes: dict[str, LocalRuntime]
    sessions: SessionPool
    clock: Clock
    settings: SandboxSettings
    engine_process_pool: EngineProcessPool
    local: LocalSettings = field(default_factory=LocalSettings)
    """The settings it was opened with (the daemon reports them)."""
    inspections: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(2))
    """Inspections that may run at once, each in an engine process of its own; the rest
    wait before they read a context's state, so a burst holds neither engine threads
    nor copies of snapshots."""
