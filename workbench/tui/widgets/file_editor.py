"""The editor of a `/workspace` text file: Pygments highlighting by the file's name."""

from __future__ import annotations

from pygments.lexer import Lexer  # type: ignore[import-untyped]
from pygments.lexers import get_lexer_for_filename  # type: ignore[import-untyped]
from pygments.util import ClassNotFound  # type: ignore[import-untyped]

from workbench.tui.widgets.code_input import CodeArea


def lexer_for(path: str) -> Lexer | None:
    """The Pygments lexer of `path`'s name (`report.py`: Python), None when none knows it."""
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


class FileEditor(CodeArea):
    """The text of a file as it will be saved (see `CodeArea` for Enter and Backspace).
    Its text may come from a guest: control characters are kept exactly but not painted."""

    HELP = """\
## File

A text file of the sandbox's `/workspace`: edit it and save it with **ctrl+s**
(**Enter** indents like the line before, one level more after `(`, `[`, `{` or a
Python `:`; **Backspace** in the indentation removes a level). The
save fails, changing nothing, when the file changed in the sandbox since it was read
(a run, the folder watch, another client): you then choose to overwrite it with your
text or to reload it. When another client destroyed the whole sandbox, nothing is
written either (the write would make it again): you choose to recreate it with your
text as its file, or to keep the text (copy it, or keep editing). A run, a sync and
**F5** read the file again: unsaved edits (marked `●`) are kept, and the header then
says when the file changed in the sandbox, or that the whole sandbox is gone (F5 reads
nothing of it then); **alt+l** reloads it and **alt+w** closes it, both asking first.
"""

    def __init__(self, path: str, text: str, *, id: str | None = None) -> None:
        self._lexer = lexer_for(path)
        super().__init__(
            text, tab_behavior="indent", show_line_numbers=True, soft_wrap=False, id=id
        )

    @property
    def indent_language(self) -> str:
        """The Pygments name of the file's language (`python` for `report.py`)."""
        return self._lexer.aliases[0] if self._lexer is not None and self._lexer.aliases else ""

    def _build_highlight_map(self) -> None:
        self._highlight(self._lexer)

    def replace_text(self, text: str) -> None:
        """Show `text` (read again), the cursor staying where it was as far as it can."""
        row, column = self.cursor_location
        self.load_text(text)
        last_row = self.document.line_count - 1
        row = min(row, last_row)
        self.move_cursor((row, min(column, len(self.document.get_line(row)))))

    def highlight_as(self, path: str) -> None:
        """Highlight as `path`'s name says (the file was renamed)."""
        self._lexer = lexer_for(path)
        self._plain = False  # another lexer may take it in time
        self._build_highlight_map()
        self.refresh()
