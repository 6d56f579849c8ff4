"""A yes/no question in a modal dialog."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from workbench.tui.untrusted import shown_content


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("escape", "dismiss(False)", "Cancel", id="confirm.cancel"),
        Binding("y", "dismiss(True)", "Yes", id="confirm.yes"),
    ]

    def __init__(self, question: str, confirm_label: str) -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            # The question names sandboxes and contexts the backend listed.
            yield Static(shown_content(self.question), classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.confirm_label, variant="error", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    @on(Button.Pressed, "#confirm")
    def confirm(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(False)
