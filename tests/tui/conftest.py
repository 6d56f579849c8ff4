"""Fixtures of the TUI tests: real local engines, a temp data dir and a temp config dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_engine
from tour import fixed_context_ids
from workbench.api import SANDBOX_MUST_EXIST_FEATURE
from workbench.backends.local import routes


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


@pytest.fixture(params=[True, False], ids=["refused-by-the-backend", "listed-first"])
def refused_by_the_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the backend offers to carry a request out only if its sandbox exists;
    False: a backend without it (an older gateway), on which the workbench lists the
    sandboxes first."""
    if not request.param:
        offered = [name for name in routes.FEATURES if name != SANDBOX_MUST_EXIST_FEATURE]
        monkeypatch.setattr(routes, "FEATURES", offered)
    return bool(request.param)
