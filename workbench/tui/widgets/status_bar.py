"""The bottom status line: current profile, where it points and its connection state."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

STATE_STYLES = {
    "connecting": ("◌", "yellow"),
    "connected": ("●", "green"),
    "unreachable": ("✕", "red"),
}


class StatusBar(Static):
    profile: reactive[str] = reactive("local")
    state: reactive[str] = reactive("connecting")
    detail: reactive[str] = reactive("")

    def render(self) -> Text:
        symbol, style = STATE_STYLES.get(self.state, ("?", "yellow"))
        text = Text.assemble(
            (" profile ", "dim"),
            (self.profile, "bold"),
            "  ",
            (f"{symbol} {self.state}", style),
        )
        if self.detail:
            text.append(f"  {self.detail}", style="dim")
        return text
