"""Tests of the TUI, and what several of them use."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


def held_until_set(monkeypatch: pytest.MonkeyPatch, owner: type, method: str) -> asyncio.Event:
    """Make `owner.method` (a coroutine) wait until the returned event is set."""
    original = getattr(owner, method)
    release = asyncio.Event()

    async def held(self: Any, *args: Any, **options: Any) -> Any:
        await release.wait()
        return await original(self, *args, **options)

    monkeypatch.setattr(owner, method, held)
    return release
