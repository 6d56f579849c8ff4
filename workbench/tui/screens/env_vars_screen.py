"""Edit a sandbox's env vars; the result is the `set_env_vars` update."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, TextArea

from workbench.tui.env_vars_text import env_vars_as_text, env_vars_update
from workbench.tui.untrusted import shown_content
from workbench.tui.widgets.env_vars_input import EnvVarsInput


class EnvVarsScreen(ModalScreen[dict[str, str | None] | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(self, sandbox_id: str, env_vars: dict[str, str]) -> None:
        super().__init__()
        self.sandbox_id = sandbox_id
        self.env_vars = env_vars

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(shown_content(f"Env vars of {self.sandbox_id}"), classes="dialog-title")
            yield Label("KEY=VALUE per line; every context and run of the sandbox sees them")
            yield EnvVarsInput(env_vars_as_text(self.env_vars), id="sandbox-env")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        env_input = self.query_one(EnvVarsInput)
        env_input.show_problems(env_input.parsed)
        env_input.query_one(TextArea).focus()

    @on(TextArea.Changed)
    def validate_env(self) -> None:
        env_input = self.query_one(EnvVarsInput)
        parsed = env_input.parsed
        env_input.show_problems(parsed)
        self.query_one("#save", Button).disabled = not parsed.valid

    @on(Button.Pressed, "#save")
    def save(self) -> None:
        parsed = self.query_one(EnvVarsInput).parsed
        if parsed.valid:
            self.dismiss(env_vars_update(self.env_vars, parsed.values))

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
