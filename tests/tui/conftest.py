"""Fixtures of the TUI tests: real local engines, a temp data dir and a temp config dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_engine
from tour import fixed_context_ids


@pytest.fixture
def tui_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Config and data under `tmp_path`; the cwd (where exports go) is `tmp_path`."""
    monkeypatch.setenv("SANDBOX_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SANDBOX_WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def perl_engine() -> None:
    require_engine("perl")


@pytest.fixture
def python_engine() -> None:
    require_engine("python")


@pytest.fixture
def ruby_engine() -> None:
    require_engine("ruby")


@pytest.fixture
def stable_ids() -> Iterator[None]:
    with fixed_context_ids():
        yield
