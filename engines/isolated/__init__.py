"""Engines in processes of their own: limits that hold while a guest is blocked in a host
call, crashes that end one process, and guest files that live only in its memory."""

from engines.isolated.pool import WorkerPool, worker_pool
from engines.isolated.process import WorkerDied, return_large_buffers
from engines.isolated.session import (
    Cancellation,
    IsolatedSession,
    WorkspaceSource,
    run_isolated,
)

__all__ = [
    "Cancellation",
    "IsolatedSession",
    "WorkerDied",
    "WorkerPool",
    "WorkspaceSource",
    "return_large_buffers",
    "run_isolated",
    "worker_pool",
]
