"""A REPL tab follows its context's history: runs another client made there show up, in
order and once, when a run's count jumps over them or on a refresh (F5); tabs of a
sandbox another client destroyed are marked gone by a refresh."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from tests.api.test_execution import BUSY_TWO_SECONDS, UNTIL_GIVEN_UP
from tests.tui.test_flows import Notifications
from tour import WorkbenchPilot, create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.sync.runner import entry_runner_code
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.cell_picker_screen import cell_summary
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.transcript_cell import FROM_ANOTHER_CLIENT
from workbench.tui.widgets.live_output import LiveOutput
from workbench.tui.widgets.repl_pane import GIVEN_UP_NOTE, GONE_NOTE, WAITING_TURN, ReplPane
from workbench.tui.widgets.workbench_tabs import repl_tab_id

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def embedded_app(data: Path, **options: object) -> WorkbenchApp:
    """The app on an embedded local backend: the test's calls on it are another client."""
    return WorkbenchApp(
        data_dir=data,
        backend_factory=lambda name: open_local_backend(data, embedded=True, **options),
    )


async def other_client_runs(backend: Backend, sandbox_id: str, repl: ReplPane, code: str) -> None:
    await backend.sandbox(sandbox_id).interpreter.run_code(code, context=repl.context.id)


def numbers(repl: ReplPane) -> list[int | None]:
    return [cell.number for cell in repl.transcript.cells]


def shown_text(repl: ReplPane) -> str:
    return "\n".join(line.text for line in repl.transcript.lines)


def live_text(repl: ReplPane) -> str:
    """What the running cell printed so far."""
    return "\n".join(line.text for line in repl.query_one(LiveOutput).lines)


async def test_runs_of_another_client_show_before_the_run_that_skipped_them(
    tmp_path: Path,
) -> None:
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "my $x = 1; $x")
        backend = app.main_screen.backend
        assert backend is not None
        await other_client_runs(backend, "shared", repl, 'print "from cli\\n"; 40 + 2')
        await other_client_runs(backend, "shared", repl, "6 * 7")
        await run_cell(pilot, repl, "1 + 1")
        await wait_for(pilot, lambda: numbers(repl) == [1, 2, 3, 4])
        cells = repl.transcript.cells
        assert [cell.from_another_client for cell in cells] == [False, True, True, False]
        assert cells[1].result is not None and cells[1].result.stdout == ["from cli"]
        assert repl.history == ["my $x = 1; $x", 'print "from cli\\n"; 40 + 2', "6 * 7", "1 + 1"]
        assert shown_text(repl).count(FROM_ANOTHER_CLIENT) == 2
        assert shown_text(repl).index("from cli") < shown_text(repl).index("1 + 1")
        assert repl.transcript.current_cell is cells[-1]

        await pilot.press("f5")  # nothing new: nothing added again
        await pilot.pause(0.5)
        await run_cell(pilot, repl, "2 + 2")
        await pilot.pause(0.3)
        assert numbers(repl) == [1, 2, 3, 4, 5]


async def test_a_refresh_shows_the_runs_of_another_client_once(tmp_path: Path) -> None:
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "1")
        backend = app.main_screen.backend
        assert backend is not None
        await other_client_runs(backend, "shared", repl, "our $z = 42")
        await pilot.press("f5")
        await wait_for(pilot, lambda: numbers(repl) == [1, 2])
        assert repl.transcript.cells[1].from_another_client
        await pilot.press("f5")
        await pilot.pause(0.5)
        await run_cell(pilot, repl, "$z")
        await pilot.pause(0.3)
        assert numbers(repl) == [1, 2, 3]
        assert repl.history == ["1", "our $z = 42", "$z"]


async def test_runs_past_the_history_limit_are_counted_not_shown(tmp_path: Path) -> None:
    app = embedded_app(tmp_path / "data", history_limit=2)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "1")
        backend = app.main_screen.backend
        assert backend is not None
        for value in range(2, 6):
            await other_client_runs(backend, "shared", repl, str(value))
        await run_cell(pilot, repl, "6")
        await wait_for(pilot, lambda: numbers(repl) == [1, 5, 6])
        assert "… 3 runs by another client are past the history's limit" in shown_text(repl)


async def test_a_refresh_marks_the_tabs_of_a_destroyed_sandbox_gone(tmp_path: Path) -> None:
    app = embedded_app(tmp_path / "data")
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "doomed")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "6 * 7")
        backend = main.backend
        assert backend is not None
        await backend.sandbox("doomed").destroy()  # another client
        await pilot.press("f5")
        await wait_for(pilot, lambda: repl.gone)
        tab = main.tabs.get_tab(repl_tab_id(repl.context.id))
        assert str(tab.label).endswith(" (gone)")
        assert GONE_NOTE in " ".join(line.text.strip() for line in repl.transcript.lines)
        assert main.open_tabs.tabs(main.profile) == []
        await pilot.pause(0.3)
        assert "doomed" not in {summary.id for summary in await backend.list_sandboxes()}


async def test_a_watch_run_of_another_client_shows_its_entry_not_its_runner(
    tmp_path: Path,
) -> None:
    """`watch --run` in a process of its own runs generated code in the context: the tab
    labels that run with its entry, as its own watch's runs, shows the entry's output, and
    leaves the generated code out of what ↑ and the history search recall; the same once
    the context is opened again."""
    app = embedded_app(tmp_path / "data")
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")
        backend = main.backend
        assert backend is not None
        sandbox = backend.sandbox("shared")
        await sandbox.mkdir("/workspace/app")
        await sandbox.write_file("/workspace/app/main.pl", 'print "the entry ran\\n";')
        runner = entry_runner_code("perl", "/workspace/app/main.pl", "/workspace/app")
        await sandbox.interpreter.run_code(runner, context=repl.context.id)
        await run_cell(pilot, repl, "1 + 1")
        await wait_for(pilot, lambda: numbers(repl) == [1, 2])
        watched = repl.transcript.cells[0]
        assert watched.label == "watch run: main.pl" and watched.from_another_client
        assert "the entry ran" in shown_text(repl)
        assert "$LOADED_FEATURES" not in shown_text(repl) and "my ($entry" not in shown_text(repl)
        assert repl.history == ["1 + 1"]

        context = repl.context
        await main.tabs.close_repl(context.id)
        main.open_context("shared", context)
        await wait_for(pilot, lambda: main.active_repl not in (None, repl))
        reopened = main.active_repl
        assert reopened is not None and reopened.context.id == context.id
        await wait_for(pilot, lambda: numbers(reopened) == [1, 2])
        assert reopened.transcript.cells[0].label == "watch run: main.pl"
        assert "my ($entry" not in shown_text(reopened)
        assert reopened.history == ["1 + 1"]
        assert cell_summary(reopened.transcript.cells[0]) == "[1] ⟳ watch run: main.pl"


async def test_a_cell_waiting_behind_another_client_s_run_says_so(tmp_path: Path) -> None:
    """The cell's status said "running" while it waited, in silence, for another
    client's run in the same sandbox to end (the CLI now says so; so does the tab)."""
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        repl, backend = await perl_tab_in_shared(pilot, app)
        other = asyncio.ensure_future(
            backend.sandbox("shared").interpreter.run_code(BUSY_TWO_SECONDS, binding="PERL")
        )
        await asyncio.sleep(0.3)  # its turn taken
        repl.code_input.focus()
        # Silent once it runs: about two seconds of copying (a bare loop would run out of fuel).
        repl.set_code(
            'my $end = time + 2; my $s = "a" x 8e6; my $t = $s . 1 while time < $end; 1 + 1'
        )
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: WAITING_TURN in str(repl.run_status.render()), timeout=10)
        finished = await other
        assert finished.results and finished.results[0].text == "done", finished.error
        # Its turn came: it says it runs, though it writes nothing.
        await wait_for(pilot, lambda: "running" in str(repl.run_status.render()), timeout=10)
        assert repl.running and WAITING_TURN not in str(repl.run_status.render())
        await wait_for(pilot, lambda: not repl.running, timeout=20)
        result = repl.transcript.cells[-1].result
        assert result is not None and result.results[0].text == "2"


async def perl_tab_in_shared(pilot: WorkbenchPilot, app: WorkbenchApp) -> tuple[ReplPane, Backend]:
    """A Perl context's tab in sandbox `shared`, and the backend the test's calls go to
    as another client's."""
    await until_connected(pilot)
    await create_sandbox(pilot, "shared")
    repl = await create_context(pilot, "PERL")
    backend = app.main_screen.backend
    assert backend is not None
    return repl, backend


async def give_up_while_waiting(
    pilot: WorkbenchPilot, backend: Backend, repl: ReplPane, code: str
) -> asyncio.Future[None]:
    """Queue `code` in the tab behind another client's run in its context, and press
    ctrl+g while it waits; the other client's run, still going."""
    other = asyncio.ensure_future(other_client_runs(backend, "shared", repl, BUSY_TWO_SECONDS))
    await asyncio.sleep(0.3)  # its turn taken
    repl.code_input.focus()
    repl.set_code(code)
    await pilot.press("ctrl+r")
    await wait_for(pilot, lambda: repl.waiting, timeout=10)
    await pilot.press("ctrl+g")
    await wait_for(pilot, lambda: not repl.running, timeout=10)
    return other


async def test_cancelling_a_cell_that_waits_gives_it_up_not_the_run_ahead(
    tmp_path: Path,
) -> None:
    """ctrl+g on a cell queued behind another client's run in the same context asked the
    backend to interrupt the context's run, which was the other client's: it was
    cancelled and the cell ran after all (QA). The cell's own request is given up."""
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        repl, backend = await perl_tab_in_shared(pilot, app)
        other = await give_up_while_waiting(pilot, backend, repl, "our $given_up = 1")
        given_up = repl.transcript.cells[-1]
        assert given_up.failure == GIVEN_UP_NOTE
        # The backend counted no run for it: no number (a guess doubled or reordered them).
        assert given_up.number is None and "In [ ] perl" in shown_text(repl)
        await other
        interpreter = backend.sandbox("shared").interpreter
        [ahead] = await interpreter.history(repl.context.id)
        assert ahead.result is not None and ahead.result.error is None, ahead.result
        assert [entry.text for entry in ahead.result.results] == ["done"]
        after = await interpreter.run_code("defined $given_up ? 1 : 0", context=repl.context.id)
        assert [entry.text for entry in after.results] == ["0"]
        await run_cell(pilot, repl, "2 + 2")  # run 3: the other client's two come before it
        await wait_for(pilot, lambda: numbers(repl) == [None, 1, 2, 3], timeout=10)


async def test_a_cell_waiting_behind_another_tab_s_run_names_that_tab(tmp_path: Path) -> None:
    """A cell queued behind a run of this workbench's other tab in the same sandbox names
    that tab: the label said "another client's run", which sent the user looking for one."""
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        first = await create_context(pilot, "PERL")
        second = await create_context(pilot, "PERL")
        tabs = app.main_screen.tabs
        tabs.activate(repl_tab_id(first.context.id))
        await pilot.pause()
        # Each run ends only when given up, once what it is for was seen (runs of a few
        # seconds ended before a loaded machine got there: a flake).
        first.set_code(UNTIL_GIVEN_UP)
        first.code_input.focus()
        await wait_for(pilot, lambda: first.code_input.has_focus, timeout=5)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: first.running, timeout=5)
        # Its own turn taken (on a loaded machine it may wait for the store, and a tab that
        # waits is named by none).
        await pilot.pause(0.6)
        await wait_for(pilot, lambda: not first.waiting, timeout=10)
        backend = app.main_screen.backend
        assert backend is not None
        other = asyncio.ensure_future(  # another client's run, queued behind the tab's
            backend.sandbox("shared").interpreter.run_code(UNTIL_GIVEN_UP, binding="PERL")
        )
        await asyncio.sleep(0.3)
        tabs.activate(repl_tab_id(second.context.id))
        await pilot.pause()
        second.code_input.focus()
        await wait_for(pilot, lambda: second.code_input.has_focus, timeout=5)
        second.set_code("1 + 1")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: second.running, timeout=5)
        expected = f"waiting for the run in tab {first.title} (same sandbox) to end"
        await wait_for(pilot, lambda: expected in str(second.run_status.render()), timeout=10)
        assert WAITING_TURN not in str(second.run_status.render())
        # The tab's run ends and the other client's takes the turn: it no longer names it.
        first.cancel_run()
        await wait_for(pilot, lambda: not first.running, timeout=20)
        await pilot.pause(0.1)
        assert second.running and WAITING_TURN in str(second.run_status.render())
        assert not other.done()
        other.cancel()  # the other client gives up: the cell's turn comes
        with contextlib.suppress(asyncio.CancelledError):
            await other
        await wait_for(pilot, lambda: not second.running, timeout=20)
        result = second.transcript.cells[-1].result
        assert result is not None and result.results[0].text == "2"


async def test_the_waiting_label_gives_way_only_to_its_own_end(tmp_path: Path) -> None:
    """Its turn coming ("started"), or a first output line where a server sends no
    "started" (an older `serve`), ends the waiting label; a cancel's label stays."""
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")

        def label() -> str:
            return str(repl.run_status.render())

        repl.run_status.start("running", repl.cancel_hint())  # as a cell's run starts it
        repl.note_waiting(True)
        assert WAITING_TURN in label()
        repl.show_output([("stdout", "first line")])
        assert WAITING_TURN not in label() and "running" in label()
        repl.note_waiting(True)
        repl.note_waiting(False)
        assert "running" in label()
        repl.cancel_run()  # running, not waiting: the backend is asked to interrupt it
        repl.note_waiting(False)
        repl.show_output([("stdout", "late line")])
        assert "cancelling" in label(), label()
        # A label is plain text: a context's title comes from the backend.
        repl.run_status.relabel(f"waiting for the run in tab [/] {repl.title}")
        assert f"[/] {repl.title}" in label()
        repl.run_status.stop()
        await pilot.pause(0.2)


@pytest.mark.usefixtures("python_engine")
async def test_destroying_a_sandbox_cancels_its_running_cells_and_says_when_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F8 on a sandbox with a running cell did nothing visible until the run ended (QA):
    the dialog says this workbench's running cells are cancelled first, and they are;
    a destroy that waits behind another client's run says so."""
    app = embedded_app(tmp_path / "data")
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "doomed")
        repl = await create_context(pilot, "PERL")
        repl.code_input.focus()
        repl.set_code(UNTIL_GIVEN_UP)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: repl.running, timeout=5)
        main.sandbox_tree.focus()
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert isinstance(app.screen, ConfirmScreen)
        assert f"cancelled first (tabs {repl.title})" in app.screen.question
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: "doomed" not in main.sandbox_infos, timeout=20)
        assert notes.titled("Sandbox")[-1] == "Destroyed doomed"

        await create_sandbox(pilot, "shared")
        backend = main.backend
        assert backend is not None
        # A run that sleeps (in a host call: no CPU) long enough for F8 and the dialog on
        # a loaded machine (CI: a 2 s busy run ended before the destroy came).
        other = asyncio.ensure_future(
            backend.sandbox("shared").interpreter.run_code(
                "import time\ntime.sleep(4)\n'done'", binding="PYTHON"
            )
        )
        await asyncio.sleep(0.3)  # its turn taken
        main.sandbox_tree.focus()
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: "shared" not in main.sandbox_infos, timeout=20)
        waited = [note for note in notes.titled("Sandbox") if "waits for the run" in note]
        assert waited and waited[0].startswith("Destroying shared waits")
        finished = await other
        assert finished.results and finished.results[0].text == "'done'"


async def test_a_catch_up_numbers_the_given_up_cell_whose_run_it_meets(tmp_path: Path) -> None:
    """The same code given up twice: while it waited (it never runs) and while it ran
    (the backend cancels it, and its history keeps it): the catch-up numbered the first
    cell of that code, the one that never ran (review)."""
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        repl, backend = await perl_tab_in_shared(pilot, app)
        await (await give_up_while_waiting(pilot, backend, repl, UNTIL_GIVEN_UP))  # never runs
        repl.set_code(UNTIL_GIVEN_UP)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "started" in live_text(repl), timeout=10)
        repl.cancel_run()
        repl.cancel_run()  # given up while it runs: the backend cancels it (run 2)
        await wait_for(pilot, lambda: not repl.running, timeout=10)
        await run_cell(pilot, repl, "1 + 1")  # run 3: runs 1 and 2 come before it
        await wait_for(pilot, lambda: numbers(repl) == [None, 2, 1, 3], timeout=10)


async def test_ctrl_g_on_a_waiting_watch_run_leaves_it_waiting(tmp_path: Path) -> None:
    """A watch's run is the watch's: ctrl+g while it waits says how to stop the watch,
    and the run keeps its waiting label until its turn comes (it kept it after; review)."""
    app = embedded_app(tmp_path / "data")
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "shared")
        repl = await create_context(pilot, "PERL")
        repl.show_watch_run("print 1")  # as the watch starts its run here
        repl.note_waiting(True)  # behind another client's run
        repl.cancel_run()
        await pilot.pause(0.2)
        assert repl.running and WAITING_TURN in str(repl.run_status.render())
        repl.note_waiting(False)  # its turn came
        assert WAITING_TURN not in str(repl.run_status.render())
