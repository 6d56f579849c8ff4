"""Ask for a new code context (binding, cwd and env vars) and create it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, TextArea

from workbench.api import CodeContext, RuntimeInfo, neutralise
from workbench.tui.error_messages import describe_error
from workbench.tui.untrusted import shown_content
from workbench.tui.widgets.dialog_input import DialogInput
from workbench.tui.widgets.env_vars_input import EnvVarsInput


@dataclass(frozen=True)
class ContextRequest:
    binding: str
    cwd: str
    env_vars: dict[str, str]


ContextCreator = Callable[[ContextRequest], Awaitable[CodeContext]]
"""Asks the backend for the context (raises what it answers when it refuses)."""


class CreateContextScreen(ModalScreen[CodeContext | None]):
    """Dismissed with the new context once the backend made it. A refusal (a cwd outside
    /workspace, a binding without contexts there…) is shown here, keeping what was typed
    to correct it."""

    @dataclass
    class Created(Message, bubble=False):
        context: CodeContext

    @dataclass
    class Refused(Message, bubble=False):
        reason: str

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel"),
        # From any field (the env editor takes Enter for its lines).
        Binding("ctrl+s", "create", "Create", id="dialog.create", priority=True),
    ]

    def __init__(
        self,
        sandbox_id: str,
        runtimes: list[RuntimeInfo],
        create_context: ContextCreator,
        preferred: str | None = None,
    ) -> None:
        """`preferred`: the binding proposed first (when it offers contexts)."""
        super().__init__()
        self.sandbox_id = sandbox_id
        self.runtimes = [runtime for runtime in runtimes if runtime.contexts]
        self.stateless = [runtime.binding for runtime in runtimes if not runtime.contexts]
        """Bindings left out: they run statelessly on this backend (Ruby, unless the local
        backend has its contexts on)."""
        self.create_context = create_context
        self.preferred = preferred
        self.creating = False
        """A creation is in flight (closed meanwhile, the context may exist anyway)."""

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
            if self.stateless:
                # Ruby's contexts are a local extension, off unless the daemon has the flag.
                flag = " · --ruby-contexts" if "RUBY" in self.stateless else ""
                yield Static(
                    neutralise(
                        f"Not offered (no contexts here): {', '.join(self.stateless)}{flag}"
                    ),
                    id="stateless-bindings",
                    classes="field-note",
                    markup=False,
                )
            yield Select(
                options,
                id="binding",
                allow_blank=False,
                value=proposed or (bindings[0] if bindings else Select.NULL),
            )
            yield Label("Working directory")
            yield DialogInput("/workspace", id="cwd")
            yield Label("Env vars (KEY=VALUE per line)")
            yield EnvVarsInput(id="context-env")
            yield Static("", id="create-problem", classes="field-problem", markup=False)
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
        self.query_one("#create", Button).disabled = self.creating or not parsed.valid

    def action_create(self) -> None:
        self.create()

    @on(Button.Pressed, "#create")
    @on(Input.Submitted, "#cwd")
    def create(self) -> None:
        binding = self.query_one("#binding", Select).value
        parsed = self.query_one(EnvVarsInput).parsed
        if self.creating or not isinstance(binding, str) or not parsed.valid:
            return
        cwd = self.query_one("#cwd", Input).value.strip() or "/workspace"
        self.creating = True
        self.query_one("#create", Button).disabled = True
        self.query_one("#create-problem", Static).remove_class("-refused")
        self.run_worker(
            self.run_creation(ContextRequest(binding, cwd, parsed.values)),
            name="create_context",
            exit_on_error=False,
        )

    async def run_creation(self, request: ContextRequest) -> None:
        """Worker body: the backend's answer comes back as a message."""
        try:
            context = await self.create_context(request)
        except Exception as error:
            self.post_message(self.Refused(describe_error(error)))
            return
        self.post_message(self.Created(context))

    @on(Created)
    def created(self, message: Created) -> None:
        self.creating = False
        self.dismiss(message.context)

    @on(Refused)
    def refused(self, message: Refused) -> None:
        """The reason under the fields (from the backend: neutralised); the fields keep
        what was typed."""
        self.creating = False
        problem = self.query_one("#create-problem", Static)
        problem.update(shown_content(message.reason))
        problem.add_class("-refused")
        self.validate_env()

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
