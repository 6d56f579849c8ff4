"""Ask where and how to export a transcript (Markdown, JSON, a Jupyter notebook or a
replayable transcript), starting from a default path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

from workbench.tui.transcript_export import EXTENSIONS
from workbench.tui.widgets.dialog_input import DialogInput

FORMAT_NAMES = {
    "markdown": "Markdown",
    "json": "JSON",
    "ipynb": "Jupyter notebook",
    "transcript": "Replayable transcript",
}


@dataclass(frozen=True)
class ExportRequest:
    path: Path
    file_format: str


def export_path_problem(text: str) -> str | None:
    if not text.strip():
        return "Enter the file to export to."
    path = Path(text.strip()).expanduser()
    if path.is_dir():
        return f"{path} is a directory."
    return None


class ExportScreen(ModalScreen[ExportRequest | None]):
    """Dismissed with the absolute path to write (whether it exists is checked later) and
    the format chosen; switching the format switches the default path's extension."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(self, file_format: str, default_path: Path) -> None:
        super().__init__()
        self.file_format = file_format
        self.default_path = default_path

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label("Export the transcript", classes="dialog-title")
            with RadioSet(id="export-format"):
                for file_format, name in FORMAT_NAMES.items():
                    yield RadioButton(
                        name, value=file_format == self.file_format, id=f"format-{file_format}"
                    )
            yield Label("File")
            yield DialogInput(str(self.default_path), id="export-path")
            yield Static("", id="export-problem", classes="field-problem", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Export", variant="primary", id="export")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    @on(RadioSet.Changed, "#export-format")
    def format_changed(self, event: RadioSet.Changed) -> None:
        chosen = (event.pressed.id or "").removeprefix("format-")
        if chosen not in FORMAT_NAMES or chosen == self.file_format:
            return
        path_input = self.query_one("#export-path", Input)
        old_suffix = EXTENSIONS[self.file_format]
        if path_input.value.endswith(old_suffix):
            path_input.value = path_input.value.removesuffix(old_suffix) + EXTENSIONS[chosen]
        self.file_format = chosen

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
            path = Path(value.strip()).expanduser().absolute()
            self.dismiss(ExportRequest(path, self.file_format))

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
