"""Text a guest crafted to be slow to show. Highlighting it takes a time bound: some
Pygments lexers take seconds on crafted input (quadratic in a file of blank lines,
exponential in 44 bytes for TADS 3), which froze the workbench as a file opened and at
every key in its editor; and a line of a MiB of tabs opens read-only. Each bound here is
far below what it took before (12-31 s, measured by a helper)."""

from __future__ import annotations

import base64
import contextlib
import functools
import time
from pathlib import Path

from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from rich.console import Console
from textual.app import App, ComposeResult
from textual.widgets import TabPane

import workbench.tui.app as workbench_app
from workbench.api import FileVersion, ReadFileResult
from workbench.tui.highlighting import lexed, within_bound
from workbench.tui.transcript_cell import cell_input
from workbench.tui.widgets.code_input import CodeInput
from workbench.tui.widgets.file_editor import FileEditor
from workbench.tui.widgets.file_view import FileView
from workbench.tui.widgets.workbench_tabs import INFO_TAB, WorkbenchTabs

TADS3 = "\r\n//" + "\\" * 40
"""44 bytes the TADS 3 lexer (`.t`) took 11.6 s on (exponential; Pygments issue 3311)."""
BLANK_LINES = " \n" * 16_000
"""32,000 bytes the Python lexer took 12.5 s on (quadratic)."""
BOUND = 3.0
"""Seconds of this process's CPU anything here may take (CPU time: the suite's other
workers load the machine): the lexer's bound is `LEX_SECONDS`, the rest is the widgets'
own work."""


def test_a_lex_past_its_bound_gives_up_and_a_late_signal_is_ignored() -> None:
    started = time.process_time()
    assert lexed(get_lexer_for_filename("evil.t", stripnl=False), TADS3) is None
    assert time.process_time() - started < BOUND
    python = get_lexer_by_name("python", stripnl=False, ensurenl=False)
    tokens = lexed(python, "x = 1\n")
    assert tokens is not None and "".join(value for _, value in tokens) == "x = 1\n"

    def busy(seconds: float) -> str:
        ends = time.process_time() + seconds
        while time.process_time() < ends:
            pass
        return "done"

    def swallowing() -> str:  # as Pygments' text analysers catch every Exception
        with contextlib.suppress(Exception):
            busy(0.05)
        return busy(0.05)

    # Calls that end as their timer fires: a signal handled late, at the next arming or
    # after, never raises outside a bounded call (found in review: 13 escapes in 6 s).
    bound = 0.004
    for fraction in [0.9, 0.97, 1.0, 1.03, 1.1] * 40:
        assert within_bound(functools.partial(busy, bound * fraction), bound) in ("done", None)

    def dropping_one() -> str:  # as Python drops an interrupt in a collector's callback
        with contextlib.suppress(BaseException):
            busy(0.05)
        return busy(0.05)

    for call in (swallowing, dropping_one):
        started = time.process_time()
        assert within_bound(call, 0.01) is None
        assert time.process_time() - started < 0.04
    assert within_bound(lambda: 42) == 42


class Files(App[None]):
    CSS_PATH = str(Path(workbench_app.__file__).with_name("app.tcss"))

    def compose(self) -> ComposeResult:
        with WorkbenchTabs(id="tabs"):
            yield TabPane("Info", id=INFO_TAB)


def read_of(path: str, text: str) -> ReadFileResult:
    data = text.encode()
    return ReadFileResult(
        path=path,
        content=base64.b64encode(data).decode(),
        encoding="base64",
        is_binary=False,
        mime_type="text/plain",
        size=len(data),
        timestamp="2026-12-07T00:00:00Z",
    )


async def test_a_crafted_file_opens_and_takes_keys_at_once_and_stays_plain() -> None:
    app = Files()
    async with app.run_test(size=(120, 40)) as pilot:
        tabs = app.query_one(WorkbenchTabs)
        started = time.process_time()
        view = FileView("demo", read_of("/workspace/evil.py", BLANK_LINES), FileVersion(1, "t"))
        await tabs.add_file(view)
        await pilot.pause()
        assert time.process_time() - started < BOUND
        editor = view.query_one(FileEditor)
        assert editor.text == BLANK_LINES and not editor._highlights
        editor.focus()
        started = time.process_time()
        await pilot.press(*"abc")  # no key pays the lex again
        assert time.process_time() - started < BOUND
        assert editor.text.startswith("abc") and not editor._highlights

        # An ordinary file is highlighted as before.
        plain = FileView(
            "demo", read_of("/workspace/ok.py", "def f():\n    return 1\n"), FileVersion(2, "t")
        )
        await tabs.add_file(plain)
        await pilot.pause()
        assert plain.query_one(FileEditor)._highlights


async def test_a_crafted_read_only_file_is_shown_plain_at_once() -> None:
    """A file with a line break of each kind opens read-only (as Rich's `Syntax`, whose
    guess and lex of 16 KiB of blank lines took 3.9 s; a helper)."""
    app = Files()
    async with app.run_test(size=(120, 40)) as pilot:
        tabs = app.query_one(WorkbenchTabs)
        for path, text in [
            ("/workspace/evil.t", "\n" + TADS3),
            ("/workspace/blank.py", "\r\n" + " \n" * 8180),
        ]:
            view = FileView("demo", read_of(path, text), FileVersion(1, "t"))
            started = time.process_time()
            await tabs.add_file(view)
            await pilot.pause()
            assert time.process_time() - started < BOUND, path
            assert view.read_only_reason is not None, path


def test_another_client_s_crafted_cell_renders_at_once() -> None:
    """A cell recalled from a shared `serve` is highlighted in the transcript, at every
    change of its width: 3.7 s each for 16 KiB of blank lines (a helper)."""
    console = Console(width=100, record=True)
    for _ in range(3):  # rendered again: the tokens kept, or the bound again
        started = time.process_time()
        console.print(*cell_input("1", "python", " \n" * 8000, foreign=True))
        assert time.process_time() - started < BOUND


async def test_a_crafted_paste_leaves_the_code_input_plain_until_it_is_cleared() -> None:
    class Repl(App[None]):
        def compose(self) -> ComposeResult:
            yield CodeInput("python")

    app = Repl()
    async with app.run_test() as pilot:
        code_input = app.query_one(CodeInput)
        code_input.focus()
        started = time.process_time()
        code_input.load_text(BLANK_LINES)
        await pilot.press(*"x = 1")
        assert time.process_time() - started < BOUND
        assert not code_input._highlights
        code_input.load_text("x = 1")  # a new text (a run cleared the input, history)
        assert code_input._highlights
        # A long cell stays plain, as a long file does: each key lexed all of it (QA: 50
        # keys took 14 s in a cell of 62 KB).
        code_input.load_text("x = 1\n" * 6000)
        assert not code_input._highlights


async def test_a_line_of_a_mib_of_tabs_opens_read_only_at_once() -> None:
    """The editor laid out all of a line's tabs at every paint: 31 s to open, 15 s a key."""
    app = Files()
    async with app.run_test(size=(120, 40)) as pilot:
        started = time.process_time()
        view = FileView(
            "demo", read_of("/workspace/tabs.txt", "\t" * (1 << 20)), FileVersion(1, "t")
        )
        await app.query_one(WorkbenchTabs).add_file(view)
        await pilot.pause()
        await pilot.press("down", "x")
        await pilot.pause()
        assert time.process_time() - started < BOUND
        assert view.read_only_reason == (
            "a line of 1,048,576 tabs, which the editor takes seconds to show"
        )
