"""Ask for a new sandbox id, validating it as the user types."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from workbench.api import sandbox_id_error
from workbench.tui.widgets.dialog_input import DialogInput


class CreateSandboxScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("New sandbox", classes="dialog-title")
            yield DialogInput(placeholder="sandbox id, e.g. my-sandbox", id="sandbox-id")
            yield Static("", id="sandbox-id-problem", classes="field-problem", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Create", variant="primary", id="create", disabled=True)
                yield Button("Cancel", id="cancel")

    @on(Input.Changed, "#sandbox-id")
    def validate_id(self, event: Input.Changed) -> None:
        problem = sandbox_id_error(event.value) if event.value else None
        self.query_one("#sandbox-id-problem", Static).update(problem or "")
        self.query_one("#create", Button).disabled = problem is not None or not event.value

    @on(Input.Submitted, "#sandbox-id")
    @on(Button.Pressed, "#create")
    def create(self) -> None:
        value = self.query_one("#sandbox-id", Input).value
        if value and sandbox_id_error(value) is None:
            self.dismiss(value)
        elif not value:  # Enter on an empty field: say what it wants
            self.query_one("#sandbox-id-problem", Static).update("Enter a sandbox id.")

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
