"""Ending asyncio tasks without losing a cancel of the task that ends them."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended; its own cancel is not raised here. A
    cancel of the caller that comes meanwhile is raised: `suppress(CancelledError)`
    around the wait swallowed it too, and the caller went on as if nobody had stopped it."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        caller = asyncio.current_task()
        if caller is not None and caller.cancelling():
            raise
