"""A REPL tab whose context another client deleted (with its sandbox): its next run makes
no sandbox, and the tab says the context is gone and runs no more."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.tui.test_flows import Notifications
from tests.tui.test_other_clients import embedded_app
from tour import (
    WorkbenchPilot,
    create_context,
    create_sandbox,
    main_screen,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import Backend, SandboxInfo
from workbench.api.client import SandboxClient
from workbench.backends.local import open_local_backend
from workbench.config import LocalSettings
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.widgets.repl_pane import GONE_NOTE, GONE_REFUSAL, ReplPane
from workbench.tui.widgets.workbench_tabs import repl_tab_id

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def doomed_perl_tab(pilot: WorkbenchPilot) -> tuple[ReplPane, Backend]:
    """Sandbox `doomed` with a Perl context's tab that ran a cell, and the backend."""
    await until_connected(pilot)
    await create_sandbox(pilot, "doomed")
    repl = await create_context(pilot, "PERL")
    await run_cell(pilot, repl, "6 * 7")
    backend = main_screen(pilot).backend
    assert backend is not None
    return repl, backend


async def test_a_tab_of_a_destroyed_sandbox_is_marked_gone_and_makes_no_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its run made the sandbox again (and failed with a 404 all the same), the destroyed
    sandbox came back in the tree, and the tab failed that way at every run. The run is
    now sent only if the sandbox exists, and its failure says the sandbox is gone."""
    data = tmp_path / "data"
    app = WorkbenchApp(
        data_dir=data, backend_factory=lambda name: open_local_backend(data, embedded=True)
    )
    notes: list[tuple[str, str]] = []
    notify = app.notify

    def record(message: str, *, title: str = "", **kw: Any) -> None:
        notes.append((message, title))
        notify(message, title=title, **kw)

    monkeypatch.setattr(app, "notify", record)
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        repl, backend = await doomed_perl_tab(pilot)
        await backend.sandbox("doomed").destroy()  # another client, unknown to the tab

        await run_cell(pilot, repl, "1 + 1")
        await wait_for(pilot, lambda: repl.gone)
        failed = repl.transcript.cells[-1]
        assert failed.result is None and failed.failure is not None
        assert "SANDBOX_NOT_FOUND" in failed.failure
        shown = " ".join(line.text.strip() for line in repl.transcript.lines)
        assert f"✕ {GONE_NOTE}" in shown
        tab = main.tabs.get_tab(repl_tab_id(repl.context.id))
        assert str(tab.label).endswith(" (gone)")
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("doomed") is None)
        await pilot.pause(0.3)
        assert "doomed" not in {summary.id for summary in await backend.list_sandboxes()}
        assert main.open_tabs.tabs(main.profile) == []  # not reopened next time

        cells = len(repl.transcript.cells)
        repl.code_input.focus()
        repl.set_code("2 + 2")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: (GONE_REFUSAL, repl.title) in notes)
        assert len(repl.transcript.cells) == cells and repl.code_input.text == "2 + 2"
        assert not repl.running
        assert "doomed" not in {summary.id for summary in await backend.list_sandboxes()}

        # Closing it asks only about the code typed in it (refused, and not run).
        await pilot.press("alt+w")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.question == (  # type: ignore[attr-defined]
            f"Close {repl.title}? The code typed in it and not run is lost."
        )
        await pilot.click("#cancel")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        repl.set_code("")
        await pilot.press("alt+w")
        await wait_for(pilot, lambda: main.tabs.repl_for(repl.context.id) is None)
        assert not isinstance(app.screen, ConfirmScreen)


async def test_reads_of_a_sandbox_destroyed_since_it_was_listed_make_no_sandbox(
    tmp_path: Path, refused_by_the_backend: bool
) -> None:
    """A tab's catch-up of other clients' runs, and the reopening of a last session's tab,
        read a sandbox the workbench listed: destroyed just before (here by another client;
        found where this workbench's destroy came just after a cancel's catch-up), each read
        made it again, empty. Now neither makes one: where the backend cannot refuse such a
    read, the sandboxes are listed first (found in review)."""
    app = embedded_app(tmp_path / "data")
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        repl, backend = await doomed_perl_tab(pilot)

        async def listed() -> set[str]:
            return {summary.id for summary in await backend.list_sandboxes()}

        def idle() -> bool:
            return not [worker for worker in app.workers if worker.group == "backend-call"]

        await backend.sandbox("doomed").destroy()  # another client, unknown to the tab
        main.connection.catch_up("doomed", repl.context.id, 0, None, repl.generation)
        await wait_for(pilot, idle)
        assert "doomed" not in await listed()
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("doomed") is None)

        main.connection.reopen_context("doomed", repl.context)
        await wait_for(pilot, idle)
        assert "doomed" not in await listed()


@pytest.mark.usefixtures("ruby_engine")
async def test_a_context_its_binding_no_longer_offers_is_not_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reset (alt+r) of a Ruby context made while Ruby contexts were on deleted it and
    then failed to make the new one (found in review): it is refused first."""
    data = tmp_path / "data"
    settings = LocalSettings(ruby_contexts=True)
    async with open_local_backend(data, embedded=True, settings=settings) as extended:
        context = await extended.sandbox("box").interpreter.create_code_context("RUBY")
    app = WorkbenchApp(
        data_dir=data, backend_factory=lambda name: open_local_backend(data, embedded=True)
    )
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        app.main_screen.connection.change_context("box", context, recreate=True)
        await wait_for(pilot, lambda: bool(notes.errors()))
        assert "offers no RUBY code contexts now" in notes.errors()[0]
        assert app.backend is not None
        listed = await app.backend.sandbox("box").interpreter.list_code_contexts()
        assert [item.id for item in listed] == [context.id]


async def test_a_context_deleted_while_an_info_read_is_on_its_way_leaves_the_tree(
    tmp_path: Path, refused_by_the_backend: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read that follows a context's removal must come after one already on its way,
    whose answer predates the removal: else that answer, shown last, kept the deleted
    context in the tree (found in review)."""
    app = embedded_app(tmp_path / "data")
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "kept")
        backend = main.backend
        assert backend is not None
        context = await backend.sandbox("kept").interpreter.create_code_context("PERL")

        def idle() -> bool:
            return not [worker for worker in app.workers if worker.group == "backend-call"]

        await wait_for(pilot, idle)
        get_info = SandboxClient.get_info
        late = [True]

        async def late_once(self: SandboxClient) -> SandboxInfo:
            info = await get_info(self)
            if late and late.pop():
                await asyncio.sleep(1.0)  # read before the removal, answered after it
            return info

        monkeypatch.setattr(SandboxClient, "get_info", late_once)
        main.connection.load_sandbox_info("kept")
        await pilot.pause(0.3)
        main.connection.change_context("kept", context, recreate=False)
        await pilot.pause(1.5)
        await wait_for(pilot, idle)
        assert [item.id for item in main.sandbox_infos["kept"].contexts] == []
