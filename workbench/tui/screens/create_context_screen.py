"""Ask for a new code context: binding, cwd and env vars."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, TextArea

from workbench.api import RuntimeInfo, neutralise
from workbench.tui.untrusted import shown_content
from workbench.tui.widgets.env_vars_input import EnvVarsInput


@dataclass(frozen=True)
class ContextRequest:
    binding: str
    cwd: str
    env_vars: dict[str, str]


class CreateContextScreen(ModalScreen[ContextRequest | None]):
    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel"),
        # From any field (the env editor takes Enter for its lines).
        Binding("ctrl+s", "create", "Create", id="dialog.create", priority=True),
    ]

    def __init__(
        self, sandbox_id: str, runtimes: list[RuntimeInfo], preferred: str | None = None
    ) -> None:
        """`preferred`: the binding proposed first (when it offers contexts)."""
        super().__init__()
        self.sandbox_id = sandbox_id
        self.runtimes = [runtime for runtime in runtimes if runtime.contexts]
        self.preferred = preferred

    def compose(self) -> ComposeResult:
        # The backend names the sandbox and the bindings.
        options = [(neutralise(f"{r.binding} ({r.language})"), r.binding) for r in self.runtimes]
        bindings = [binding for _, binding in options]
        proposed = self.preferred if self.preferred in bindings else None
        with Vertical(classes="dialog"):
            yield Label(
                shown_content(f"New code context in {self.sandbox_id}"), classes="dialog-title"
            )
            yield Label("Binding")
            yield Select(
                options,
                id="binding",
                allow_blank=False,
                value=proposed or (bindings[0] if bindings else Select.NULL),
            )
            yield Label("Working directory")
            yield Input("/workspace", id="cwd")
            yield Label("Env vars (KEY=VALUE per line)")
            yield EnvVarsInput(id="context-env")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Create", variant="primary", id="create")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(EnvVarsInput).show_problems(self.query_one(EnvVarsInput).parsed)

    @on(TextArea.Changed)
    def validate_env(self) -> None:
        env_input = self.query_one(EnvVarsInput)
        parsed = env_input.parsed
        env_input.show_problems(parsed)
        self.query_one("#create", Button).disabled = not parsed.valid

    def action_create(self) -> None:
        self.create()

    @on(Button.Pressed, "#create")
    @on(Input.Submitted, "#cwd")
    def create(self) -> None:
        binding = self.query_one("#binding", Select).value
        parsed = self.query_one(EnvVarsInput).parsed
        if not isinstance(binding, str) or not parsed.valid:
            return
        cwd = self.query_one("#cwd", Input).value.strip() or "/workspace"
        self.dismiss(ContextRequest(binding, cwd, parsed.values))

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
