"""The REPL's code input, the file editor and the dialogs' inputs on their own: Enter
indents as the code asks, Backspace in the indentation removes a level, a paste goes in
exactly as it came, and an alt chord is never text."""

from __future__ import annotations

import random

import pytest
from textual import events
from textual._xterm_parser import XTermParser
from textual.app import App, ComposeResult
from textual.widgets import Button

import workbench.tui.app  # noqa: F401  (its mends of Textual)
from workbench.tui.untrusted import ControlFreeTextArea
from workbench.tui.widgets.code_input import CodeInput, new_line_indent
from workbench.tui.widgets.dialog_input import DialogInput
from workbench.tui.widgets.env_vars_input import EnvVarsInput
from workbench.tui.widgets.file_editor import FileEditor


class InputApp(App[None]):
    def __init__(self, language: str) -> None:
        super().__init__()
        self.language = language

    def compose(self) -> ComposeResult:
        yield CodeInput(self.language)


def test_a_new_line_keeps_the_indentation_and_opens_a_level_after_a_block_start() -> None:
    assert new_line_indent("    x = 1", "python", 4) == "    "
    assert new_line_indent("def f(n):", "python", 4) == "    "
    assert new_line_indent("    if n < 2:  ", "python", 4) == " " * 8
    assert new_line_indent("# a note:", "python", 4) == ""  # a comment opens nothing
    assert new_line_indent("x = {", "python", 4) == "    "
    assert new_line_indent("function f() {", "javascript", 2) == "  "
    assert new_line_indent("label:", "javascript", 2) == ""  # the colon is Python's only
    assert new_line_indent("\tmy @list = (", "perl", 4) == "\t    "
    assert new_line_indent("", "ruby", 4) == ""


async def test_enter_and_backspace_indent_python_as_it_is_typed() -> None:
    app = InputApp("python")
    async with app.run_test() as pilot:
        code_input = app.query_one(CodeInput)
        code_input.focus()
        await pilot.press(*"def fib(n):", "enter", *"if n < 2:", "enter", *"return n", "enter")
        await pilot.press("backspace", *"return fib(n - 1) + fib(n - 2)", "enter", "backspace")
        await pilot.press(*"fib(20)")
        assert code_input.text == (
            "def fib(n):\n"
            "    if n < 2:\n"
            "        return n\n"
            "    return fib(n - 1) + fib(n - 2)\n"
            "fib(20)"
        )
        # Backspace after something other than spaces deletes one character.
        await pilot.press("backspace")
        assert code_input.text.endswith("fib(20")


class InputBesideAnother(App[None]):
    def compose(self) -> ComposeResult:
        yield Button("before")
        yield CodeInput("python")


async def test_tab_indents_and_shift_tab_leaves_as_the_help_says() -> None:
    """Tab indents in the code input; its F1 help did not say how a keyboard leaves it."""
    assert "**shift+tab** moves the\nfocus out" in CodeInput.HELP
    app = InputBesideAnother()
    async with app.run_test() as pilot:
        code_input = app.query_one(CodeInput)
        code_input.focus()
        await pilot.press("tab")
        assert code_input.text == "    " and app.focused is code_input
        await pilot.press("shift+tab")
        assert app.focused is app.query_one(Button)


async def test_a_paste_is_inserted_as_it_came() -> None:
    app = InputApp("python")
    async with app.run_test() as pilot:
        code_input = app.query_one(CodeInput)
        code_input.focus()
        await pilot.press(*"if True:", "enter")
        pasted = "x = 1\nif x:\n    y = 2\nz = 3"
        app.post_message(events.Paste(pasted))  # as the driver does; the app hands it on
        await pilot.pause()
        assert code_input.text == "if True:\n    " + pasted


@pytest.mark.parametrize("editor", ["code input", "file editor", "env vars"])
async def test_an_undo_of_a_multiline_paste_in_a_short_editor_does_not_crash(editor: str) -> None:
    """Textual's undo shortened the document before it moved the cursor back, and the
    scrollbar that went meanwhile asked for a line gone: the app crashed (issue 6686)."""

    class ShortEditor(App[None]):
        def compose(self) -> ComposeResult:
            if editor == "code input":
                yield CodeInput("python")
            elif editor == "file editor":
                yield FileEditor("/workspace/notes.txt", "")
            else:
                yield EnvVarsInput()

    app = ShortEditor()
    async with app.run_test(size=(40, 8)) as pilot:
        area = app.query_one(ControlFreeTextArea)
        area.focus()
        await pilot.press(*"before", "enter")
        await pilot.pause()
        pasted = "\n".join(f"line {number}" for number in range(40))
        app.post_message(events.Paste(pasted))
        await pilot.pause()
        assert area.document.line_count == 41
        await pilot.press("ctrl+z")
        await pilot.pause()
        assert app.is_running
        assert area.text == "before\n" and area.cursor_location == (1, 0)
        await pilot.press("ctrl+y")  # and back
        await pilot.pause()
        assert area.text == "before\n" + pasted


class EditorApp(App[None]):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        yield FileEditor(self.path, "")


async def test_the_file_editor_indents_by_the_files_language() -> None:
    for path, typed, expected in [
        ("/workspace/report.py", "def f():", "def f():\n    x"),
        ("/workspace/app.js", "label:", "label:\nx"),  # a colon opens nothing in JavaScript
        ("/workspace/app.js", "if (a) {", "if (a) {\n    x"),
        ("/workspace/notes.txt", "  - item", "  - item\n  x"),
    ]:
        app = EditorApp(path)
        async with app.run_test() as pilot:
            editor = app.query_one(FileEditor)
            editor.focus()
            await pilot.press(*typed, "enter", "x")
            assert editor.text == expected, path


async def test_the_text_and_height_an_editor_caches_follow_every_edit() -> None:
    """The editors join their text once per edit and count their wrapped height (Textual
    did both for every line it painted: 48 ms of CPU a key in a file of a MiB, 15 ms now,
    `python -m benchmarks.tui`); what they give stays Textual's own result."""

    def consistent(area: CodeInput | FileEditor) -> bool:
        document, wrapped = area.document, area.wrapped_document
        joined = document.newline.join(document.lines)
        summed = sum(len(offsets) + 1 for offsets in wrapped._wrap_offsets)
        return area.text == joined and wrapped.height == summed

    class Editors(App[None]):
        def compose(self) -> ComposeResult:
            yield CodeInput("python", id="repl")
            yield FileEditor("notes.txt", "first\nsecond line that is long " * 8, id="file")

    app = Editors()
    async with app.run_test(size=(60, 30)) as pilot:
        for area in (app.query_one(CodeInput), app.query_one(FileEditor)):
            area.focus()
            area.soft_wrap = True
            await pilot.press(*"x = 1", "enter", *"y = 2")
            assert consistent(area) and "y = 2" in area.text
            await pilot.press("backspace", "backspace", "ctrl+z")
            assert consistent(area)
            area.replace("z" * 150, (0, 0), (0, 1))  # a line that wraps
            assert consistent(area) and area.text.startswith("z" * 150)
            area.load_text("again\r\nwith CRLF")
            assert consistent(area) and area.text == "again\r\nwith CRLF"
            area.soft_wrap = False
            await pilot.press("end", *"!")
            assert consistent(area) and "!" in area.text


class NamingApp(App[None]):
    def compose(self) -> ComposeResult:
        yield DialogInput("new", id="name")


async def test_an_alt_chord_types_nothing_into_a_dialog_s_input() -> None:
    """alt+n in the new-file dialog typed an `n` (QA): a dialog's input takes no alt
    chord as text; letters still go in."""
    app = NamingApp()
    async with app.run_test() as pilot:
        field = app.query_one(DialogInput)
        field.focus()
        field.cursor_position = len(field.value)
        # As a terminal's ESC + letter arrives: the key, with its letter as the character
        # (Pilot's press of "alt+n" carries none).
        for key in ("alt+n", "alt+e"):
            field.post_message(events.Key(key, key[-1]))
        await pilot.press("x")
        assert field.value == "newx"


def test_a_bracketed_paste_holding_escapes_comes_whole_and_presses_no_key() -> None:
    """An ESC in a paste began an escape sequence Textual's parser gave up on: what came
    after it arrived as keys, ahead of the paste (QA: `\\x1b[0m\\x12` ran the cell, ctrl+r
    being \\x12). The workbench mends the parser (`workbench.tui.app`)."""
    pasted = 'x = "A\x1b[31mB\x1b[0mC"  # \x12 and \x1b alone\n\x1b'
    for reads in (
        [f"\x1b[200~{pasted}\x1b[201~"],
        ["\x1b[200~x\x1b[3", "1m\x1b", "X\x1b[20", "1~"],  # markers split over reads
    ):
        parser = XTermParser()
        messages = [message for data in reads for message in parser.feed(data)]
        messages += list(parser.tick())
        [paste] = messages
        assert isinstance(paste, events.Paste)
        assert paste.text == (pasted if len(reads) == 1 else "x\x1b[31m\x1bX")
    # Outside a paste, keys as before: an Escape, then an arrow.
    parser = XTermParser()
    keys = [message for data in ("a", "\x1b[A") for message in parser.feed(data)]
    assert [key.key for key in keys if isinstance(key, events.Key)] == ["a", "up"]


def test_a_paste_reads_the_same_however_the_terminal_s_reads_split_it() -> None:
    """Random input (pastes holding ESCs, keys, arrows) fed whole and fed in random
    pieces gives the same events (found in review: a start marker split over two reads
    left the paste's ESCs to the parser)."""

    def events_of(reads: list[str]) -> list[tuple[str, str]]:
        parser = XTermParser()
        messages = [message for data in reads for message in parser.feed(data)]
        messages += list(parser.tick())
        return [
            (type(message).__name__, getattr(message, "text", None) or getattr(message, "key", ""))
            for message in messages
        ]

    chosen = random.Random(5)
    pieces = ["a", "\x1b", "[", "~", "0", "\x12", "\x1b[A", "x\ny", "\x1b[200~", "\x1b[201~"]
    for _ in range(400):
        text = "".join(chosen.choice(pieces) for _ in range(chosen.randrange(1, 12)))
        text = f"{text}\x1b[200~{text}\x1b[201~b"  # a paste, then a key, in each
        cuts = sorted(chosen.sample(range(1, len(text)), min(4, len(text) - 1)))
        reads = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert events_of(reads) == events_of([text]), reads
