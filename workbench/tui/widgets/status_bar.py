"""The bottom status line: current profile, where it points and its connection state,
plus the folder watch (when one runs)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

STATE_STYLES = {
    "connecting": ("◌", "yellow"),
    "connected": ("●", "green"),
    "unreachable": ("✕", "red"),
}

WATCH_STYLES = {
    "starting": "yellow",
    "watching": "cyan",
    "syncing": "yellow",
    "running": "yellow",
    "retrying": "red",
}


class StatusBar(Static):
    profile: reactive[str] = reactive("local")
    state: reactive[str] = reactive("connecting")
    detail: reactive[str] = reactive("")
    watch_target: reactive[str] = reactive("")
    """`folder → sandbox:/dest` of the running watch; empty when nothing is watched."""
    watch_state: reactive[str] = reactive("")
    watch_last_sync: reactive[str] = reactive("")
    """E.g. `17:02:03 (2 uploaded in 14 ms)`."""
    watch_errors: reactive[int] = reactive(0)
    watch_conflicts: reactive[int] = reactive(0)

    def render(self) -> Text:
        symbol, style = STATE_STYLES.get(self.state, ("?", "yellow"))
        text = Text.assemble(
            (" profile ", "dim"),
            (self.profile, "bold"),
            "  ",
            (f"{symbol} {self.state}", style),
        )
        if self.watch_target:
            text.append("  ⟳ ", style="cyan")
            state = self.watch_state or "watching"
            text.append(
                f"{state}… " if state != "watching" else "watching ",
                style=WATCH_STYLES.get(state, "cyan"),
            )
            text.append(self.watch_target, style="bold")
            if self.watch_last_sync:
                text.append(f"  last sync {self.watch_last_sync}", style="dim")
            if self.watch_errors:
                text.append(f"  {self.watch_errors} errors", style="red")
            if self.watch_conflicts:
                text.append(f"  {self.watch_conflicts} conflicts", style="yellow")
        if self.detail:
            text.append(f"  {self.detail}", style="dim")
        return text
