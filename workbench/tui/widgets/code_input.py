"""The REPL's multi-line input: Pygments highlighting and history at the edges."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from pygments.lexer import Lexer  # type: ignore[import-untyped]
from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]
from pygments.token import Token, _TokenType  # type: ignore[import-untyped]
from pygments.util import ClassNotFound  # type: ignore[import-untyped]
from textual import events
from textual.binding import Binding
from textual.document._document import Document, EditResult, Location
from textual.document._wrapped_document import WrappedDocument
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widgets import TextArea

from workbench.tui.highlighting import lexed
from workbench.tui.key_bindings import WORKBENCH_BINDINGS
from workbench.tui.palette_commands import keys_shown
from workbench.tui.untrusted import ControlFreeTextArea

if TYPE_CHECKING:
    from workbench.tui.app import WorkbenchApp

HIGHLIGHT_NAMES: list[tuple[_TokenType, str]] = [
    (Token.Comment, "comment"),
    (Token.Literal.String.Doc, "string.documentation"),
    (Token.Literal.String, "string"),
    (Token.Literal.Number, "number"),
    (Token.Keyword.Constant, "boolean"),
    (Token.Keyword, "keyword"),
    (Token.Operator.Word, "keyword.operator"),
    (Token.Operator, "operator"),
    (Token.Name.Builtin, "function"),
    (Token.Name.Function, "function"),
    (Token.Name.Class, "type.class"),
    (Token.Name.Variable, "variable"),
    (Token.Name.Decorator, "function"),
    (Token.Punctuation, "punctuation.bracket"),
]
"""Pygments token types, most specific first, mapped to TextArea theme style names."""


def is_function_key(key: str) -> bool:
    """`f7`, `shift+f6`, `ctrl+f12`…"""
    return re.fullmatch(r"((shift|ctrl|alt)\+)*f\d{1,2}", key.strip()) is not None


TEXT_AREA_FUNCTION_KEY_ACTIONS = frozenset(
    binding.action
    for binding in TextArea.BINDINGS
    if isinstance(binding, Binding) and all(map(is_function_key, binding.key.split(",")))
)
"""TextArea actions bound only to function keys (f6 select line, f7 select all)."""


OPENING_BRACKETS = ("(", "[", "{")


def new_line_indent(before: str, language: str, width: int) -> str:
    """The indentation a new line starts with when Enter is pressed after `before` (the
    line up to the cursor): the line's own, one level more after an opening bracket, or
    after a colon in Python (not in a comment)."""
    indent = before[: len(before) - len(before.lstrip(" \t"))]
    code = before.strip()
    opens_block = language == "python" and code.endswith(":") and not code.startswith("#")
    if code.endswith(OPENING_BRACKETS) or opens_block:
        indent += " " * width
    return indent


HIGHLIGHT_LIMIT = 32 * 1024
"""Larger texts stay plain: Pygments lexes the whole text again at every edit (about 80 ms
for 32 KiB of Python; a REPL cell may hold 64 KiB, and a file 1 MiB)."""


def highlight_name(token_type: _TokenType) -> str | None:
    for ancestor, name in HIGHLIGHT_NAMES:
        if token_type in ancestor:
            return name
    return None


def highlight_with_pygments(area: TextArea, lexer: Lexer | None) -> bool:
    """Rebuild `area`'s highlights with Pygments (tree-sitter grammars are optional in
    Textual); none without a lexer, nor when the lex ran past its bound (then False)."""
    area._line_cache.clear()
    highlights = area._highlights
    highlights.clear()
    if lexer is None:
        return True
    tokens = lexed(lexer, area.text)
    if tokens is None:
        return False
    row, column = 0, 0
    for token_type, value in tokens:
        name = highlight_name(token_type)
        pieces = value.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                row, column = row + 1, 0
            width = len(piece.encode())
            if name is not None and width:
                highlights[row].append((column, column + width, name))
            column += width
    return True


class CountedWrappedDocument(WrappedDocument):
    """Textual's wrapped document with its height counted, not summed over every line's
    wrap offsets: a text area asks for it at every line it paints. It keeps one entry per
    painted line in `_offset_to_line_info` (textual is pinned)."""

    @property
    def height(self) -> int:
        return len(self._offset_to_line_info)


class JoinedOnceDocument(Document):
    """Textual's document with its text joined once per edit: a text area asks for it at
    every line it paints (to know whether to show its placeholder). Only `replace_range`
    changes its lines."""

    _text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = super().text
        return self._text

    def replace_range(self, start: Location, end: Location, text: str) -> EditResult:
        self._text = None
        return super().replace_range(start, end, text)


class CodeArea(ControlFreeTextArea):
    """What the REPL's input and the file editor share: function keys and alt chords go
    on to the workbench's bindings; Enter inserts a newline indented as the line before
    (one level more after an opening bracket, or a colon in Python), and Backspace in an
    indentation removes a level. A paste is inserted as it is (terminals mark it as a
    paste, which is no key). Once removed, it paints blank. Its document joins its text
    once per edit and its wrapped document counts its height: Textual did both for every
    line it painted, and typing in a file of a MiB took 80 ms of CPU a key (QA)."""

    _plain = False
    """A lex of this document ran past its bound: it stays plain."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._count_once()

    def _set_document(self, text: str, language: str | None) -> None:
        self._plain = False
        super()._set_document(text, language)
        self._count_once()

    def _highlight(self, lexer: Lexer | None) -> None:
        """Highlight with `lexer` (None: plain), unless the text is longer than
        `HIGHLIGHT_LIMIT`. A lex that ran past its bound (a crafted text) leaves the
        document plain until another is loaded: each key would pay it."""
        if self._plain or len(self.text.encode()) > HIGHLIGHT_LIMIT:
            lexer = None
        if not highlight_with_pygments(self, lexer):
            self._plain = True

    def _count_once(self) -> None:
        if type(self.document) is Document:  # not a syntax tree's (none is used here)
            self.document.__class__ = JoinedOnceDocument
        self.wrapped_document.__class__ = CountedWrappedDocument

    def render_lines(self, crop: Region) -> list[Strip]:
        """Blank once removed: Textual may paint a screen under a dialog from the layout
        of its last frame, which still holds a tab closed since (on a loaded machine,
        F3 right after ctrl+w), and TextArea's paint of a removed one raised KeyError."""
        if not self.is_attached:
            return [Strip.blank(crop.width)] * crop.height
        return super().render_lines(crop)

    @property
    def indent_language(self) -> str:
        """The language whose block starts `new_line_indent` knows ("" for none)."""
        return ""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Function keys belong to the workbench (f7 prepares an engine, …): TextArea's
        own function-key actions give way, so the key goes on to the app's binding."""
        if action in TEXT_AREA_FUNCTION_KEY_ACTIONS:
            return False
        return super().check_action(action, parameters)

    async def _on_key(self, event: events.Key) -> None:
        """An alt chord is a binding, never text: terminals send it as ESC + the letter,
        which TextArea's own key handler (run after this one, unless prevented) would
        insert (`alt+h` typed an `h`). It goes on to the app's bindings. Enter inserts a
        newline and the indentation `new_line_indent` gives."""
        if "alt" in event.key.split("+")[:-1]:
            event.prevent_default()
        elif event.key == "enter" and not self.read_only:
            event.stop()
            event.prevent_default()
            start, end = sorted(self.selection)
            before = self.document.get_line(start[0])[: start[1]]
            indent = new_line_indent(before, self.indent_language, self.indent_width)
            self._replace_via_keyboard("\n" + indent, start, end)

    def action_delete_left(self) -> None:
        """In the indentation (only spaces before the cursor), back to the level before."""
        row, column = self.cursor_location
        before = self.document.get_line(row)[:column]
        if self.read_only or not self.selection.is_empty or not before or before.strip(" "):
            super().action_delete_left()
            return
        level = (column - 1) // self.indent_width * self.indent_width
        self._delete_via_keyboard((row, level), (row, column))


class CodeInput(CodeArea):
    """A code cell editor (see `CodeArea` for Enter and Backspace); Up on the first line
    and Down on the last line ask for the previous/next history entry (which may come
    from a shared `serve`: control characters are not painted)."""

    HELP = """\
## Code input

Type code for the open context. **Enter** inserts a newline, indented like the line
before it (one level more after `(`, `[`, `{`, or a Python `:`); **Backspace** in the
indentation removes one level. Run the cell with the *Run cell* key (see the footer).
**Up** on the first line and **Down** on the last line walk this context's history;
*Search history* finds older cells. **Tab** indents here, so **shift+tab** moves the
focus out (as does *Sandbox tree*).
"""

    class HistoryStep(Message):
        """Up at the top (`step=-1`) or Down at the bottom (`step=1`)."""

        def __init__(self, code_input: CodeInput, step: int) -> None:
            super().__init__()
            self.code_input = code_input
            self.step = step

        @property
        def control(self) -> CodeInput:
            return self.code_input

    def __init__(self, language: str, *, id: str | None = None) -> None:
        self.code_language = language
        self._lexer: Lexer | None
        try:
            self._lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
        except ClassNotFound:
            self._lexer = None
        super().__init__(
            "",
            tab_behavior="indent",
            show_line_numbers=True,
            id=id,
            placeholder="code… (Enter: newline)",
        )

    def on_mount(self) -> None:
        """The placeholder names the keys that run the cell, after the user's keymap (it
        said ctrl+r where ctrl+r was remapped to cancel; QA); in the workbench only."""
        if not hasattr(self.app, "keymap"):
            return
        app = cast("WorkbenchApp", self.app)
        run = next(binding for binding in WORKBENCH_BINDINGS if binding.id == "repl.run")
        self.placeholder = f"code… (Enter: newline, {keys_shown(app, run)}: run)"

    @property
    def indent_language(self) -> str:
        return self.code_language

    def _build_highlight_map(self) -> None:
        self._highlight(self._lexer)

    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self.cursor_location[0] == 0:
            self.post_message(self.HistoryStep(self, -1))
            return
        super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        if not select and self.cursor_location[0] == self.document.line_count - 1:
            self.post_message(self.HistoryStep(self, 1))
            return
        super().action_cursor_down(select)
