"""F1: help for the focused widget and every key binding active there."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Markdown, Static


class HelpScreen(ModalScreen[None]):
    """The bindings as a grid (app.tcss): keys and ids as wide as the longest, so an id
    is never cut; the description takes the rest and wraps where the dialog is narrow."""

    BINDINGS = [Binding("escape,f1", "dismiss(None)", "Close help", id="help.close")]

    def __init__(self, help_markdown: str, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.help_markdown = help_markdown
        self.bindings_rows = bindings

    def compose(self) -> ComposeResult:
        # One scroll for the text and the keys: a long text was cut where it ended.
        with VerticalScroll(classes="dialog dialog-wide", id="help-dialog"):
            yield Markdown(self.help_markdown, id="help-text")
            yield Label("Keys here (Escape closes)", classes="dialog-title")
            with Grid(id="help-bindings-grid"):
                for heading in ("Keys", "Description", "Binding id"):
                    yield Static(heading, classes="help-heading", markup=False)
                for row in self.bindings_rows:
                    for cell in row:
                        yield Static(cell, markup=False)
