"""One open code context: its transcript, run status, find bar, code input and the
context inspector beside them (hidden until asked for).

The pane owns what a user does in a REPL: run and cancel (it posts `RunRequested` and
`CancelRequested`; the screen calls the API and hands the outcome back to `finish_cell`),
history, find, copying cells and exporting the transcript.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input

from workbench.api import (
    CANCELLED,
    CODE_BYTES_CAP,
    EXECUTE_BODY_CAP,
    EXECUTE_BODY_ROOM,
    CodeContext,
    ExecutionResult,
    HistoryEntry,
    json_payload,
    restored_checkpoint,
    short_id,
)
from workbench.api.display import counted, human_bytes
from workbench.config import Prices
from workbench.sync.runner import entry_result, entry_run_of
from workbench.transcripts.documents import curl_command, history_number
from workbench.tui.key_bindings import action_keys
from workbench.tui.messages import HistoryCaughtUp
from workbench.tui.screens.cell_picker_screen import CellCopyRequest, CellPickerScreen
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.export_screen import ExportRequest, ExportScreen
from workbench.tui.screens.history_search_screen import HistorySearchScreen
from workbench.tui.transcript_cell import CellPart, TranscriptCell
from workbench.tui.transcript_export import default_export_path, write_transcript
from workbench.tui.untrusted import shown
from workbench.tui.widgets.code_input import CodeInput
from workbench.tui.widgets.find_input import FindInput
from workbench.tui.widgets.inspector_panel import InspectorPanel
from workbench.tui.widgets.live_output import LiveOutput
from workbench.tui.widgets.run_status import RunStatus
from workbench.tui.widgets.transcript import Transcript

CANCELLING = "cancelling"
GIVEN_UP_KEPT = 8
"""Cells given up whose cancelled runs a catch-up may still meet (the oldest go first)."""
ABANDONED_NOTE = "abandoned request (the remote guest runs until its fuel runs out)"
GIVEN_UP_NOTE = (
    "given up: the backend cancels its execution (one still waiting for another run in "
    "the sandbox never starts)"
)
"""Where the backend cancels a request given up (its health lists `execution-timeout`)."""
OUTPUT_AT_END = "running (this gateway sends the output when the run ends)"
WAITING_TURN = "waiting for another run in this sandbox to end"
WAITING_FOR_TAB = "waiting for the run in tab {title} (same sandbox) to end"
GONE_NOTE = (
    "This context no longer exists: another client deleted it, or its sandbox. Nothing "
    "runs here any more; the transcript stays to read, copy and export."
)
GONE_REFUSAL = (
    "This context no longer exists: nothing runs or changes here. Open or create another one."
)


def is_cancelled(entry: HistoryEntry) -> bool:
    """A run of the history that ended cancelled."""
    error = entry.result.error if entry.result is not None else None
    return error is not None and error.message.startswith(CANCELLED)


@dataclass(frozen=True, eq=False)
class RestoreNote:
    """The transcript's note of a checkpoint restore of this tab, whose history entry is
    numbered after `after` and at most `at_most` (None: not known); each is itself (two
    restores of one checkpoint read alike)."""

    text: Text
    after: int
    at_most: int | None

    def may_be(self, number: int) -> bool:
        """Whether the restore's entry may have this number."""
        return self.after < number and (self.at_most is None or number <= self.at_most)

    def past(self, after: int) -> bool:
        """Whether its entry lies at or before `after` (a read from there never has it)."""
        return self.at_most is not None and self.at_most <= after


class ReplPane(Vertical):
    """A REPL bound to one context; `history` holds earlier inputs, oldest first.
    Exports go under `data_dir` by default, named with the time from `now_ms`."""

    @dataclass
    class RunRequested(Message):
        """Run `code` in the pane's context (the input is cleared, the status runs)."""

        sandbox_id: str
        context: CodeContext
        code: str

    @dataclass
    class CancelRequested(Message):
        """Interrupt the running cell of the pane's context; `give_up`: drop its request
        now instead (asked again while the interruption was awaited)."""

        sandbox_id: str
        context_id: str
        generation: int
        give_up: bool = False

    @dataclass
    class CatchUpRequested(Message):
        """Read the context's history for the runs after run `after` (before run `before`,
        the cell whose count jumped; None: up to the newest), which another client made;
        `HistoryCaughtUp` answers with them."""

        sandbox_id: str
        context_id: str
        after: int
        before: int | None
        generation: int

    def __init__(
        self,
        sandbox_id: str,
        context: CodeContext,
        history: list[str],
        *,
        show_measurements: bool,
        data_dir: Path,
        now_ms: Callable[[], int],
        prices: Prices | None = None,
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
        self.waiting = False
        """The running cell's status says it waits for its sandbox's turn."""
        self.show_measurements = show_measurements
        self.prices = prices
        self.data_dir = data_dir
        self.now_ms = now_ms
        self.gone = False
        """The context no longer exists (a run found it gone): runs are refused."""
        self.last_run = 0
        """The context's newest execution count the transcript accounts for."""
        self.generation = 0
        """Counts runs started and cells shown: a catch-up of the newest runs asked for
        before either is stale (its runs come with the next cell's jump instead)."""
        self._gap_cells: dict[int, TranscriptCell] = {}
        """The cell of each run whose count jumped, until the runs before it are shown."""
        self._own_runs: set[int] = set()
        """Runs of this tab that show no cell (the context inspector's)."""
        self._restore_notes: list[RestoreNote] = []
        """The notes of this tab's checkpoint restores whose history entries were not seen
        yet: another client's runs before such an entry are shown before its note."""
        self._abandoned_watch_runs = 0
        """Watch runs of this tab the watch gave up, each said by a cell already: the
        history may keep them (cancelled), which the next catch-up leaves out."""
        self._uncounted: deque[TranscriptCell] = deque(maxlen=GIVEN_UP_KEPT)
        """This tab's cells whose requests it dropped after their runs may have begun (a
        cell given up while it ran, a watch run given up), oldest first, each said by a
        cell already: the backend may yet run one and cancel it (a gateway answering
        again), which a catch-up then leaves out (it came as another client's run: found
        in review) and numbers the cell with, in order (one cell per run)."""
        self._given_up_waiting: int | None = None
        """The generation of the run given up while it waited for its turn: it never
        starts, so its code is not looked for in the history."""
        self._showing_watch_run = False
        """The running cell shown is the watch's run (not the user's, which it waits for)."""

    def compose(self) -> ComposeResult:
        with Horizontal(id="repl-body"):
            with Vertical(id="repl-main"):
                yield Transcript(
                    show_measurements=self.show_measurements, prices=self.prices, id="transcript"
                )
                yield LiveOutput(id="live-output")
                yield FindInput(
                    placeholder="find in transcript (Enter: next match, Escape: close)",
                    id="find-input",
                )
                yield RunStatus(show_measurements=self.show_measurements, id="run-status")
                yield CodeInput(self.context.language, id="code-input")
            yield InspectorPanel(id="inspector")

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
    def find_input(self) -> FindInput:
        return self.query_one("#find-input", FindInput)

    @property
    def inspector(self) -> InspectorPanel:
        return self.query_one(InspectorPanel)

    @property
    def inspector_shown(self) -> bool:
        return self.inspector.has_class("-visible")

    def toggle_inspector(self) -> bool:
        """Show or hide the inspector; True when it is shown now."""
        inspector = self.inspector
        inspector.toggle_class("-visible")
        if not inspector.has_class("-visible"):
            self.focus_input()
        return inspector.has_class("-visible")

    @property
    def running(self) -> bool:
        return self.run_status.running

    @property
    def title(self) -> str:
        """The context as the workbench names it: `PYTHON 27301560`."""
        return f"{self.context.binding} {short_id(self.context.id)}"

    def focus_input(self) -> None:
        """Focus the editor at once (`Widget.focus` waits for the app, which may still be
        closing a dialog): what is typed next lands in it."""
        self.screen.set_focus(self.code_input)

    # ----------------------------------------------------------------- running

    def run_cell(self) -> None:
        """Run the typed code once the editor has taken every key that came before the
        run key: that key is a priority binding, so it overtakes keys (a fast typist, a
        paste without bracketed paste, ssh) still queued for the editor."""
        self.code_input.call_later(self._run_typed_code)

    def refuses_as_gone(self) -> bool:
        """True, saying so, when the context is gone (or its sandbox): nothing is asked
        about it, since a request naming a destroyed sandbox makes it again, empty."""
        if self.gone:
            self.notify(GONE_REFUSAL, title=self.title, severity="warning", timeout=5)
        return self.gone

    def _run_typed_code(self) -> None:
        """Ask for the typed code to run (not while a cell runs, nor in a context that is
        gone: it says so; nothing for blank code)."""
        if self.refuses_as_gone():
            return
        if self.running:
            hint = self.cancel_hint()
            self.notify(
                f"A cell is running; your code stays in the editor{f' ({hint})' if hint else ''}.",
                severity="warning",
                timeout=3,
            )
            return
        code = self.code_input.text
        if not code.strip():
            return
        size = len(code.encode("utf-8", errors="surrogatepass"))
        # Either is refused by any backend: said here, and the code stays.
        if size > CODE_BYTES_CAP:
            self.notify(
                f"This cell holds {human_bytes(size)} of code; a run takes at most "
                f"{human_bytes(CODE_BYTES_CAP)}. Your code stays in the editor.",
                severity="error",
            )
            return
        escaped = len(json_payload(code))
        if escaped > EXECUTE_BODY_CAP - EXECUTE_BODY_ROOM:
            self.notify(
                f"This cell's code takes {human_bytes(escaped)} as sent (its quotes, "
                "backslashes and control characters travel escaped); a run's request "
                f"takes at most {human_bytes(EXECUTE_BODY_CAP)}. Your code stays in the "
                "editor.",
                severity="error",
            )
            return
        self.post_message(self.RunRequested(self.sandbox_id, self.context, code))
        self.generation += 1
        self.pending_code = code
        self.code_input.text = ""
        self.waiting = False
        self.run_status.start("running", self.cancel_hint())
        self.query_one(LiveOutput).start_cell(self.context.language, code)

    def cancel_hint(self) -> str:
        """`^g cancels`, with the keys bound to cancelling (after the user's keymap)."""
        keys = action_keys(self.screen, "cancel_run")
        return f"{keys} cancels" if keys else ""

    def note_output_at_end(self) -> None:
        """The backend answers at the end (a Worker gateway): say so while the cell runs."""
        self.run_status.relabel(OUTPUT_AT_END)

    def cancel_run(self) -> None:
        """Ask the backend to interrupt the running cell; asked again meanwhile (a gateway
        that does not answer kept it "cancelling" for two minutes; QA), give it up. A cell
        still waiting for its turn is given up at once: the backend's cancel interrupts
        whatever runs in the context, which is then another client's run (QA)."""
        if not self.running:
            return
        if self.waiting:
            # A watch's run is the watch's (the screen says how to stop it): it waits on.
            if not self.showing_watch_run:
                self.waiting = False
                self._given_up_waiting = self.generation
            self.post_message(
                self.CancelRequested(self.sandbox_id, self.context.id, self.generation, True)
            )
            return
        give_up = self.run_status.label == CANCELLING
        if not give_up:
            keys = action_keys(self.screen, "cancel_run")
            again = keys and not self.showing_watch_run  # the watch's run is the watch's
            self.run_status.start(CANCELLING, f"{keys} again gives up" if again else "")
        self.post_message(
            self.CancelRequested(self.sandbox_id, self.context.id, self.generation, give_up)
        )

    @property
    def showing_watch_run(self) -> bool:
        """The running cell is a folder watch's run of its entry."""
        return self.running and self._showing_watch_run

    def show_watch_run(self, code: str) -> None:
        """A folder watch runs its entry file here (unless a cell is running already)."""
        if self.running:
            return
        self.generation += 1
        self.pending_code = code
        self._showing_watch_run = True
        self.run_status.start("watch run", self.cancel_hint())
        self.query_one(LiveOutput).start_cell(self.context.language, code, "watch run")

    def finish_cell(
        self,
        code: str,
        result: ExecutionResult | None,
        failure: str | None,
        label: str | None,
    ) -> None:
        """Show a finished run; a labelled (watch) run's code stays out of the history.
        When its count jumped, the runs between (another client's) are asked for."""
        number = None if result is None else result.execution_count
        self.run_status.stop()
        self._showing_watch_run = False
        self.query_one(LiveOutput).clear_lines()
        cell = TranscriptCell(number, code, self.context.language, result, failure, label)
        self.add_cell(code, cell, remember=label is None)
        self.generation += 1
        if result is not None and result.execution_count is not None:
            self._follow_count(result.execution_count, cell)

    def _follow_count(self, count: int, cell: TranscriptCell) -> None:
        """`cell` ran as run `count`: ask for the runs it skipped (none when the count went
        back, as after a reset: the transcript follows it from there)."""
        after, self.last_run = self.last_run, count
        skipped = set(range(after + 1, count)) - self._own_runs
        if skipped:
            self._gap_cells[count] = cell
            self.post_message(
                self.CatchUpRequested(
                    self.sandbox_id, self.context.id, after, count, self.generation
                )
            )

    def catch_up(self) -> None:
        """Ask for the runs newer than the transcript's (a refresh); not while a cell runs
        (its count shows what it skipped), nor when the context is gone."""
        if not self.gone and not self.running:
            self.post_message(
                self.CatchUpRequested(
                    self.sandbox_id, self.context.id, self.last_run, None, self.generation
                )
            )

    def show_caught_up(self, caught: HistoryCaughtUp) -> bool:
        """Show the runs another client made that the history answered with, in order:
        before the cell whose count jumped, else after the last cell (a refresh's, unless
        a run started or ended since it was asked for). Runs this tab made (the inspector,
        a checkpoint restore) and runs already shown are left out. Whether it showed any."""
        before: TranscriptCell | None = None
        if caught.before is not None:
            before = self._gap_cells.pop(caught.before, None)
            if before is None:
                return False
        elif caught.generation != self.generation or self.running or self.gone:
            return False
        after = caught.after if caught.before is not None else max(caught.after, self.last_run)
        end = caught.before
        entries = [
            entry
            for entry in caught.entries
            if history_number(entry) > after and (end is None or history_number(entry) < end)
        ]
        items: list[TranscriptCell | Text] = []
        if caught.oldest_kept is not None and caught.oldest_kept > after + 1:
            first_kept = caught.oldest_kept if end is None else min(end, caught.oldest_kept)
            pruned = first_kept - after - 1
            if pruned:
                past = f"… {pruned} runs by another client are past the history's limit"
                items.append(Text(past, style="dim"))
        # A restore whose entry is at or before `after` is never read again (a catch-up
        # that failed, a pruned history): its note must not take a later one's entry.
        self._restore_notes = [note for note in self._restore_notes if not note.past(after)]
        shown_any = False
        for entry in entries:
            number = history_number(entry)
            if number in self._own_runs:
                continue
            restore_note = self._restore_note_of(entry)
            if restore_note is not None:
                # This tab's restore, said by its note already: the runs before it go
                # before that note (they showed after it, as if run on the checkpoint).
                self._restore_notes.remove(restore_note)
                if items:
                    self._insert_caught_up(restore_note.text, items)
                    shown_any = True
                    items = []
                continue
            if self._abandoned_watch_runs and self._is_cancelled_watch_run(entry):
                self._abandoned_watch_runs -= 1  # this tab's: its cell says so already
                self._number_uncounted(entry, watch=True)
                continue
            if is_cancelled(entry) and self._number_uncounted(entry, watch=False):
                continue  # this tab's given-up cell, said already
            items.append(self._past_cell(entry, from_another_client=True))
        if caught.before is None:
            # A read of the whole history waits for the sandbox's turn: an abandoned run
            # not in it never began (or the backend keeps no history).
            self._abandoned_watch_runs = 0
            if entries:
                self.last_run = max(self.last_run, history_number(entries[-1]))
        if not items:
            return shown_any
        self._insert_caught_up(before, items)
        return True

    def _restore_note_of(self, entry: HistoryEntry) -> RestoreNote | None:
        """The note of this tab's restore that `entry` records, if it is one."""
        if entry.result is not None or restored_checkpoint(entry.code) is None:
            return None
        number = history_number(entry)
        return next((note for note in self._restore_notes if note.may_be(number)), None)

    def _insert_caught_up(
        self, before: TranscriptCell | Text | None, items: list[TranscriptCell | Text]
    ) -> None:
        """Show another client's runs before `before` (a cell or a note; None: at the end),
        their inputs in the history search at the same place."""
        later = sum(
            1
            for shown in self.transcript.cells_from(before)
            if shown.label is None and shown.code.strip()
        )
        self.transcript.insert_before(before, items)
        codes = [item.code for item in items if isinstance(item, TranscriptCell) and not item.label]
        at = len(self.history) - min(later, len(self.history))
        self.history[at:at] = [code for code in codes if code.strip()]
        self.history_position = len(self.history)

    def mark_gone(self, code: str, failure: str, label: str | None) -> None:
        """The run of `code` found the context gone: its cell shows `failure`, and the
        transcript says (once) that nothing runs here any more."""
        self.finish_cell(code, None, failure, label)
        self.note_gone()

    def note_gone(self) -> None:
        """The context no longer exists: the transcript says so (once); runs are refused."""
        if not self.gone:
            self.gone = True
            self.transcript.write(shown(f"✕ {GONE_NOTE}", "bold red"))

    def show_past(self, past: list[HistoryEntry], earlier: int) -> None:
        """Fill the transcript with the context's past runs (a reopened context: its REPL
        state is still there, so its transcript should be too)."""
        if earlier:
            self.transcript.write(
                Text(
                    f"… {counted(earlier, 'earlier run')}: the history search finds what was typed",
                    style="dim",
                )
            )
        for entry in past:
            self.transcript.add_cell(self._past_cell(entry))
            self.last_run = max(self.last_run, history_number(entry))

    def abandon_watch_run(self, label: str, why: str) -> None:
        """The watch gave up its run here (`why`: a change came, or it stopped): its cell
        says so. A run that had begun stays in the history, cancelled, which the catch-up
        asked for here then leaves out (it came as another client's run); a user's cell
        the run waited behind is left running."""
        if not (self.running and self._showing_watch_run):
            return
        self._uncounted.append(self._drop_running_cell(f"cancelled: {why}", label))
        self.generation += 1
        self._abandoned_watch_runs += 1
        self.catch_up()

    def _number_uncounted(self, entry: HistoryEntry, *, watch: bool) -> bool:
        """This tab's run that it dropped (a cell given up, or with `watch` a watch's run
        it cancelled) is in the history after all: its cell, shown without a number, gets
        the run's (the oldest such cell of that code: runs come in the order they were
        asked for). Whether there was one."""
        cell = next(
            (
                shown
                for shown in self._uncounted
                if shown.code == entry.code and (shown.label is not None) == watch
            ),
            None,
        )
        if cell is None:
            return False
        self._uncounted.remove(cell)
        self.transcript.replace_cell(cell, replace(cell, number=history_number(entry)))
        return True

    def _is_cancelled_watch_run(self, entry: HistoryEntry) -> bool:
        return is_cancelled(entry) and entry_run_of(self.context.language, entry.code) is not None

    def _past_cell(
        self, entry: HistoryEntry, *, from_another_client: bool = False
    ) -> TranscriptCell:
        """A cell for a run of the context's history; a watch's run of an entry file is
        labelled with the entry, as it was when it ran here, instead of its runner's code."""
        result, label = entry.result, None
        entry_run = entry_run_of(self.context.language, entry.code)
        if entry_run is not None:
            label = f"watch run: {entry_run.shown_entry}"
            if result is not None:
                result = entry_result(result, entry_run.entry)
        return TranscriptCell(
            history_number(entry),
            entry.code,
            self.context.language,
            result,
            label=label,
            from_another_client=from_another_client,
        )

    def note_restored(self, checkpoint: str) -> None:
        """The context went back to a checkpoint (described by `checkpoint`); the restore
        is a run in the history, numbered after the runs shown (`bound_last_restore` says
        at most which)."""
        note = shown(f"↺ restored checkpoint {checkpoint}", "bold magenta")
        self.transcript.write(note)
        self._restore_notes.append(RestoreNote(note, self.last_run, None))

    def bound_last_restore(self, runs: int) -> None:
        """The context's run count read after its newest restore: that restore's entry is
        numbered at most `runs`."""
        for index in range(len(self._restore_notes) - 1, -1, -1):
            note = self._restore_notes[index]
            if note.at_most is None:
                self._restore_notes[index] = replace(note, at_most=runs)
                return

    def note_inspector_run(self, execution_count: int | None) -> None:
        """The inspector ran in the context (a remote gateway), as run `execution_count`
        where the answer says which."""
        run = "a run" if execution_count is None else f"run {execution_count}"
        if execution_count is not None:
            self._own_runs.add(execution_count)
        self.transcript.write(shown(f"◇ {run} was the context inspector", "dim"))

    def note_waiting(self, waits: bool, behind: str | None = None) -> None:
        """The run waits for its sandbox's turn (`waits`; `behind`: the title of this
        workbench's tab whose run holds it, if known), or its turn came: only the waiting
        label gives way (a cancel's stays)."""
        if waits:
            self.waiting = True
            self.run_status.relabel(
                WAITING_TURN if behind is None else WAITING_FOR_TAB.format(title=behind)
            )
        elif self.waiting:
            self.waiting = False
            self.run_status.relabel("running")

    def show_output(self, lines: list[tuple[str, str]]) -> None:
        """Lines the running cell just wrote (the finished cell replaces them); the first
        also ends a wait a server that sends no `started` said."""
        self.note_waiting(False)
        self.query_one(LiveOutput).add_lines(lines)

    def abandon_run(self, note: str) -> None:
        """The running cell's request was dropped: say so (`note`) in the transcript."""
        if not self.running:
            return
        waited = self._given_up_waiting == self.generation
        cell = self._drop_running_cell(note)
        if not waited:
            self._uncounted.append(cell)
        self.notify(note, title="Cancelled", severity="warning")

    def _drop_running_cell(self, note: str, label: str | None = None) -> TranscriptCell:
        """End the running cell whose answer will not come, with `note` as its outcome (a
        labelled watch run's code stays out of the history, as in `finish_cell`)."""
        code = self.pending_code
        self.run_status.stop()
        self._showing_watch_run = False
        self.query_one(LiveOutput).clear_lines()
        cell = TranscriptCell(None, code, self.context.language, None, note, label)
        self.add_cell(code, cell, remember=label is None)
        return cell

    def add_cell(self, code: str, cell: TranscriptCell, *, remember: bool = True) -> None:
        self.transcript.add_cell(cell)
        if remember and code.strip() and (not self.history or self.history[-1] != code):
            self.history.append(code)
        self.history_position = len(self.history)
        self.draft = ""

    # ----------------------------------------------------------------- history

    @on(CodeInput.HistoryStep)
    def history_step(self, message: CodeInput.HistoryStep) -> None:
        message.stop()
        self.step_history(message.step)

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

    def search_history(self) -> None:
        """Put the entry picked from the history in the input; code typed there and not
        run (in no entry) is replaced only once the user says so, as `alt+w` asks."""

        def recall(code: str) -> None:
            self.set_code(code)
            self.code_input.focus()

        def chosen(code: str | None) -> None:
            if code is None:
                return
            typed = self.code_input.text
            if not typed.strip() or typed == code or typed in self.history:
                recall(code)
                return

            def confirmed(yes: bool | None) -> None:
                if yes:
                    recall(code)

            question = (
                f"Replace the code in {self.title}? The code typed in it and not run is lost."
            )
            self.app.push_screen(ConfirmScreen(question, "Replace"), confirmed)

        self.app.push_screen(HistorySearchScreen(self.history), chosen)

    # ----------------------------------------------------------------- find

    def toggle_find(self) -> None:
        find_input = self.find_input
        find_input.toggle_class("-visible")
        if find_input.has_class("-visible"):
            find_input.focus()
        else:
            self.code_input.focus()

    @on(FindInput.Closed)
    def close_find(self, event: FindInput.Closed) -> None:
        event.stop()
        if self.find_input.has_class("-visible"):
            self.toggle_find()

    @on(Input.Submitted, "#find-input")
    def find_next(self, event: Input.Submitted) -> None:
        event.stop()
        found = self.transcript.find_next(event.value)
        if found is None:
            self.notify(f"{event.value!r} not found", severity="warning")
        else:
            cell = self.transcript.current_cell
            where = f"cell [{cell.shown_number}]" if cell is not None else f"line {found.line + 1}"
            self.notify(
                f"{event.value!r} found in {where} ({found.position} of {found.total})",
                timeout=2,
            )

    # ----------------------------------------------------------------- copy

    def copy_current_cell(self, part: CellPart) -> None:
        cell = self.transcript.current_cell
        if cell is None:
            self.notify("No cell to copy yet.", severity="warning")
            return
        self.copy_cell_part(cell, part)

    def copy_as_curl(self, gateway_url: str, variable: str) -> None:
        """Copy the current cell's execute request as a `curl` command line that reads the
        token from the shell variable `variable`."""
        cell = self.transcript.current_cell
        if cell is None:
            self.notify("No cell to copy yet.", severity="warning")
            return
        body = {"code": cell.code, "contextId": self.context.id}
        self.app.copy_to_clipboard(curl_command(gateway_url, self.sandbox_id, body, variable))
        self.notify(
            f"Copied cell [{cell.shown_number}] as curl (the token: ${variable})", timeout=4
        )

    def pick_cell(self) -> None:
        """Copy a part of any cell, picked with a preview."""
        if not self.transcript.cells:
            self.notify("No cell to copy yet.", severity="warning")
            return

        def chosen(request: CellCopyRequest | None) -> None:
            if request is not None:
                self.copy_cell_part(request.cell, request.part)

        picker = CellPickerScreen(
            list(self.transcript.cells),
            self.transcript.current_cell_index,
            show_measurements=self.show_measurements,
            prices=self.prices,
        )
        self.app.push_screen(picker, chosen)

    def copy_cell_part(self, cell: TranscriptCell, part: CellPart) -> None:
        """Copy `part` of `cell` to the clipboard (OSC 52: works over SSH too)."""
        text = cell.part_text(part)
        if not text:
            self.notify(f"Cell [{cell.shown_number}] has no {part}.", severity="warning")
            return
        self.app.copy_to_clipboard(text)
        shown = cell.shown_number
        what = f"cell [{shown}]" if part == "cell" else f"the {part} of cell [{shown}]"
        self.notify(f"Copied {what}", timeout=2)

    # ----------------------------------------------------------------- compare

    def cells_to_rerun(self) -> list[TranscriptCell]:
        """The current cell and the cells before it; empty when the current cell has no
        outcome to compare with (none yet, or its request failed)."""
        index = self.transcript.current_cell_index
        if index is None or self.transcript.cells[index].result is None:
            return []
        return list(self.transcript.cells[: index + 1])

    # ----------------------------------------------------------------- export

    def export_transcript(self, file_format: str) -> None:
        """Ask for the file (default: under the data dir), then write it."""
        title = f"{self.sandbox_id}-{self.context.binding}-{short_id(self.context.id)}"
        cells = list(self.transcript.cells)
        default = default_export_path(self.data_dir, title, file_format, self.now_ms())

        def chosen(request: ExportRequest | None) -> None:
            if request is not None:
                self.write_export(request.path, title, cells, request.file_format, overwrite=False)

        self.app.push_screen(ExportScreen(file_format, default), chosen)

    def write_export(
        self,
        path: Path,
        title: str,
        cells: list[TranscriptCell],
        file_format: str,
        *,
        overwrite: bool,
    ) -> None:
        """Write the export; an existing file is overwritten only once confirmed."""
        try:
            write_transcript(
                path, title, cells, file_format, overwrite=overwrite, context=self.context
            )
        except FileExistsError:

            def confirmed(yes: bool | None) -> None:
                if yes:
                    self.write_export(path, title, cells, file_format, overwrite=True)

            question = f"{path} already exists.\nOverwrite it with this transcript?"
            self.app.push_screen(ConfirmScreen(question, "Overwrite"), confirmed)
            return
        except OSError as error:
            self.notify(str(error), title="Export failed", severity="error", timeout=8)
            return
        self.notify(str(path), title="Transcript exported")
