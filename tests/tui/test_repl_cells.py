"""Pilot tests of REPL cells on real engines: a guest error shown once, copying from any
cell through the picker, and exporting a transcript to a file under the data dir."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import stat
import time
from pathlib import Path

import nbformat
import pytest
from rich.console import Console
from textual.app import App, ComposeResult
from textual.widgets import Input, Static

from tests.tui.test_flows import Notifications, app_over, local_gateway, make_app
from tour import (
    FIXED_START_MS,
    WorkbenchPilot,
    create_context,
    create_sandbox,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import OUTPUT_STREAM_FEATURE, FixedClock, MockTransport, Request
from workbench.backends.local import LocalGateway
from workbench.config import RUBY_CONTEXTS_ENV
from workbench.protocol.http import Response
from workbench.tui.palette_commands import workbench_commands
from workbench.tui.screens.cell_picker_screen import CellPickerScreen
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.export_screen import ExportScreen
from workbench.tui.untrusted import SHOWN_CHARS
from workbench.tui.widgets.live_output import LiveOutput
from workbench.tui.widgets.repl_pane import OUTPUT_AT_END, ReplPane
from workbench.tui.widgets.run_status import RunStatus
from workbench.tui.widgets.workbench_tabs import repl_tab_id

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def cell_lines(repl: ReplPane, index: int) -> list[str]:
    """The transcript lines cell `index` rendered to (negative: from the end)."""
    transcript = repl.transcript
    index %= len(transcript.cells)
    starts = [*transcript.cell_start_lines, len(transcript.lines)]
    return [line.text for line in transcript.lines[starts[index] : starts[index + 1]]]


def shown_count(repl: ReplPane, text: str) -> int:
    """How often `text` is shown below the code of the last cell (the same in the
    transcript and in what is copied)."""
    cell = repl.transcript.cells[-1]
    rendered = sum(line.count(text) for line in cell_lines(repl, -1))
    shown = rendered - cell.code.count(text)
    assert cell.output_text.count(text) == shown
    return shown


async def run_and_count(pilot: WorkbenchPilot, repl: ReplPane, code: str, text: str) -> int:
    await run_cell(pilot, repl, code)
    return shown_count(repl, text)


async def test_ctrl_j_never_runs_a_cell(tmp_path: Path) -> None:
    """Many terminals send ctrl+j for a newline (a paste, ssh): it must not run the cell."""
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        repl.code_input.focus()
        await pilot.press("6", "*", "7", "ctrl+j")
        await pilot.pause(0.3)
        assert repl.transcript.cells == [] and "6*7" in repl.code_input.text
        await pilot.press("ctrl+r")  # the run key proper runs what was typed
        await wait_for(pilot, lambda: len(repl.transcript.cells) == 1)
        assert repl.transcript.cells[0].code.strip() == "6*7"


@pytest.mark.usefixtures("python_engine")
async def test_the_reset_note_follows_the_error_it_explains(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PYTHON")
        await run_cell(pilot, repl, "print('before the loop')\nwhile True: pass")
        lines = cell_lines(repl, -1)
        printed = next(i for i, line in enumerate(lines) if "before the loop" in line)
        error = next(i for i, line in enumerate(lines) if "Execution fuel exhausted" in line)
        note = next(i for i, line in enumerate(lines) if "interpreter was reset" in line)
        assert printed < error < note


@pytest.mark.usefixtures("python_engine")
async def test_a_python_error_is_shown_once(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PYTHON")
        # The driver's traceback starts with `Name: message`: shown once, frames kept.
        assert await run_and_count(pilot, repl, "def f(:", "SyntaxError: invalid syntax") == 1
        assert await run_and_count(pilot, repl, "1/0", "ZeroDivisionError") == 1
        assert any('File "<sandbox>", line 1' in line for line in cell_lines(repl, 1))
        # Logged to stderr, then re-raised: the restatement goes, other stderr stays.
        log_and_raise = (
            "import sys\n"
            "print('checking the config', file=sys.stderr)\n"
            "try:\n"
            "    compile('def f(:', 'config.py', 'exec')\n"
            "except SyntaxError as error:\n"
            "    print(f'{type(error).__name__}: {error}', file=sys.stderr)\n"
            "    raise\n"
        )
        assert await run_and_count(pilot, repl, log_and_raise, "SyntaxError: invalid") == 1
        assert "checking the config" in "\n".join(cell_lines(repl, 2))
        # Python's own traceback format on stderr (logging.exception) is a restatement too.
        logged = (
            "import logging\n"
            "try:\n"
            "    1/0\n"
            "except ZeroDivisionError:\n"
            "    logging.exception('division failed')\n"
            "    raise\n"
        )
        assert await run_and_count(pilot, repl, logged, "ZeroDivisionError: division") == 1
        shown = "\n".join(cell_lines(repl, 3))
        assert "ERROR:root:division failed" in shown
        assert "Traceback (most recent call last)" not in shown
        # stderr that only resembles an error, or that does not end the output, stays.
        lookalike = (
            "import sys\n"
            "print('ValueError: bad', file=sys.stderr)\n"
            "print('then more', file=sys.stderr)\n"
            "raise ValueError('bad')\n"
        )
        assert await run_and_count(pilot, repl, lookalike, "ValueError: bad") == 2
        no_error = "import sys\nprint('SyntaxError: not really', file=sys.stderr)"
        assert await run_and_count(pilot, repl, no_error, "SyntaxError: not really") == 1


@pytest.mark.usefixtures("ruby_engine")
async def test_a_ruby_error_is_shown_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "1")  # a Ruby context: the local extension
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "RUBY")
        # Its tab and tree entry say it exists only here.
        main = app.main_screen
        tab = main.tabs.get_tab(repl_tab_id(repl.context.id))
        assert str(tab.label).endswith("(local only)")
        box = main.sandbox_tree.sandbox_node(repl.sandbox_id)
        assert box is not None
        labels = [str(leaf.label) for child in box.children for leaf in child.children]
        assert any(label.endswith(" local only") for label in labels), labels
        # `abort` writes its message to stderr and raises SystemExit with it.
        aborted = "warn 'loading the config'\nabort 'config missing'"
        assert await run_and_count(pilot, repl, aborted, "config missing") == 1
        assert "loading the config" in "\n".join(cell_lines(repl, 0))
        # A syntax error logged and re-raised: its multi-line message is shown once.
        relogged = (
            "begin\n"
            "  eval('def f(')\n"
            "rescue SyntaxError => error\n"
            "  warn error.message\n"
            "  raise\n"
            "end\n"
        )
        assert await run_and_count(pilot, repl, relogged, "syntax errors found") == 1
        assert shown_count(repl, "expected an `end`") == 1
        # A restatement that does not end stderr is the guest's own output: it stays.
        noted = "warn 'the end'\nwarn 'a note'\nraise 'the end'"
        assert await run_and_count(pilot, repl, noted, "the end") == 2
        assert shown_count(repl, "a note") == 1


def preview_text(picker: CellPickerScreen) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(picker.query_one("#cell-preview", Static).content)
    return console.export_text()


async def open_picker(pilot: WorkbenchPilot) -> CellPickerScreen:
    await pilot.press("alt+y")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CellPickerScreen))
    picker = pilot.app.screen
    assert isinstance(picker, CellPickerScreen)
    await pilot.pause()
    return picker


async def test_copy_code_output_or_result_from_any_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, 'print "first output\\n";\n"first result"')
        await run_cell(pilot, repl, "{answer => 42}")
        await run_cell(pilot, repl, 'die "boom\\n"')

        picker = await open_picker(pilot)
        assert picker.highlighted_cell is repl.transcript.cells[2]  # the current cell
        assert "boom" in preview_text(picker)
        await pilot.press("up", "up")
        assert picker.highlighted_cell is repl.transcript.cells[0]
        assert "first output" in preview_text(picker) and "boom" not in preview_text(picker)
        await pilot.press("c")
        await wait_for(pilot, lambda: not isinstance(app.screen, CellPickerScreen))
        assert copied == ['print "first output\\n";\n"first result"']

        picker = await open_picker(pilot)
        await pilot.press("up", "r")  # the second cell's result
        await wait_for(pilot, lambda: len(copied) == 2)
        assert json.loads(copied[1]) == {"answer": 42}

        picker = await open_picker(pilot)
        await pilot.press("up", "up", "o")  # everything below the first cell's code
        await wait_for(pilot, lambda: len(copied) == 3)
        assert copied[2] == "first output\nfirst result"

        picker = await open_picker(pilot)
        await pilot.press("r")  # the failed cell has no result: nothing is copied
        await wait_for(pilot, lambda: not isinstance(app.screen, CellPickerScreen))
        assert len(copied) == 3
        assert any("has no result" in message for message, _, _ in notes.calls)
        picker = await open_picker(pilot)
        await pilot.press("enter")  # the whole failed cell
        await wait_for(pilot, lambda: len(copied) == 4)
        assert copied[3] == 'die "boom\\n"\nPerlError: boom'

        picker = await open_picker(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CellPickerScreen))
        assert len(copied) == 4

        # The palette offers it too.
        commands = {command.title: command for command in workbench_commands(app)}
        await commands["Copy the code, output or result of any cell…"].callback()
        await wait_for(pilot, lambda: isinstance(app.screen, CellPickerScreen))
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(copied) == 5)


async def export_with_prompt(
    pilot: WorkbenchPilot, key: str, path: Path | None = None
) -> ExportScreen:
    """Press the export key, check the prompt, optionally type a path; Enter."""
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ExportScreen))
    prompt = pilot.app.screen
    assert isinstance(prompt, ExportScreen)
    if path is not None:
        prompt.query_one("#export-path", Input).value = str(path)
        await pilot.pause()
    await pilot.press("enter")
    return prompt


async def test_export_defaults_to_the_data_dir_and_asks_before_overwriting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path, clock=FixedClock(FIXED_START_MS))
    notes = Notifications(app, monkeypatch)
    exports = tmp_path / "data" / "exports"
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "{answer => 42}")

        prompt = await export_with_prompt(pilot, "alt+m")
        default = Path(prompt.default_path)
        assert default.parent == exports  # the data dir, not the cwd (tmp_path)
        assert default.name.startswith(f"demo-PERL-{repl.context.id.split('-')[0]}-")
        assert default.suffix == ".md"
        await wait_for(pilot, lambda: default.is_file())
        first = default.read_text()
        assert "## In [1]" in first and '"answer": 42' in first
        assert stat.S_IMODE(default.stat().st_mode) == 0o600
        assert not list(tmp_path.glob("*.md"))

        # Exporting onto the existing file asks first; cancelling leaves it as it was.
        await run_cell(pilot, repl, "7 * 6")
        await export_with_prompt(pilot, "alt+m")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert str(default) in app.screen.question  # type: ignore[attr-defined]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert default.read_text() == first
        await export_with_prompt(pilot, "alt+m")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: "## In [2]" in default.read_text())

        exported = await export_with_prompt(pilot, "alt+j")
        json_path = Path(exported.default_path)
        assert json_path.parent == exports and json_path.suffix == ".json"
        await wait_for(pilot, lambda: json_path.is_file())
        assert len(json.loads(json_path.read_text())["cells"]) == 2

        exported = await export_with_prompt(pilot, "alt+i")
        notebook_path = Path(exported.default_path)
        assert notebook_path.parent == exports and notebook_path.suffix == ".ipynb"
        await wait_for(pilot, lambda: notebook_path.is_file())
        notebook = nbformat.read(str(notebook_path), as_version=4)
        nbformat.validate(notebook)
        assert notebook.metadata.kernelspec.language == "perl"
        assert [cell.source for cell in notebook.cells] == ["{answer => 42}", "7 * 6"]
        assert notebook.cells[1].outputs[0].data["text/plain"] == "42"

        # Any other path: missing folders are created; a folder is refused as typed.
        custom = tmp_path / "notes" / "session.md"
        await export_with_prompt(pilot, "alt+m", custom)
        await wait_for(pilot, lambda: custom.is_file())
        prompt = await export_with_prompt(pilot, "alt+m", tmp_path)
        problem = prompt.query_one("#export-problem", Static).content
        assert "is a directory" in str(problem)
        assert isinstance(app.screen, ExportScreen)
        await pilot.press("escape")
        assert not notes.errors()


def live_lines(repl: ReplPane) -> list[str]:
    """What the running cell's area shows, a line each."""
    return [line.text.rstrip() for line in repl.query_one(LiveOutput).lines]


@pytest.mark.usefixtures("python_engine")
async def test_the_running_cell_shows_its_code_then_its_output_and_the_cell_replaces_it(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PYTHON")
        live = repl.query_one(LiveOutput)
        repl.code_input.focus()
        code = "import sys, time\ntime.sleep(1)\nprint('tick 1')\ntime.sleep(3)\nprint('tick 2')"
        repl.set_code(code)
        await pilot.press("ctrl+r")
        # From the start: the cell's prompt and code, and the key that cancels it.
        await pilot.pause()
        assert live.display and live_lines(repl) == ["In [*] python", *code.splitlines()]
        assert str(repl.run_status.render()).endswith("running… (^g cancels)")
        # Then its output below the code, as the guest writes it.
        await wait_for(pilot, lambda: "tick 1" in live_lines(repl))
        assert repl.running and repl.transcript.cells == []
        assert live_lines(repl) == ["In [*] python", *code.splitlines(), "tick 1"]
        await wait_for(pilot, lambda: len(repl.transcript.cells) == 1)
        assert not live.display and live.lines == []
        assert shown_count(repl, "tick 1") == 1 and shown_count(repl, "tick 2") == 1


class LiveApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LiveOutput()


async def test_the_running_cell_is_wrapped_again_when_its_width_changes() -> None:
    """Lines a running cell printed kept the wrap of the width they came at: a resize
    during the run cut them until the cell ended (QA)."""

    app = LiveApp()
    async with app.run_test(size=(120, 30)) as pilot:
        live = app.query_one(LiveOutput)
        live.start_cell("python", "print('7' * 150)")
        live.add_lines([("stdout", "7" * 150)])
        await pilot.pause()
        await pilot.resize_terminal(70, 30)
        await wait_for(pilot, lambda: live.scrollable_content_region.width < 70)
        await pilot.pause()
        shown = [line.text.rstrip() for line in live.lines]
        assert all(len(line) <= live.scrollable_content_region.width for line in shown)
        assert "".join(line for line in shown if line.startswith("7")) == "7" * 150


async def test_a_flood_of_output_keeps_only_its_newest_part_at_once() -> None:
    """A batch of 4 MiB of output (16 lines of 256 KiB, or 2,048 of 2 KiB: a gateway
    streams what it likes) took 8 s to write, and as long again at each resize (a
    helper): the running cell keeps and shows its newest `SHOWN_CHARS` characters."""

    app = LiveApp()
    async with app.run_test(size=(120, 30)) as pilot:
        live = app.query_one(LiveOutput)
        live.start_cell("python", "flood()")
        await pilot.pause()
        for batch in (["a" * 262_144] * 15 + ["b" * 262_144], ["c" * 2048] * 2048):
            started = time.process_time()  # CPU: the suite's other workers load the machine
            live.add_lines([("stdout", line) for line in batch])
            await pilot.pause()
            await pilot.resize_terminal(100, 30)
            await pilot.pause()
            await pilot.resize_terminal(120, 30)
            await pilot.pause()
            assert time.process_time() - started < 4  # 24 s before
            kept = [line.plain for line in live._lines]
            assert sum(map(len, kept)) == SHOWN_CHARS
            assert kept[-1] == batch[-1]  # the newest, whole
        shown = "".join(line.text.rstrip() for line in live.lines)
        assert shown.endswith("c" * 2048) and "b" not in shown


def at_the_end(gateway: LocalGateway) -> MockTransport:
    """The local gateway as a Worker gateway serves it: no output stream, and health
    without the feature."""

    async def handle(request: Request) -> Response:
        reply = await gateway.handle(dataclasses.replace(request, events=None))
        if request.path != "/v1/health":
            return reply
        health = json.loads(reply.body)
        health["features"].remove(OUTPUT_STREAM_FEATURE)
        return Response(reply.status, json.dumps(health).encode(), reply.content_type)

    return MockTransport(handle, description="answers at the end")


@pytest.mark.usefixtures("python_engine")
async def test_a_gateway_that_answers_at_the_end_is_named_while_the_cell_runs(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with local_gateway(data) as gateway:
        app = app_over(data, at_the_end(gateway))
        async with app.run_test(size=(160, 50)) as pilot:
            await until_connected(pilot)
            await create_sandbox(pilot)
            repl = await create_context(pilot, "PYTHON")
            status = repl.query_one(RunStatus)
            repl.code_input.focus()
            repl.set_code("import time\nprint('tick')\ntime.sleep(2)")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: "when the run ends" in str(status.render()))
            assert live_lines(repl) == [
                "In [*] python",
                "import time",
                "print('tick')",
                "time.sleep(2)",
            ]  # the code, and no output yet
            await wait_for(pilot, lambda: len(repl.transcript.cells) == 1)
            assert shown_count(repl, "tick") == 1
            assert "when the run ends" not in str(status.render())


@pytest.mark.usefixtures("perl_engine")
async def test_a_long_run_status_keeps_its_time_and_ends_in_an_ellipsis(tmp_path: Path) -> None:
    """At 80 columns the REPL pane is narrow: the status line keeps the elapsed time and
    cuts its note with an ellipsis, never in the middle of a word."""
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        status = repl.run_status
        status.start(OUTPUT_AT_END)
        await pilot.pause()
        line = status.render_line(0).text.rstrip()
        assert re.match(r". \d+\.\d s · running \(this gateway", line), line
        assert line.endswith("…") and len(line) <= status.size.width < len(OUTPUT_AT_END)
        status.stop()


async def test_a_cell_over_the_code_limit_is_refused_here_and_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: a 157 KB paste was sent, refused ("Request too large ... HTTP 413", no limit
    named), and the editor was cleared. It is now refused before it is sent, with the
    limit, and the code stays in the editor."""
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        code = "# é\n" * 20_000  # 100,000 bytes of UTF-8 in 80,000 characters
        repl.set_code(code)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: bool(notes.errors()))
        assert notes.errors() == [
            ": This cell holds 97.7 KiB of code; a run takes at most 64.0 KiB. Your code "
            "stays in the editor."
        ]
        assert repl.code_input.text == code and not repl.running
        assert repl.transcript.cells == []

        # Under 64 KiB, but over the 96 KiB request cap once its backslashes are escaped:
        # it was sent, and refused as "Request too large".
        backslashes = "# " + "\\" * 60_000
        repl.set_code(backslashes)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(notes.errors()) == 2)
        assert notes.errors()[1] == (
            ": This cell's code takes 117.2 KiB as sent (its quotes, backslashes and control "
            "characters travel escaped); a run's request takes at most 96.0 KiB. Your code "
            "stays in the editor."
        )
        assert repl.code_input.text == backslashes and repl.transcript.cells == []
