"""Pick the backend profile to work against."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class ProfilePickerScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(self, profiles: list[str], current: str) -> None:
        super().__init__()
        self.profiles = profiles
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Switch profile", classes="dialog-title")
            yield OptionList(
                *[
                    Option(f"{name}  (current)" if name == self.current else name, id=name)
                    for name in self.profiles
                ],
                id="profiles",
            )

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = (
            self.profiles.index(self.current) if self.current in self.profiles else 0
        )

    @on(OptionList.OptionSelected)
    def choose(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
