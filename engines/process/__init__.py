"""Engines in processes of their own: limits that hold while a guest is blocked in a host
call, crashes that end one process, and guest files that live only in its memory."""

from engines.process.handle import EngineProcessDied, return_large_buffers
from engines.process.pool import EngineProcessPool, engine_process_pool
from engines.process.session import (
    Cancellation,
    GuestSession,
    ProcessSession,
    WorkspaceSource,
    run_stateless,
)

__all__ = [
    "Cancellation",
    "EngineProcessDied",
    "EngineProcessPool",
    "GuestSession",
    "ProcessSession",
    "WorkspaceSource",
    "engine_process_pool",
    "return_large_buffers",
    "run_stateless",
]
