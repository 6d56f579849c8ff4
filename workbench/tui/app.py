"""The workbench Textual app (a placeholder screen until the TUI lands)."""

from __future__ import annotations

from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Static


class WorkbenchApp(App[None]):
    """sandbox-workbench: sandboxes, contexts and a REPL per context."""

    TITLE = "sandbox-workbench"
    CSS_PATH = "app.tcss"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", id="app.quit")]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(
            "The workbench UI is being built.\n"
            "Use `sandbox-workbench --help` for the headless commands.",
            id="placeholder",
        )
        yield Footer()


def run_app(profile: str = "local", data_dir: Path | None = None) -> None:
    del profile, data_dir  # used once the workbench UI lands
    WorkbenchApp().run()
