"""Edit a sandbox's env vars and save them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static, TextArea

from workbench.tui.env_vars_text import env_vars_as_text, env_vars_update
from workbench.tui.error_messages import describe_error
from workbench.tui.untrusted import shown_content
from workbench.tui.widgets.env_vars_input import EnvVarsInput

EnvVarsSaver = Callable[[dict[str, str | None]], Awaitable[None]]
"""Sends the `set_env_vars` update (raises what the backend answers when it refuses)."""


class EnvVarsScreen(ModalScreen[dict[str, str | None] | None]):
    """Dismissed with the update once the backend saved it (None: nothing to save, or
    cancelled). A refusal (the sandbox is gone, the backend is down…) is shown here,
    keeping what was typed."""

    @dataclass
    class Saved(Message, bubble=False):
        update: dict[str, str | None]

    @dataclass
    class Refused(Message, bubble=False):
        reason: str

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]

    def __init__(self, sandbox_id: str, env_vars: dict[str, str], save: EnvVarsSaver) -> None:
        super().__init__()
        self.sandbox_id = sandbox_id
        self.env_vars = env_vars
        self.save_env_vars = save
        self.saving = False
        """A save is in flight."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(shown_content(f"Env vars of {self.sandbox_id}"), classes="dialog-title")
            yield Label("KEY=VALUE per line; every context and run of the sandbox sees them")
            yield EnvVarsInput(env_vars_as_text(self.env_vars), id="sandbox-env")
            yield Static("", id="save-problem", classes="field-problem", markup=False)
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
        self.query_one("#save", Button).disabled = self.saving or not parsed.valid

    @on(Button.Pressed, "#save")
    def save(self) -> None:
        parsed = self.query_one(EnvVarsInput).parsed
        if self.saving or not parsed.valid:
            return
        update = env_vars_update(self.env_vars, parsed.values)
        if not update:
            self.dismiss(None)
            return
        self.show_saving(True)
        self.query_one("#save-problem", Static).remove_class("-refused")
        self.run_worker(self.run_save(update), name="save_env_vars", exit_on_error=False)

    def show_saving(self, saving: bool) -> None:
        """While the save is on its way nothing can be typed (it would be lost when the
        dialog closes) and the dialog stays (closing it would cancel the save, its
        outcome unknown)."""
        self.saving = saving
        self.query_one(EnvVarsInput).query_one(TextArea).read_only = saving
        self.query_one("#save", Button).disabled = saving
        self.query_one("#cancel", Button).disabled = saving

    async def run_save(self, update: dict[str, str | None]) -> None:
        """Worker body: the backend's answer comes back as a message."""
        try:
            await self.save_env_vars(update)
        except Exception as error:
            self.post_message(self.Refused(describe_error(error)))
            return
        self.post_message(self.Saved(update))

    @on(Saved)
    def saved(self, message: Saved) -> None:
        self.show_saving(False)
        self.dismiss(message.update)

    @on(Refused)
    def refused(self, message: Refused) -> None:
        """The reason under the field (from the backend: neutralised); the field keeps what
        was typed."""
        self.show_saving(False)
        problem = self.query_one("#save-problem", Static)
        problem.update(shown_content(message.reason))
        problem.add_class("-refused")
        self.validate_env()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        if self.saving:
            self.notify("Saving the env vars: wait for the answer.", severity="warning")
            return
        self.dismiss(None)
