"""Ending asyncio tasks without losing a cancel of the task that ends them."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended; its own cancel is not raised here, what
    else it raised is. A cancel of the caller that comes meanwhile is raised, however the
    task ended: `suppress(CancelledError)` around the wait swallowed it, and the caller
    went on as if nobody had stopped it."""
    caller = asyncio.current_task()
    cancels = 0 if caller is None else caller.cancelling()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass  # the task's, or the caller's: told apart below
    finally:
        if caller is not None and caller.cancelling() > cancels:
            raise asyncio.CancelledError
