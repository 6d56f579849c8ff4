"""Pilot test of rerunning a REPL cell on another profile (a real `serve` process) and
of exporting a replayable transcript from the export dialog."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from textual.app import App
from textual.widgets import Label, OptionList, Static

from tests.cli.test_diff import session_serve
from tests.tui.test_flows import Notifications
from tour import (
    WorkbenchPilot,
    create_context,
    create_sandbox,
    local_backend_factory,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.backends.remote import open_remote_backend
from workbench.config import Config, RemoteProfile
from workbench.transcripts import read_transcript
from workbench.transcripts.outcomes import Outcome
from workbench.tui.app import WorkbenchApp
from workbench.tui.messages import CellRerun, CellRerunProgress
from workbench.tui.palette_commands import PaletteCommand, workbench_commands
from workbench.tui.screens.diff_screen import DIFF_LINES, DiffScreen, RerunProfilePickerScreen
from workbench.tui.screens.export_screen import ExportScreen

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def diff_shown(pilot: WorkbenchPilot) -> DiffScreen:
    """Wait for the diff screen to be up, with its content."""
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.is_mounted)
    await pilot.pause()
    assert isinstance(app.screen, DiffScreen)
    return app.screen


def shown(screen: DiffScreen, selector: str) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(screen.query_one(selector, Static).render())
    return console.export_text()


async def test_rerun_a_cell_on_another_profile_and_export_a_transcript(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = session_serve(request)
    monkeypatch.setenv("STAGING_TOKEN", served.token)
    config = Config(
        profiles={"staging": RemoteProfile("staging", served.url, token_env="STAGING_TOKEN")},
        path=tmp_path / "config" / "config.toml",
    )
    config.save()
    data = tmp_path / "data"
    app = WorkbenchApp(data_dir=data, backend_factory=local_backend_factory(data), config=config)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(140, 45)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        # The context's env var is not known to the workbench, so it is not there on the
        # rerun: the output differs.
        repl = await create_context(pilot, "PERL", env_line="GREETING=hello")
        await run_cell(pilot, repl, 'print "$ENV{GREETING}!\\e[2J\\n"; 6 * 7')
        await pilot.press("alt+v")
        await wait_for(pilot, lambda: isinstance(app.screen, RerunProfilePickerScreen))
        picker = app.screen
        assert str(picker.query_one(".dialog-title", Label).render()) == (
            "Rerun the cell on profile"
        )
        options = picker.query_one(OptionList)
        assert [options.get_option_at_index(i).id for i in range(options.option_count)] == [
            "staging"
        ]
        await pilot.press("enter")
        diff = await diff_shown(pilot)
        assert diff.summary == "Different: stdout."
        assert diff.query_one("#diff-dialog").size.width >= 120  # 90% of 140, not 64
        here, there = shown(diff, "#diff-here"), shown(diff, "#diff-there")
        assert here.splitlines()[:2] == ["- stdout | hello!\\x1b[2J", "  result | 42"]
        assert there.splitlines()[:2] == ["+ stdout | !\\x1b[2J", "  result | 42"]
        assert "\x1b" not in here + there  # the guest's escape is shown, never sent
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DiffScreen))

        # From the palette, straight to a profile: the earlier cell is replayed first, and
        # the status bar counts the cells as they are replayed.
        status = app.main_screen.status
        progress: list[str] = []
        app.main_screen.watch(status, "rerun", lambda text: progress.append(text), init=False)
        await run_cell(pilot, repl, "our $n = 6 * 7")
        commands = {command.title: command for command in workbench_commands(app)}
        assert "Rerun the current cell on another profile and compare…" in commands
        await commands["Rerun the current cell on staging and compare"].callback()
        diff = await diff_shown(pilot)
        assert diff.summary == "Same outcome on both. 1 earlier cell replayed first (1 differed)."
        await wait_for(pilot, lambda: not status.rerun)
        assert progress == [
            *(f"rerunning cell [2] on staging: {done} of 2 cells replayed" for done in range(3)),
            "",
        ]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DiffScreen))

        # The export dialog's third format: a transcript `replay` reads.
        await pilot.press("alt+m")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportScreen))
        export = app.screen
        assert isinstance(export, ExportScreen)
        await pilot.click("#format-transcript")
        path_input = export.query_one("#export-path")
        await wait_for(pilot, lambda: path_input.value.endswith(".transcript.json"))  # type: ignore[attr-defined]
        target = Path(path_input.value)  # type: ignore[attr-defined]
        await pilot.click("#export")
        await wait_for(pilot, lambda: target.is_file())
    assert not notes.errors()
    transcript = read_transcript(target)
    assert (transcript.context.binding, transcript.context.cwd) == ("PERL", "/workspace")
    assert [cell.code for cell in transcript.cells] == [
        'print "$ENV{GREETING}!\\e[2J\\n"; 6 * 7',
        "our $n = 6 * 7",
    ]
    first = transcript.cells[0].outcome
    assert first is not None and first.stdout == ("hello!\x1b[2J",)
    # Both reruns' scratch sandboxes were destroyed on the other profile.
    async with open_remote_backend("staging", served.url, served.token) as staging:
        assert not [s.id for s in await staging.list_sandboxes() if s.id.startswith("replay-")]


def test_the_diff_screen_binding_has_an_id() -> None:
    assert all(binding.id for binding in DiffScreen.BINDINGS)  # type: ignore[union-attr]


def staging_config(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Config:
    """A config whose `staging` profile is the session's serve process (Ruby runs
    statelessly there: it starts without Ruby contexts)."""
    served = session_serve(request)
    monkeypatch.setenv("STAGING_TOKEN", served.token)
    config = Config(
        profiles={"staging": RemoteProfile("staging", served.url, token_env="STAGING_TOKEN")},
        path=tmp_path / "config" / "config.toml",
    )
    config.save()
    return config


async def test_a_rerun_the_other_profile_cannot_replay_says_why(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ruby_engine: None,
) -> None:
    config = staging_config(request, tmp_path, monkeypatch)
    monkeypatch.setenv("SANDBOX_WORKBENCH_RUBY_CONTEXTS", "1")
    data = tmp_path / "data"
    app = WorkbenchApp(data_dir=data, backend_factory=local_backend_factory(data), config=config)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(140, 45)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "RUBY")
        await run_cell(pilot, repl, "6 * 7")
        await commands_of(app)["Rerun the current cell on staging and compare"].callback()
        await wait_for(pilot, lambda: any("not rerun" in title for _, title, _ in notes.calls))
    [(reason, title)] = [(text, title) for text, title, _ in notes.calls if "not rerun" in title]
    assert title == "Cell [1] was not rerun on staging"
    assert reason.startswith("known difference: the transcript ran in a ruby code context")
    assert not notes.errors()


async def test_a_rerun_can_be_cancelled_from_the_palette(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = staging_config(request, tmp_path, monkeypatch)
    served = session_serve(request)
    data = tmp_path / "data"
    app = WorkbenchApp(data_dir=data, backend_factory=local_backend_factory(data), config=config)
    notes = Notifications(app, monkeypatch)
    async with (
        open_remote_backend("staging", served.url, served.token) as staging,
        app.run_test(size=(140, 45)) as pilot,
    ):

        async def scratch_sandboxes() -> list[str]:
            listed = await staging.list_sandboxes()
            return [sandbox.id for sandbox in listed if sandbox.id.startswith("replay-")]

        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PYTHON")
        await run_cell(pilot, repl, "import time\ntime.sleep(5)")
        await run_cell(pilot, repl, "6 * 7")
        assert "Cancel the rerun on another profile" not in commands_of(app)
        assert not await scratch_sandboxes()
        await commands_of(app)["Rerun the current cell on staging and compare"].callback()
        assert any("after replaying 1 earlier cell…" in text for text, _, _ in notes.calls)
        for _ in range(100):  # the replay reached staging: its scratch sandbox is there
            if await scratch_sandboxes():
                break
            await pilot.pause(0.05)
        assert app.main_screen.rerunning and await scratch_sandboxes()
        status = app.main_screen.status
        assert status.rerun == "rerunning cell [2] on staging: 0 of 2 cells replayed"
        commands_of(app)["Cancel the rerun on another profile"].callback()
        await wait_for(pilot, lambda: not app.main_screen.rerunning)
        await wait_for(pilot, lambda: not status.rerun)  # the status bar says no more
        assert not await scratch_sandboxes()  # destroyed as the rerun ended
        await pilot.pause(0.5)
        assert not isinstance(app.screen, DiffScreen)
    assert ("Rerun cancelled.", "", "information") in notes.calls
    assert not notes.errors()


async def test_a_replaced_rerun_s_end_leaves_the_new_one_s_progress(tmp_path: Path) -> None:
    """A rerun started while one ran cancels it (one at a time): the first one's end came
    after the second's start and blanked its progress (found in review)."""
    data = tmp_path / "data"
    app = WorkbenchApp(data_dir=data, backend_factory=local_backend_factory(data))
    main = app.main_screen
    async with app.run_test(size=(140, 45)) as pilot:
        await until_connected(pilot)
        main.reruns = 2
        main.post_message(CellRerunProgress(2, "3", "staging", 0, 3))
        main.post_message(CellRerunProgress(1, "2", "staging", 1, 2, ended=True))
        await pilot.pause()
        assert main.status.rerun == "rerunning cell [3] on staging: 0 of 3 cells replayed"
        main.post_message(CellRerunProgress(2, "3", "staging", 3, 3, ended=True))
        await pilot.pause()
        assert main.status.rerun == ""


def commands_of(app: WorkbenchApp) -> dict[str, PaletteCommand]:
    return {command.title: command for command in workbench_commands(app)}


async def test_a_diff_of_huge_outcomes_compares_and_shows_the_first_lines() -> None:
    """Each side compares and shows its first `DIFF_LINES` lines and says how much it left
    out: 20,000 lines a side (a gateway's answer) took seconds to compare and render, and
    comparing grows with the square of the lines (found by a review)."""
    recorded = Outcome(stdout=("same",) * 20_000)
    observed = Outcome(stdout=("same",) * (DIFF_LINES - 1) + ("other",) + ("same",) * 18_000)
    app = App[None]()
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(DiffScreen(CellRerun("1", "here", "there", recorded, observed, 0, 0)))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DiffScreen)
        here, there = shown(screen, "#diff-here"), shown(screen, "#diff-there")
        assert here.count("same") == DIFF_LINES and "other" not in here
        assert there.count("+ stdout | other") == 1 and there.count("same") == DIFF_LINES - 1
        assert "in 18,000 lines (an export has all)" in here
        assert "in 18,000 lines (an export has all)" in there
