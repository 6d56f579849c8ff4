"""Pick the checkpoint a context goes back to."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from workbench.api import Checkpoint
from workbench.api.display import human_bytes
from workbench.tui.untrusted import shown_content


def checkpoint_summary(checkpoint: Checkpoint) -> str:
    """`name · saved 2026-01-02 03:04 UTC · run 5 · 1.8 MiB` (to the minute: it fits 80
    columns)."""
    saved = checkpoint.created_at[:16].replace("T", " ")
    return (
        f"{checkpoint.name} · saved {saved} UTC · run {checkpoint.executions} · "
        f"{human_bytes(checkpoint.bytes)}"
    )


class CheckpointPickerScreen(ModalScreen[str | None]):
    """The context's checkpoints, newest first; dismissed with the chosen one's name."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(self, checkpoints: list[Checkpoint]) -> None:
        super().__init__(classes="dialog-screen")
        self.checkpoints = checkpoints

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label(
                "Restore a checkpoint (the context goes back to it)", classes="dialog-title"
            )
            yield OptionList(
                *[
                    Option(shown_content(checkpoint_summary(checkpoint)), id=checkpoint.name)
                    for checkpoint in reversed(self.checkpoints)
                ],
                id="checkpoint-list",
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected, "#checkpoint-list")
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
