"""The runtimes view shows local engine states and prepares engines through the API."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import javascript_cache_missing_a_module
from tests.tui.test_flows import local_gateway
from tour import until_connected, wait_for
from workbench.api import Backend, MockTransport
from workbench.backends.local import open_local_backend
from workbench.tui.app import WorkbenchApp

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def notifications(app: WorkbenchApp) -> list[str]:
    return [f"{note.title}: {note.message}" for note in app._notifications]


def state_of(app: WorkbenchApp, binding: str) -> str:
    table = app.main_screen.runtimes_table
    return str(table.get_cell(binding, "state"))


async def test_engine_states_and_a_failed_preparation_without_npm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an empty engine cache and no npm on PATH: only JavaScript (built with npm) cannot be
    # prepared; Perl and Ruby are downloaded without npm
    monkeypatch.setenv("SANDBOX_WORKBENCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    data = tmp_path / "data"
    app = WorkbenchApp(
        data_dir=data, backend_factory=lambda name: open_local_backend(data, embedded=True)
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: "cannot prepare" in state_of(app, "JAVASCRIPT"))
        assert "npm not found" in state_of(app, "JAVASCRIPT")
        assert state_of(app, "PYTHON") == "not prepared"
        assert state_of(app, "PERL") == "not prepared"
        await pilot.press("f12")
        app.main_screen.runtimes_table.move_cursor(row=0)  # JAVASCRIPT
        await pilot.press("f7")
        await wait_for(pilot, lambda: any("Engine not prepared" in n for n in notifications(app)))
        assert any("npm not found" in n for n in notifications(app))


async def test_prepare_from_the_runtimes_view_reports_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a private copy of the prepared JavaScript engine without one compiled module: f7
    # compiles it
    cache_root = tmp_path / "cache"
    private = javascript_cache_missing_a_module(cache_root)
    monkeypatch.setenv("SANDBOX_WORKBENCH_CACHE_DIR", str(cache_root))
    data = tmp_path / "data"
    app = WorkbenchApp(
        data_dir=data, backend_factory=lambda name: open_local_backend(data, embedded=True)
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: state_of(app, "JAVASCRIPT") == "not prepared")
        table = app.main_screen.runtimes_table
        shown: list[tuple[str, str]] = []  # every state shown: on an idle machine the
        show = table.show_engine_state  # compiling step can pass between two looks

        def recorded(binding: str, text: str) -> None:
            shown.append((binding, text))
            show(binding, text)

        monkeypatch.setattr(table, "show_engine_state", recorded)
        await pilot.press("f12")
        table.move_cursor(row=0)
        await pilot.press("f7")
        await wait_for(pilot, lambda: state_of(app, "JAVASCRIPT") == "ready", timeout=180)
        assert any(
            binding == "JAVASCRIPT" and text.startswith("preparing: compiling")
            for binding, text in shown
        ), shown
        assert any("Engine prepared" in n for n in notifications(app))
    assert private.is_ready()


async def test_a_remote_profile_shows_its_runtimes_deployed_after_the_local_one(
    tmp_path: Path,
) -> None:
    """QA: back on a remote profile after the local one, the runtimes view kept the local
    engines' states ("ready") beside the remote runtimes."""
    data = tmp_path / "data"
    with local_gateway(tmp_path / "remote") as gateway:

        def open_backend(name: str) -> Backend:
            if name == "dev":  # a gateway that runs no engine here, as a remote one
                return Backend(MockTransport(gateway.handle), name="dev")
            return open_local_backend(data, embedded=True)

        app = WorkbenchApp(data_dir=data, backend_factory=open_backend)
        main = app.main_screen
        async with app.run_test(size=(140, 40)) as pilot:
            await until_connected(pilot)
            await wait_for(pilot, lambda: state_of(app, "PERL") == "ready")
            main.switch_profile("dev")
            await until_connected(pilot)
            await wait_for(pilot, lambda: app.profile == "dev" and state_of(app, "PERL") != "ready")
            assert {state_of(app, binding) for binding in main.runtimes_table.protocols} == {
                "deployed"
            }
