"""What to do when a save found the file's sandbox gone (another client destroyed it)."""

from __future__ import annotations

from typing import Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from workbench.tui.untrusted import shown_content

GoneChoice = Literal["recreate", "copy"]


class SandboxGoneScreen(ModalScreen[GoneChoice | None]):
    """Make the sandbox again with the editor's text as its file, copy the text to the
    clipboard, or neither (None: keep editing); nothing is written until the first."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Keep editing", id="sandbox-gone.keep")]

    def __init__(self, question: str) -> None:
        super().__init__(classes="dialog-screen")
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Not saved: the sandbox is gone", classes="dialog-title")
            # The question names a sandbox and a path the backend listed.
            yield Static(shown_content(self.question), classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Recreate the sandbox", variant="warning", id="recreate")
                yield Button("Copy the text", id="copy")
                yield Button("Keep editing", id="keep")

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()

    @on(Button.Pressed, "#recreate")
    def recreate(self) -> None:
        self.dismiss("recreate")

    @on(Button.Pressed, "#copy")
    def copy(self) -> None:
        self.dismiss("copy")

    @on(Button.Pressed, "#keep")
    def keep(self) -> None:
        self.dismiss(None)
