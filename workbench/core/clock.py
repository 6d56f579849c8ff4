"""Injectable clock: epoch milliseconds, and the same as a wire timestamp.

Tests and the TUI substitute a ``FixedClock`` so timestamps are reproducible.
"""

from __future__ import annotations

import time
from typing import Protocol

from workbench.protocol.timestamps import iso_from_ms

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "FixedClock",
    "SystemClock",
]


class Clock(Protocol):
    """Anything that tells the current time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch (``Date.now()``)."""
        return time.time_ns() // 1_000_000

    def now_iso(self) -> str:
        """``new Date().toISOString()``."""
        return iso_from_ms(self.now_ms())


class FixedClock:
    """A manually driven clock for tests and replays."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        """The current fixed time."""
        return self._now

    def now_iso(self) -> str:
        """The current fixed time as an ISO string."""
        return iso_from_ms(self._now)

    def set(self, ms: int) -> None:
        """Jump to ``ms``."""
        self._now = ms

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` and return the new time."""
        self._now += ms
        return self._now


SYSTEM_CLOCK = SystemClock()
