"""The REPL's find bar: Enter finds the next match in the transcript, Escape closes it."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message

from workbench.tui.widgets.dialog_input import DialogInput


class FindInput(DialogInput):
    """Shown by *Find in transcript*; its pane hides it and takes the focus back on
    `Closed` (Escape), as every dialog of the workbench closes."""

    BINDINGS = [Binding("escape", "close", "Close find", id="find.close")]

    class Closed(Message):
        """Escape was pressed in the find bar."""

    def action_close(self) -> None:
        self.post_message(self.Closed())
