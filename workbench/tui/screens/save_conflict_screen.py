"""What to do when a save found the file changed in the sandbox since it was read."""

from __future__ import annotations

from typing import Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from workbench.tui.untrusted import shown_content

ConflictChoice = Literal["overwrite", "reload"]


class SaveConflictScreen(ModalScreen[ConflictChoice | None]):
    """Overwrite the sandbox's file with the editor's text, reload it (the edits are
    lost), or neither (None: keep editing, nothing is written)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Keep editing", id="conflict.keep")]

    def __init__(self, question: str, *, gone: bool = False) -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.gone = gone
        """The file was deleted: there is nothing to reload (Overwrite makes it again)."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Not saved: the file changed", classes="dialog-title")
            # The question names a path the backend listed.
            yield Static(shown_content(self.question), classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button(
                    "Save again" if self.gone else "Overwrite", variant="error", id="overwrite"
                )
                if not self.gone:
                    yield Button("Reload", variant="warning", id="reload")
                yield Button("Keep editing", id="keep")

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()

    @on(Button.Pressed, "#overwrite")
    def overwrite(self) -> None:
        self.dismiss("overwrite")

    @on(Button.Pressed, "#reload")
    def reload(self) -> None:
        self.dismiss("reload")

    @on(Button.Pressed, "#keep")
    def keep(self) -> None:
        self.dismiss(None)
