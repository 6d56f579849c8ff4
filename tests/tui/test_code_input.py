"""The REPL's code input and the file editor on their own: Enter indents as the code
asks, Backspace in the indentation removes a level, and a paste goes in exactly as it
came."""

from __future__ import annotations

from textual import events
from textual.app import App, ComposeResult

from workbench.tui.widgets.code_input import CodeInput, new_line_indent
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
