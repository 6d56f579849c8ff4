"""Snapshot tests of the main screens (pytest-textual-snapshot), from the tour states.

Deterministic content: a fixed clock, fixed context ids, hidden timings and fuel use.
Baselines live in tests/__snapshots__/test_tui_snapshots/. Update them with
`pytest tests/test_tui_snapshots.py --snapshot-update`, then look at the SVGs (e.g.
`rsvg-convert`) before accepting them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.tui.conftest import perl_engine, python_engine, stable_ids, tui_dirs
from tour import TOUR_STATES, WorkbenchPilot, settle, tour_app

__all__ = [
    "perl_engine",
    "python_engine",
    "stable_ids",
    "tui_dirs",
]  # fixtures shared with tests/tui

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine", "stable_ids")]

WIDE = (120, 40)
NARROW = (80, 24)
WIDE_STATES = [
    "start",
    "sandbox-info",
    "repl",
    "file-view",
    "create-context",
    "create-sandbox",
    "help",
    "runtimes",
    "history-search",
    "checkpoints",
]
NARROW_STATES = ["start", "sandbox-info", "repl", "file-view", "create-context", "checkpoints"]


def check(snap_compare: Any, tmp_path: Path, state: str, size: tuple[int, int]) -> bool:
    async def reach(pilot: WorkbenchPilot) -> None:
        await TOUR_STATES[state](pilot)
        await settle(pilot)

    return bool(snap_compare(tour_app(tmp_path / "data"), run_before=reach, terminal_size=size))


@pytest.mark.parametrize("state", WIDE_STATES)
def test_wide(snap_compare: Any, tmp_path: Path, state: str) -> None:
    assert check(snap_compare, tmp_path, state, WIDE)


@pytest.mark.parametrize("state", NARROW_STATES)
def test_narrow(snap_compare: Any, tmp_path: Path, state: str) -> None:
    assert check(snap_compare, tmp_path, state, NARROW)


@pytest.mark.usefixtures("python_engine")
@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["wide", "narrow"])
def test_inspector(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """A Python context's names beside its REPL, read from a copy of the context."""
    assert check(snap_compare, tmp_path, "inspector", size)


@pytest.mark.usefixtures("python_engine")
@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["wide", "narrow"])
def test_streaming(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """A cell still running (its code sleeps for minutes): its code and its output so far
    under the transcript, and the key that cancels it; leaving the app cancels it."""
    assert check(snap_compare, tmp_path, "streaming", size)
