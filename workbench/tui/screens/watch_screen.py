"""Ask for a local folder to watch into the selected sandbox, and optionally an entry
file to run on every change in the open REPL's context."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from workbench.api import CodeContext, short_id
from workbench.sync.runner import entry_language_problem
from workbench.tui.untrusted import shown_content
from workbench.tui.widgets.dialog_input import DialogInput

DEFAULT_DEST = "/workspace"


@dataclass(frozen=True)
class WatchRequest:
    folder: Path
    dest: str
    entry: str | None
    """The entry file, relative to `folder` (POSIX), to run in the context on change."""


def folder_problem(text: str) -> str | None:
    if not text.strip():
        return "Enter the local folder to watch."
    path = Path(text.strip()).expanduser()
    if not path.exists():
        return f"{path} does not exist."
    if not path.is_dir():
        return f"{path} is not a directory."
    return None


def dest_problem(text: str) -> str | None:
    parts = [part for part in (text.strip() or DEFAULT_DEST).split("/") if part and part != "."]
    if ".." in parts:
        return "The destination cannot contain '..'."
    if parts[:1] != ["workspace"]:
        return "The destination must be /workspace or a folder under it."
    return None


ENTRY_EXAMPLES = {
    "python": "main.py",
    "javascript": "main.js",
    "perl": "main.pl",
    "ruby": "main.rb",
}
"""An entry file's name in each language, for the field's placeholder."""


def entry_problem(folder: str, entry: str, language: str) -> str | None:
    """Why `entry` cannot be run in a context of `language` (None: it can)."""
    relative = PurePosixPath(entry.strip()).as_posix().lstrip("/")
    if not entry.strip() or relative in ("", "."):
        return "Enter the entry file to run (relative to the folder)."
    if ".." in PurePosixPath(relative).parts:
        return "The entry file must be inside the folder."
    if not (Path(folder.strip()).expanduser() / relative).is_file():
        return f"{relative} is not a file in the folder."
    return entry_language_problem(relative, language)


class WatchScreen(ModalScreen[WatchRequest | None]):
    """`context` is the open REPL's context; without one, run-on-change is not offered."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel")]

    def __init__(self, sandbox_id: str, context: CodeContext | None) -> None:
        super().__init__()
        self.sandbox_id = sandbox_id
        self.context = context

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(
                shown_content(f"Watch a folder into {self.sandbox_id}"), classes="dialog-title"
            )
            yield Label("Local folder")
            yield DialogInput(placeholder="e.g. ~/projects/demo", id="watch-folder")
            yield Label("Destination in the sandbox")
            yield DialogInput(DEFAULT_DEST, id="watch-dest")
            if self.context is not None:
                context = self.context
                yield Checkbox(
                    shown_content(
                        f"Run an entry file on change in {context.binding} {short_id(context.id)}"
                    ),
                    id="watch-run",
                )
                example = ENTRY_EXAMPLES.get(context.language, "main")
                yield DialogInput(placeholder=f"entry file, e.g. {example}", id="watch-entry")
            else:  # the choice was missing, and nothing said why
                yield Label(
                    "To also run an entry file on each change, open the REPL tab of the "
                    "context to run it in, then watch from there.",
                    id="watch-run-hint",
                )
            yield Static("", id="watch-problem", classes="field-problem", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Start watching", variant="primary", id="start", disabled=True)
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#watch-folder", Input).focus()
        self.validate()

    @property
    def run_on_change(self) -> bool:
        found = self.query("#watch-run")
        return bool(found) and found.first(Checkbox).value

    def problem(self) -> str | None:
        folder = self.query_one("#watch-folder", Input).value
        problem = folder_problem(folder) or dest_problem(self.query_one("#watch-dest", Input).value)
        if problem is None and self.run_on_change:
            entry = self.query_one("#watch-entry", Input).value
            language = "" if self.context is None else self.context.language
            problem = entry_problem(folder, entry, language)
        return problem

    @on(Input.Changed, "#watch-entry")
    def entry_typed(self, event: Input.Changed) -> None:
        """Typing an entry file asks for it to run: the box is ticked (it was ignored)."""
        if event.value.strip():
            self.query_one("#watch-run", Checkbox).value = True

    @on(Input.Changed)
    @on(Checkbox.Changed)
    def validate(self) -> None:
        problem = self.problem()
        folder = self.query_one("#watch-folder", Input).value
        # No complaint about an empty folder field before anything is typed.
        shown = "" if problem is None or not folder.strip() else problem
        self.query_one("#watch-problem", Static).update(shown)
        self.query_one("#start", Button).disabled = problem is not None

    @on(Input.Submitted)
    @on(Button.Pressed, "#start")
    def start(self) -> None:
        if self.problem() is not None:
            return
        folder = Path(self.query_one("#watch-folder", Input).value.strip()).expanduser()
        dest = self.query_one("#watch-dest", Input).value.strip() or DEFAULT_DEST
        entry = None
        if self.run_on_change:
            raw = self.query_one("#watch-entry", Input).value.strip()
            entry = PurePosixPath(raw).as_posix().lstrip("/")
        self.dismiss(WatchRequest(folder.resolve(), dest, entry))

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
