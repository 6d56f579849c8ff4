"""Pick the checkpoint a context goes back to, or one to delete."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from workbench.api import Checkpoint
from workbench.api.display import human_bytes
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.untrusted import shown_content

RESTORE_HINT = "Enter restores · Delete deletes it (asks first) · Esc cancels"
DELETE_HINT = "Enter deletes it (asks first) · Esc cancels"


def checkpoint_summary(checkpoint: Checkpoint) -> str:
    """`name · saved 2026-01-02 03:04 UTC · run 5 · 1.8 MiB` (to the minute: it fits 80
    columns)."""
    saved = checkpoint.created_at[:16].replace("T", " ")
    return (
        f"{checkpoint.name} · saved {saved} UTC · run {checkpoint.executions} · "
        f"{human_bytes(checkpoint.bytes)}"
    )


@dataclass(frozen=True)
class CheckpointChoice:
    """The checkpoint picked: to restore, or (once the user confirmed) to delete."""

    name: str
    delete: bool = False


class CheckpointPickerScreen(ModalScreen[CheckpointChoice | None]):
    """The context's checkpoints, newest first; dismissed with the chosen one. Enter
    restores it (or, `deleting`, deletes it); Delete deletes the highlighted one. A delete
    is confirmed first, in a dialog naming the checkpoint and its context (`context`)."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel"),
        Binding("delete", "delete_checkpoint", "Delete checkpoint", id="checkpoints.delete"),
    ]

    def __init__(
        self, checkpoints: list[Checkpoint], context: str = "", *, deleting: bool = False
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.checkpoints = checkpoints
        self.context = context
        """What the confirmation names the context by (`PERL 3f2a8c1d`)."""
        self.deleting = deleting

    def compose(self) -> ComposeResult:
        title = (
            "Delete a checkpoint"
            if self.deleting
            else "Restore a checkpoint (the context goes back to it)"
        )
        with Vertical(classes="dialog dialog-wide"):
            yield Label(title, classes="dialog-title")
            yield OptionList(
                *[
                    Option(shown_content(checkpoint_summary(checkpoint)), id=checkpoint.name)
                    for checkpoint in reversed(self.checkpoints)
                ],
                id="checkpoint-list",
            )
            hint = DELETE_HINT if self.deleting else RESTORE_HINT
            yield Static(hint, id="checkpoint-keys", classes="field-note", markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected, "#checkpoint-list")
    def chosen(self, event: OptionList.OptionSelected) -> None:
        name = event.option.id
        if name is None:
            return
        if self.deleting:
            self.confirm_delete(name)
        else:
            self.dismiss(CheckpointChoice(name))

    def action_delete_checkpoint(self) -> None:
        options = self.query_one("#checkpoint-list", OptionList)
        index = options.highlighted
        name = options.get_option_at_index(index).id if index is not None else None
        if name is not None:
            self.confirm_delete(name)

    def confirm_delete(self, name: str) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.dismiss(CheckpointChoice(name, delete=True))

        of = f" of {self.context}" if self.context else ""
        question = (
            f"Delete checkpoint {name}{of}?\n"
            "It cannot be restored afterwards (its memory goes unless another checkpoint "
            "or snapshot holds the same blocks)."
        )
        self.app.push_screen(ConfirmScreen(question, "Delete"), confirmed)
