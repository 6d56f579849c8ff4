"""Engines in processes of their own: limits that hold while a guest is blocked in a host
call, crashes that end one process, and OS bounds on what a guest writes."""

from engines.isolated.pool import WorkerPool, worker_pool
from engines.isolated.session import IsolatedSession, WriteBounds, run_isolated

__all__ = ["IsolatedSession", "WorkerPool", "WriteBounds", "run_isolated", "worker_pool"]
