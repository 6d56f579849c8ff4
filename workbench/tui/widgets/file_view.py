"""A `/workspace` file opened from the tree: its text in an editor (highlighted by
extension) that saves back, or, read-only, a hex summary of a binary file or the text of
one that cannot be saved unchanged; under a line with its path, size, type, modification
time and state (modified, changed in the sandbox, gone)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import RichLog, Static, TextArea
from textual.widgets.text_area import Document

from workbench.api import FileVersion, ReadFileResult, neutralise, without_controls
from workbench.api.display import human_bytes
from workbench.tui.highlighting import lexer_by_name, within_bound
from workbench.tui.untrusted import HIGHLIGHTED_CHARS, clipped, one_line, shown_content
from workbench.tui.widgets.file_editor import FileEditor

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


MAX_TABS = 2048
"""Tabs on one line past which a file opens read-only: the editor lays out a line's tabs
at every paint, 15 µs each, so a line of 64 Ki tabs took 0.8 s a key and one of a MiB 15 s
(a helper)."""


@dataclass(frozen=True)
class EditableText:
    """What a read gives the editor: `text`, or None and why the file is read-only (then
    shown as a hex summary when `binary`, else as text)."""

    text: str | None
    read_only_reason: str | None = None
    binary: bool = False


def editable_text(read: ReadFileResult) -> EditableText:
    """The read file's text when saving it unedited gives back the same bytes."""
    data = read.data
    if b"\0" in data:
        return EditableText(None, "binary", binary=True)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return EditableText(None, "not UTF-8 text, which the editor would change")
    if Document(text).text != text:
        return EditableText(None, "mixed or unusual line breaks, which the editor would change")
    if "\t" in text and (tabs := max(line.count("\t") for line in text.split("\n"))) > MAX_TABS:
        return EditableText(
            None, f"a line of {tabs:,} tabs, which the editor takes seconds to show"
        )
    return EditableText(text)


class FileView(Vertical):
    """One file of a sandbox's `/workspace`, read when opened and again after each run and
    sync of its sandbox and each refresh (F5). `version` is the file's size and
    modification time (as listed) that the shown text was read at: a save expects it, so
    that it never overwrites a change it did not see. Unsaved edits are never replaced by a read."""

    HELP = FileEditor.HELP

    @dataclass
    class DirtyChanged(Message):
        """The view's edits became saved or unsaved (its tab's title says which)."""

        view: FileView

    def __init__(
        self,
        sandbox_id: str,
        read: ReadFileResult,
        version: FileVersion,
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id, classes="file-view")
        self.sandbox_id = sandbox_id
        self.path = read.path
        self.read = read
        self.version = version
        self.saved_text: str | None = None
        """The file's text at `version` (None: read-only)."""
        self.read_only_reason: str | None = None
        self.changed_underneath = False
        """A read while there were unsaved edits found another version."""
        self.gone = False
        self.sandbox_gone = False
        """The whole sandbox is gone (`gone` too; a save or a listing found it so): saving
        asks to recreate it."""
        self.saving = False
        self.shown_dirty = False
        self.hides_controls = False
        """The text holds control characters, which the editor keeps but does not paint."""
        self.reopened: int | None = None
        """Its place among the file tabs reopened as the profile opened (None: not one)."""

    def compose(self) -> ComposeResult:
        yield Static(id="file-header")
        yield FileEditor(self.path, "", id="file-editor")
        # A file opens at its start (a summary longer than the view opened at its end; QA).
        yield RichLog(id="file-body", wrap=False, highlight=False, markup=False, auto_scroll=False)

    def on_mount(self) -> None:
        self.show(self.read, self.version)

    @property
    def editor(self) -> FileEditor:
        return self.query_one("#file-editor", FileEditor)

    def focus_content(self) -> None:
        """Focus the editor, or the read-only body when the file cannot be edited."""
        body = self.editor if self.is_editable else self.query_one("#file-body", RichLog)
        body.focus()

    @property
    def is_editable(self) -> bool:
        return self.saved_text is not None

    @property
    def is_dirty(self) -> bool:
        """The editor holds text that is not saved."""
        return self.saved_text is not None and self.editor.text != self.saved_text

    def show(self, read: ReadFileResult, version: FileVersion) -> None:
        """Show what `read` holds (at `version`), edits there were included."""
        self.read, self.version = read, version
        editable = editable_text(read)
        self.saved_text, self.read_only_reason = editable.text, editable.read_only_reason
        self.changed_underneath = self.gone = self.sandbox_gone = False
        self.remove_class("-gone")
        self.set_class(editable.text is None, "-read-only")
        if editable.text is not None:
            if self.editor.text != editable.text:
                self.editor.replace_text(editable.text)
            lines = self.editor.document.lines
            self.hides_controls = any(without_controls(line) != line for line in lines)
        else:
            self.show_read_only(read, binary=editable.binary)
        self.show_header()

    def show_read_only(self, read: ReadFileResult, *, binary: bool) -> None:
        body = self.query_one("#file-body", RichLog)
        body.clear()
        if binary:
            body.write(hex_summary(read.data))
            return
        decoded = read.data.decode("utf-8", "replace")
        head, note = clipped(decoded, whole="`sandbox-workbench files cat` shows all")
        text = neutralise(head)  # after the clip: it was 36 s for 64 MiB of controls
        lexer = None
        if len(text) <= HIGHLIGHTED_CHARS:  # highlighting a MiB froze the app for seconds
            lexer = within_bound(lambda: lexer_by_name(Syntax.guess_lexer(read.path, text)))
        if lexer is None:  # unknown, or the guess took too long
            # Tabs expanded here, at once: Rich's own expansion took seconds for a MiB.
            body.write(Text(text.expandtabs(4), no_wrap=True))
        else:
            body.write(
                Syntax(text, lexer, line_numbers=True, background_color="default", word_wrap=False)
            )
        if note is not None:
            body.write(Text(note, "dim"))

    def offer(self, read: ReadFileResult, version: FileVersion, *, discard_edits: bool) -> None:
        """A new read of the file: shown, unless it would replace unsaved edits (kept, and
        the header says that the file changed in the sandbox) and `discard_edits` is False."""
        if self.is_dirty and not discard_edits:
            self.changed_underneath = self.changed_underneath or version != self.version
            self.gone = self.sandbox_gone = False
            self.remove_class("-gone")
            self.show_header()
            return
        self.show(read, version)

    def show_gone(self) -> None:
        """The file went (a run or a sync removed it): say so above what it held."""
        self.gone, self.sandbox_gone = True, False
        self.add_class("-gone")
        self.show_header()

    def show_sandbox_gone(self) -> None:
        """A save or a listing found the file's sandbox gone (another client destroyed
        it): say so above what the file held."""
        self.gone = self.sandbox_gone = True
        self.add_class("-gone")
        self.show_header()

    def show_changed(self) -> None:
        """A save found the file changed in the sandbox since it was read."""
        self.changed_underneath = True
        self.show_header()

    def show_saving(self, saving: bool) -> None:
        self.saving = saving
        self.show_header()

    def saved(self, text: str, version: FileVersion) -> None:
        """`text` is now the file's, at `version`."""
        self.saved_text, self.version = text, version
        self.changed_underneath = self.gone = self.sandbox_gone = self.saving = False
        self.remove_class("-gone")
        self.show_header()

    def moved_to(self, path: str) -> None:
        """The file was renamed (or a folder holding it)."""
        self.path = path
        self.editor.highlight_as(path)
        self.show_header()

    @on(TextArea.Changed, "#file-editor")
    def edited(self, event: TextArea.Changed) -> None:
        event.stop()
        self.show_header()

    def state_note(self) -> str:
        """The header's last part: what the view's text is to the sandbox's file (unsaved
        edits are said whatever else is)."""
        dirty = self.is_dirty
        notes = ["● modified" if dirty else ""]
        if self.gone:
            what = f"sandbox {self.sandbox_id} gone" if self.sandbox_gone else "gone"
            edits = ": your edits are kept, saving asks first" if dirty else ""
            notes.append(f"{what} (what it held when last read){edits}")
        elif self.changed_underneath:
            notes.append(
                "changed in the sandbox since you opened it: saving asks whether to "
                "overwrite it or reload it (discarding your edits)"
            )
        elif self.saving:
            notes.append("saving…")
        elif self.read_only_reason is not None:
            notes.append(f"read-only: {self.read_only_reason}")
        else:
            notes.append("control characters not shown" if self.hides_controls else "")
        return " · ".join(note for note in notes if note)

    def show_header(self) -> None:
        kind = "binary" if self.read.is_binary else self.read.mime_type
        parts = [
            one_line(self.path),
            human_bytes(self.version.size),
            kind,
            f"modified {self.version.modified_at}",
        ]
        note = self.state_note()
        header = " · ".join([*parts, note] if note else parts)
        self.query_one("#file-header", Static).update(shown_content(header))
        warn = self.gone or self.changed_underneath
        self.set_class(warn, "-warning")
        dirty = self.is_dirty
        if dirty != self.shown_dirty:
            self.shown_dirty = dirty
            self.post_message(self.DirtyChanged(self))
