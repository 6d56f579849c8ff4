"""The bottom status line: current profile, where it points, its connection state and
versions, plus the folder watch and a cell's rerun on another profile (when they run)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from workbench.api.display import counted
from workbench.sync import EventKind, SyncEvent
from workbench.tui.untrusted import one_line

STATE_STYLES = {
    "connecting": ("◌", "yellow"),
    "connected": ("●", "green"),
    "unreachable": ("✕", "red"),
    "token refused": ("✕", "red"),
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
    versions: reactive[str] = reactive("")
    """`<core> <version> · protocol <n>` as the backend's health reports it."""
    version_warning: reactive[str] = reactive("")
    """E.g. `PYTHON speaks protocol 2`: runtimes the core cannot talk to."""
    watch_target: reactive[str] = reactive("")
    """`folder → sandbox:/dest` of the running watch; empty when nothing is watched."""
    watch_state: reactive[str] = reactive("")
    watch_last_sync: reactive[str] = reactive("")
    """E.g. `17:02:03 (2 uploaded in 14 ms)`."""
    watch_errors: reactive[int] = reactive(0)
    watch_conflicts: reactive[int] = reactive(0)
    rerun: reactive[str] = reactive("")
    """E.g. `rerunning cell [3] on staging: 2 of 3 cells replayed`, while one runs."""

    def show_watch(self, target: str) -> None:
        """A watch of `target` (`folder → sandbox:/dest`) is starting."""
        self.clear_watch()
        self.watch_target = target
        self.watch_state = "starting"

    def clear_watch(self) -> None:
        self.watch_target = ""
        self.watch_state = ""
        self.watch_last_sync = ""
        self.watch_errors = 0
        self.watch_conflicts = 0

    def show_watch_event(self, event: SyncEvent) -> None:
        """Follow the watch's state, its last sync and its error and conflict counts."""
        if event.kind is EventKind.WATCHING:
            self.watch_state = "watching"
        elif event.kind is EventKind.SYNCING:
            self.watch_state = "syncing"
        elif event.kind is EventKind.RETRYING:
            self.watch_state = "retrying"
        elif event.kind is EventKind.CONFLICT:
            self.watch_conflicts += 1
        elif event.kind is EventKind.SYNCED and event.report is not None:
            self.watch_state = "watching"
            stamp = time.strftime("%H:%M:%S", time.localtime(event.at))
            self.watch_last_sync = f"{stamp} ({event.report.summary()})"
            self.watch_errors += len(event.report.errors)
        # ERROR events are per path; they are summed up with the pass's report.

    def render(self) -> Text:
        symbol, style = STATE_STYLES.get(self.state, ("?", "yellow"))
        text = Text.assemble(
            (" profile ", "dim"),
            (one_line(self.profile), "bold"),
            "  ",
            (f"{symbol} {self.state}", style),
        )
        if self.versions:
            text.append(f"  {one_line(self.versions)}", style="dim")
        if self.version_warning:
            text.append(f"  ⚠ {one_line(self.version_warning)}", style="bold yellow")
        if self.watch_target:
            text.append("  ⟳ ", style="cyan")
            state = self.watch_state or "watching"
            text.append(
                f"{state}… " if state != "watching" else "watching ",
                style=WATCH_STYLES.get(state, "cyan"),
            )
            text.append(one_line(self.watch_target), style="bold")
            if self.watch_last_sync:
                text.append(f"  last sync {one_line(self.watch_last_sync)}", style="dim")
            if self.watch_errors:
                text.append(f"  {counted(self.watch_errors, 'error')}", style="red")
            if self.watch_conflicts:
                text.append(f"  {counted(self.watch_conflicts, 'conflict')}", style="yellow")
        if self.rerun:
            text.append(f"  ⇄ {one_line(self.rerun)}", style="yellow")
        if self.detail:
            text.append(f"  {one_line(self.detail)}", style="dim")
        # Versions, warnings and the detail (an error message) come from the backend:
        # shown before Rich sees them, as a `Text` drops BEL, backspace and CR (review).
        return text
