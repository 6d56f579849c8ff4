"""A `/workspace` file opened from the tree: its text highlighted by extension, or a hex
summary of a binary file, under a line with its path, size, type and when it was read."""

from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from workbench.api import ReadFileResult, neutralise
from workbench.tui.formatting import human_bytes
from workbench.tui.untrusted import shown_content

HEX_BYTES = 512
"""How much of a binary file its summary shows."""


def hex_summary(data: bytes, limit: int = HEX_BYTES) -> Text:
    """`offset  hex bytes  printable` rows of the first `limit` bytes, as `xxd` shows them."""
    rows = []
    for offset in range(0, min(len(data), limit), 16):
        chunk = data[offset : offset + 16]
        hexed = " ".join(f"{byte:02x}" for byte in chunk)
        printable = "".join(chr(byte) if 0x20 <= byte < 0x7F else "." for byte in chunk)
        rows.append(f"{offset:08x}  {hexed:<47}  {printable}")
    if len(data) > limit:
        rows.append(f"… {human_bytes(len(data) - limit)} more")
    return Text("\n".join(rows))


class FileView(Vertical):
    """One file of a sandbox's `/workspace`, read when opened and again after each run and
    sync of its sandbox. Its text comes from the guest: control characters are made visible."""

    HELP = """\
## File

A file of the sandbox's `/workspace`, read again after each run and sync: text
highlighted by its extension, a binary file as a hex summary. Long files scroll; only what
is visible is painted.
"""

    def __init__(self, sandbox_id: str, read: ReadFileResult, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="file-view")
        self.sandbox_id = sandbox_id
        self.read = read

    @property
    def path(self) -> str:
        return self.read.path

    def compose(self) -> ComposeResult:
        yield Static(id="file-header")
        yield RichLog(id="file-body", wrap=False, highlight=False, markup=False)

    def on_mount(self) -> None:
        self.show(self.read)

    def show(self, read: ReadFileResult) -> None:
        self.read = read
        kind = "binary" if read.is_binary else read.mime_type
        header = f"{read.path} · {human_bytes(read.size)} · {kind} · read {read.timestamp}"
        self.query_one("#file-header", Static).update(shown_content(header))
        self.remove_class("-gone")
        body = self.query_one("#file-body", RichLog)
        body.clear()
        if read.is_binary:
            body.write(hex_summary(read.data))
            return
        text = neutralise(read.data.decode("utf-8", "replace"))
        lexer = Syntax.guess_lexer(read.path, text)
        body.write(
            Syntax(text, lexer, line_numbers=True, background_color="default", word_wrap=False)
        )

    def show_gone(self) -> None:
        """The file went (a run or a sync removed it): say so above what it held."""
        self.add_class("-gone")
        self.query_one("#file-header", Static).update(
            shown_content(f"{self.read.path} · gone (what it held when last read)")
        )
