"""F1: help for the focused widget and every key binding active there."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Markdown


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1", "dismiss(None)", "Close help", id="help.close")]

    def __init__(self, help_markdown: str, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.help_markdown = help_markdown
        self.bindings_rows = bindings

    def compose(self) -> ComposeResult:
        table: DataTable[str] = DataTable(id="help-bindings", cursor_type="row")
        table.add_columns("Keys", "Description", "Binding id")
        for row in self.bindings_rows:
            table.add_row(*row)
        with Vertical(classes="dialog dialog-wide", id="help-dialog"):
            yield Markdown(self.help_markdown, id="help-text")
            yield Label("Keys here (Escape closes)", classes="dialog-title")
            yield table
