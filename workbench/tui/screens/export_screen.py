"""Ask where to export a transcript (Markdown or JSON), starting from a default path."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

FORMAT_NAMES = {"markdown": "Markdown", "json": "JSON"}


def export_path_problem(text: str) -> str | None:
    if not text.strip():
        return "Enter the file to export to."
    path = Path(text.strip()).expanduser()
    if path.is_dir():
        return f"{path} is a directory."
    return None


class ExportScreen(ModalScreen[Path | None]):
    """Dismissed with the absolute path to write (whether it exists is checked later)."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(self, file_format: str, default_path: Path) -> None:
        super().__init__()
        self.file_format = file_format
        self.default_path = default_path

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            title = f"Export the transcript as {FORMAT_NAMES.get(self.file_format, 'a file')}"
            yield Label(title, classes="dialog-title")
            yield Label("File")
            yield Input(str(self.default_path), id="export-path")
            yield Static("", id="export-problem", classes="field-problem", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Export", variant="primary", id="export")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    @on(Input.Changed, "#export-path")
    def validate(self, event: Input.Changed) -> None:
        problem = export_path_problem(event.value)
        self.query_one("#export-problem", Static).update(problem or "")
        self.query_one("#export", Button).disabled = problem is not None

    @on(Input.Submitted, "#export-path")
    @on(Button.Pressed, "#export")
    def export(self) -> None:
        value = self.query_one("#export-path", Input).value
        if export_path_problem(value) is None:
            self.dismiss(Path(value.strip()).expanduser().absolute())

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
