"""Engines a backend runs itself (the local backend): their state, and preparing them.

Remote backends have no such manager (`Backend.engines` is None): their runtimes are
deployed Workers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

Progress = Callable[[str, float], None]
"""A preparation step's label and the fraction done (0.0 to 1.0); called from a thread."""


@dataclass(frozen=True)
class EngineInfo:
    language: str
    engine: str
    version: str
    state: str
    """`ready`, `not prepared` or `cannot prepare`."""
    detail: str = ""
    """Why an engine cannot be prepared, and how to fix it."""

    @property
    def ready(self) -> bool:
        return self.state == "ready"


class EngineManager(Protocol):
    async def statuses(self) -> list[EngineInfo]:
        """Every language's engine state."""
        ...

    async def prepare(self, language: str, progress: Progress) -> None:
        """Fetch or build and compile one engine (minutes on a fresh machine); raises
        `EnginePrepareError` with an actionable message when it cannot."""
        ...


class EnginePrepareError(Exception):
    """An engine could not be prepared; the message says why and how to fix it."""
