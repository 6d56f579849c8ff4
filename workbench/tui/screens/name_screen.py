"""Ask for a name (of a new file or folder, or a new one for it), checking it as typed."""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from workbench.tui.untrusted import one_line, shown_content
from workbench.tui.widgets.dialog_input import DialogInput
from workbench.tui.workspace_paths import name_problem


class NameScreen(ModalScreen[str | None]):
    """Dismissed with a name `problem` accepts (by default one path segment), or None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(
        self,
        title: str,
        action_label: str,
        name: str = "",
        problem: Callable[[str], str | None] = name_problem,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.problem = problem
        self.title_text = title
        self.action_label = action_label
        # A name the backend listed (a guest may make it) is edited as it is shown: its
        # control characters as escapes, never painted raw (a new name cannot hold them).
        self.initial_name = one_line(name)
        self.escaped = self.initial_name != name

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            # The title names a directory or file the backend listed.
            yield Label(shown_content(self.title_text), classes="dialog-title")
            yield DialogInput(self.initial_name, placeholder="name", id="name-input")
            if self.escaped:
                yield Static(
                    "Its control characters are shown as escapes: a new name cannot hold them.",
                    id="name-escaped",
                    classes="field-note",
                    markup=False,
                )
            yield Static("", id="name-problem", classes="field-problem", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.action_label, variant="primary", id="accept")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.check(self.initial_name)

    @on(Input.Changed, "#name-input")
    def name_changed(self, event: Input.Changed) -> None:
        self.check(event.value)

    def check(self, name: str) -> None:
        problem = self.problem(name)
        shown = problem if name else ""
        self.query_one("#name-problem", Static).update(shown or "")
        unchanged = bool(self.initial_name) and name == self.initial_name
        self.query_one("#accept", Button).disabled = problem is not None or unchanged

    @on(Input.Submitted, "#name-input")
    @on(Button.Pressed, "#accept")
    def accept(self) -> None:
        name = self.query_one("#name-input", Input).value
        if self.problem(name) is None and name != self.initial_name:
            self.dismiss(name)

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
