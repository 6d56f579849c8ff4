"""The transcript widget on its own: where each cell's lines start, whether the cells
were written before or after the log knew its size, and its lines rendered again for a
new width or once its hidden tab is shown."""

from __future__ import annotations

import base64
import io

from rich.console import Console
from rich.text import Text
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import RichLog, Static, TabbedContent, TabPane

from engines.result import ExecutionError, ExecutionResult, ResultEntry, SessionState
from workbench.api import FileVersion, ReadFileResult
from workbench.tui.screens.cell_picker_screen import cell_summary
from workbench.tui.transcript_cell import TranscriptCell, render_cell
from workbench.tui.untrusted import SHOWN_CHARS, SHOWN_LINES, ShownBudget, clipped
from workbench.tui.widgets.file_view import FileView
from workbench.tui.widgets.transcript import Transcript


class TranscriptApp(App[None]):
    """A transcript filled on mount, before its first resize: RichLog holds such writes
    back until it knows its width (a reopened context's past cells are written so)."""

    def compose(self) -> ComposeResult:
        yield Transcript(show_measurements=False)

    def on_mount(self) -> None:
        transcript = self.query_one(Transcript)
        transcript.write(Text("… 2 earlier runs"))
        transcript.add_cell(TranscriptCell(3, "print 'three'", "perl", None, "lost three"))
        transcript.add_cell(TranscriptCell(4, "print 'four'", "perl", None, "lost four"))


async def test_cells_written_before_the_size_is_known_keep_their_start_lines() -> None:
    app = TranscriptApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        transcript.add_cell(TranscriptCell(5, "print 'five'", "perl", None, "lost five"))
        texts = [line.text for line in transcript.lines]
        starts = transcript.cell_start_lines
        assert len(starts) == 3 and starts[0] == 1
        for start, number in zip(starts, [3, 4, 5], strict=True):
            assert texts[start].startswith(f"In [{number}]")
        assert transcript.find_next("lost three") is not None
        assert transcript.current_cell_index == 0
        assert transcript.find_next("lost four") is not None
        assert transcript.current_cell_index == 1


async def test_cells_are_rendered_again_for_a_new_width() -> None:
    """Narrower, a cell's long line wraps again (it was cut at the old width); wider, it
    takes one line again; cell starts and search follow."""
    app = TranscriptApp()
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        long_code = "print '" + "word " * 30 + "'"
        transcript.add_cell(TranscriptCell(5, long_code, "perl", None, "lost five"))
        wide = len(transcript.lines)
        await pilot.resize_terminal(50, 24)
        await pilot.pause(0.2)
        narrow = len(transcript.lines)
        assert narrow > wide
        assert all(line.cell_length <= 50 for line in transcript.lines)
        texts = [line.text for line in transcript.lines]
        for start, number in zip(transcript.cell_start_lines, [3, 4, 5], strict=True):
            assert texts[start].startswith(f"In [{number}]")
        assert transcript.find_next("lost five") is not None
        assert transcript.current_cell_index == 2
        await pilot.resize_terminal(120, 24)
        await pilot.pause(0.2)
        assert len(transcript.lines) == wide


class HiddenTranscriptApp(App[None]):
    """A transcript in a tab that is not shown (a REPL whose run ends while another tab
    is active): RichLog renders such writes at its minimum width."""

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="repl"):
            with TabPane("Other", id="other"):
                yield Static("another tab")
            with TabPane("REPL", id="repl"):
                yield Transcript(show_measurements=False)


async def add_a_long_cell_while_hidden(app: HiddenTranscriptApp, pilot: Pilot[None]) -> None:
    """Hide the transcript's tab, add a cell wider than 20 columns, show the tab again."""
    tabs = app.query_one(TabbedContent)
    tabs.active = "other"
    await pilot.pause()
    cell = TranscriptCell(1, "print '" + "word " * 30 + "'", "perl", None)
    app.query_one(Transcript).add_cell(cell)
    await pilot.pause()
    tabs.active = "repl"
    await pilot.pause(0.3)


async def test_cells_written_while_hidden_are_rendered_again_when_shown() -> None:
    app = HiddenTranscriptApp()
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        transcript.write("shown once, so its size is known")
        await add_a_long_cell_while_hidden(app, pilot)
        start = transcript.cell_start_lines[0]
        widths = [line.cell_length for line in transcript.lines[start:]]
        assert max(widths) > 20, widths  # rendered again for the shown width, not at 20
        assert transcript.lines[transcript.cell_start_lines[0]].text.startswith("In [1]")
        assert transcript.lines[0].text.startswith("shown once")


class PlainTranscriptApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Transcript(show_measurements=False)


def numbered_cell(number: int) -> TranscriptCell:
    return TranscriptCell(number, f"print {number}", "perl", None, f"out {number}\n" * 3)


async def test_runs_caught_up_before_the_last_cell_render_only_from_there() -> None:
    """Another client's runs go in before this tab's last cell (its count jumped): the
    cells above stay as rendered (rendering all of them again took 0.15 s per run with
    50 cells), and the lines are those of the cells written in order."""
    app = PlainTranscriptApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        for number in [*range(1, 41), 43]:
            transcript.add_cell(numbered_cell(number))
        last = transcript.cells[-1]
        rendered: list[int] = []
        write_cell = transcript._write_cell

        def counting(cell: TranscriptCell) -> None:
            rendered.append(cell.number)
            write_cell(cell)

        transcript._write_cell = counting  # type: ignore[method-assign]
        note = Text("… a run by another client")
        transcript.insert_before(last, [note, numbered_cell(41), numbered_cell(42)])
        assert rendered == [41, 42, 43]
        await pilot.pause()

    expected_app = PlainTranscriptApp()
    async with expected_app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        expected = expected_app.query_one(Transcript)
        for number in range(1, 41):
            expected.add_cell(numbered_cell(number))
        expected.write(note)
        for number in (41, 42, 43):
            expected.add_cell(numbered_cell(number))
        assert [line.text for line in transcript.lines] == [line.text for line in expected.lines]
        assert transcript.cell_start_lines == expected.cell_start_lines
        assert [cell.number for cell in transcript.cells] == list(range(1, 44))
        assert transcript.find_next("out 42") is not None
        assert transcript.current_cell_index == 41


async def test_find_counts_the_matching_lines_and_wraps() -> None:
    app = PlainTranscriptApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        for number in (1, 2, 3):
            transcript.add_cell(numbered_cell(number))
        places = []
        for _ in range(4):
            found = transcript.find_next("OUT 2")
            assert found is not None
            places.append((found.position, found.total, transcript.current_cell_index))
            assert "out 2" in transcript.lines[found.line].text
        assert places == [(1, 3, 1), (2, 3, 1), (3, 3, 1), (1, 3, 1)]
        assert transcript.find_next("nowhere") is None
        assert transcript.find_next("") is None


async def test_cells_written_while_hidden_before_any_line_are_rendered_again_when_shown() -> None:
    """The tab was shown only while empty: cells written while hidden (at the minimum
    width) still fit the width once it is shown (they stayed 20 columns wide)."""
    app = HiddenTranscriptApp()
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        await add_a_long_cell_while_hidden(app, pilot)
        assert max(line.cell_length for line in transcript.lines) > 20
        assert transcript.fits_its_width


async def test_a_cell_of_megabytes_is_shown_clipped_and_copied_whole() -> None:
    """A cell far past what a runtime produces (another client's history, a hostile
    gateway: megabytes of code, output and JSON) renders each part up to its clip, with a
    note of what is left out, instead of freezing the app while every line is rendered
    (a 400 KB cell took 6 s); copies keep everything."""
    code = "\n".join(f"x_{index} = {index}" for index in range(40_000))
    stdout = ["y" * 600_000]  # one line: clipped by its characters
    values = [{"k": index} for index in range(20_000)]  # 80,000 lines pretty-printed
    result = ExecutionResult(
        code=code,
        language="python",
        engine="test",
        duration_ms=1,
        stdout=stdout,
        results=[ResultEntry(json=values, is_json=True)],
    )
    app = TranscriptApp()
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        transcript = app.query_one(Transcript)
        cell = TranscriptCell(5, code, "python", result)
        transcript.add_cell(cell)
        texts = [line.text for line in transcript.lines]
        notes = [text for text in texts if "not shown" in text]
        code_left = code[code.index("x_12000") :]
        assert notes == [  # the code takes the cell's lines: the rest is left out whole
            f"… {len(code_left):,} more characters not shown, in 28,000 lines (a copy has all)",
            "… 2 more parts not shown (a copy has all)",
        ]
        assert len(texts) < SHOWN_LINES + 20
        assert "x_11999 = 11999" in texts and "x_12000 = 12000" not in texts
        assert cell.part_text("code") == code  # copied whole
        assert cell.part_text("output").startswith("y" * 600_000 + "\n[")


def test_a_clip_counts_what_it_leaves_out() -> None:
    """Lines and characters left out, a last newline ending a line rather than starting
    one, singular counts; a cell's parts share one budget."""
    assert clipped("a\n" * SHOWN_LINES) == ("a\n" * SHOWN_LINES, None)
    text = "a\n" * SHOWN_LINES + "b"
    assert clipped(text) == (
        "a\n" * (SHOWN_LINES - 1) + "a",
        "… 1 more character not shown, in 1 line (a copy has all)",
    )
    assert clipped("z" * (SHOWN_CHARS + 2) + "\n") == (
        "z" * SHOWN_CHARS,
        "… 2 more characters not shown, in 1 line (a copy has all)",
    )
    assert clipped("") == ("", None)
    budget = ShownBudget(lines=3)
    assert clipped("1\n2", budget) == ("1\n2", None) and budget.lines == 1
    assert clipped("3\n4\n5", budget) == (
        "3",
        "… 3 more characters not shown, in 2 lines (a copy has all)",
    )
    assert budget.spent


class FileViewApp(App[None]):
    """A read-only file view of a 1 MiB file that is not UTF-8 (the editor would change it)."""

    def compose(self) -> ComposeResult:
        data = b"\xff" + b"".join(f"line {index}\n".encode() for index in range(90_000))
        read = ReadFileResult(
            path="big.log",
            content=base64.b64encode(data).decode(),
            encoding="base64",
            is_binary=False,
            mime_type="text/plain",
            size=len(data),
            timestamp="2026-12-06T00:00:00Z",
        )
        yield FileView("demo", read, FileVersion(len(data), "2026-12-06T00:00:00Z"))


async def test_a_large_read_only_file_is_shown_clipped_and_plain() -> None:
    """A read-only view renders the file up to the clip, unhighlighted, with a note: all
    of a 1 MiB file highlighted took seconds (found by a review)."""
    app = FileViewApp()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        body = app.query_one("#file-body", RichLog)
        texts = [line.text.rstrip() for line in body.lines]
        assert len(texts) == SHOWN_LINES + 1
        assert texts[1] == "line 1" and texts[SHOWN_LINES - 1] == f"line {SHOWN_LINES - 1}"
        assert texts[-1].startswith("… ") and texts[-1].endswith(
            "not shown, in 78,000 lines (`sandbox-workbench files cat` shows all)"
        )


def test_a_hostile_answer_renders_bounded_in_every_part() -> None:
    """Past the per-cell clip, what is rendered stays bounded before it is rendered: a
    value of millions of items is printed only up to the clip, an error's header and
    each note take a few lines, a thousand notes show ten, and the cell picker names an
    error of 20,000 lines by its first (found by a review: 9 s, 58 s, 92 s and 7 s)."""
    result = ExecutionResult(
        code="x",
        language="python",
        engine="test",
        duration_ms=1,
        results=[ResultEntry(json=[0] * 3_000_000, is_json=True)],
        error=ExecutionError("N\n" * 20_000, "ab\n" * 300_000),
        session=SessionState("restored", notes=("long\n" * 100_000,) * 1_000),
    )
    cell = TranscriptCell(1, "x", "python", result)
    console = Console(width=100, file=io.StringIO(), record=True)
    console.print(render_cell(cell, show_measurements=False, shown_lines=500))
    lines = console.export_text().splitlines()
    assert "… the rest of the value not shown (a copy has all)" in lines
    assert "… 990 more notes not shown" in lines
    assert len(lines) < 500 + 200 + 10 * 6 + 40
    assert cell_summary(cell) == "[1] x  ✗ N"
    assert clipped("\nabc", ShownBudget(lines=1)) == (
        "",
        "… 3 more characters not shown, in 1 line (a copy has all)",
    )
