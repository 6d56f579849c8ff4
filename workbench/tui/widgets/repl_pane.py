"""One open code context: its transcript, run status, find bar and code input."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input

from workbench.api.types import CodeContext
from workbench.tui.transcript_cell import TranscriptCell
from workbench.tui.widgets.code_input import CodeInput
from workbench.tui.widgets.run_status import RunStatus
from workbench.tui.widgets.transcript import Transcript


class ReplPane(Vertical):
    """A REPL bound to one context; `history` holds earlier inputs, oldest first."""

    def __init__(
        self,
        sandbox_id: str,
        context: CodeContext,
        history: list[str],
        *,
        show_measurements: bool,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id, classes="repl-pane")
        self.sandbox_id = sandbox_id
        self.context = context
        self.history = list(history)
        self.history_position = len(self.history)
        self.draft = ""
        self.pending_code = ""
        """The code of the running cell (for the transcript if the run is abandoned)."""
        self.show_measurements = show_measurements

    def compose(self) -> ComposeResult:
        yield Transcript(show_measurements=self.show_measurements, id="transcript")
        yield Input(placeholder="find in transcript (Enter: next match)", id="find-input")
        yield RunStatus(show_measurements=self.show_measurements, id="run-status")
        yield CodeInput(self.context.language, id="code-input")

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def code_input(self) -> CodeInput:
        return self.query_one(CodeInput)

    @property
    def run_status(self) -> RunStatus:
        return self.query_one(RunStatus)

    @property
    def find_input(self) -> Input:
        return self.query_one("#find-input", Input)

    @property
    def running(self) -> bool:
        return self.run_status.running

    def add_cell(self, code: str, cell: TranscriptCell, *, remember: bool = True) -> None:
        self.transcript.add_cell(cell)
        if remember and code.strip() and (not self.history or self.history[-1] != code):
            self.history.append(code)
        self.history_position = len(self.history)
        self.draft = ""

    def step_history(self, step: int) -> None:
        """Show the previous (`-1`) or next (`1`) history entry; past the newest, the
        draft typed before walking history comes back."""
        if not self.history:
            return
        if self.history_position == len(self.history):
            self.draft = self.code_input.text
        position = max(0, min(len(self.history), self.history_position + step))
        if position == self.history_position:
            return
        self.history_position = position
        text = self.draft if position == len(self.history) else self.history[position]
        self.set_code(text, cursor_at_end=step > 0)

    def set_code(self, text: str, *, cursor_at_end: bool = True) -> None:
        code_input = self.code_input
        code_input.text = text
        if cursor_at_end:
            code_input.move_cursor(code_input.document.end)
        else:
            code_input.move_cursor((0, len(code_input.document.get_line(0))))
