"""Rerunning a REPL cell on another profile, the main screen's part of the diff feature.

The cells before it are replayed first in a fresh context of a scratch sandbox there
(destroyed afterwards), so the REPL state matches. `rerun_cell` is the worker: it posts
its progress (`CellRerunProgress`, shown in the status bar), then `CellRerun` (or
`CellNotRerun`, `OperationFailed`); `CellRerunHandlers` holds the action, its cancel, and
the handlers (the only code that changes the screen: the status bar, `DiffScreen`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from textual.screen import Screen
from textual.widget import Widget

from workbench.api import Backend, CodeContext
from workbench.transcripts import CellReplay, replay_transcript
from workbench.tui.error_messages import describe_error
from workbench.tui.messages import CellNotRerun, CellRerun, CellRerunProgress, OperationFailed
from workbench.tui.profile_connection import ProfileConnection
from workbench.tui.screens.diff_screen import DiffScreen, RerunProfilePickerScreen
from workbench.tui.transcript_cell import TranscriptCell
from workbench.tui.transcript_export import replayable_transcript
from workbench.tui.widgets.status_bar import StatusBar
from workbench.tui.widgets.workbench_tabs import WorkbenchTabs
from workbench.tui.worker_reports import on_report

RERUN_GROUP = "rerun-cell"
"""The worker group of the (one, exclusive) rerun."""


async def rerun_cell(
    owner: Widget,
    open_backend: Callable[[str], Backend],
    here: str,
    profile: str,
    context: CodeContext,
    cells: Sequence[TranscriptCell],
    rerun: int,
) -> None:
    """Worker body: replay `cells` (the last one is the one compared) on `profile`,
    posting its progress (cells before it may take a while: QA waited 45 s for 13)."""
    number = cells[-1].shown_number
    replayed = 0

    def progress(_: CellReplay) -> None:
        nonlocal replayed
        replayed += 1
        owner.post_message(CellRerunProgress(rerun, number, profile, replayed, len(cells)))

    try:
        backend = await asyncio.to_thread(open_backend, profile)
        try:
            transcript = replayable_transcript(context, cells)
            report = await replay_transcript(backend, transcript, on_cell=progress)
        finally:
            await backend.aclose()
    except Exception as error:
        owner.post_message(
            OperationFailed(f"Rerunning cell [{number}] on {profile} failed", describe_error(error))
        )
        return
    finally:
        ended = CellRerunProgress(rerun, number, profile, replayed, len(cells), ended=True)
        owner.post_message(ended)
    if report.known_difference is not None or not report.cells:
        reason = report.known_difference or "it replayed nothing"
        owner.post_message(CellNotRerun(number, profile, reason))
        return
    *earlier, last = report.cells
    assert last.recorded is not None
    diverged = sum(1 for cell in earlier if cell.differences)
    owner.post_message(
        CellRerun(number, here, profile, last.recorded, last.observed, len(earlier), diverged)
    )


class CellRerunHandlers(Screen[None]):
    """The main screen's rerun action and its handler of `CellRerun`.

    A `Screen` so that Textual registers the `@on` handler; `MainScreen` inherits it and
    provides the attributes declared here."""

    connection: ProfileConnection
    tabs: WorkbenchTabs
    status: StatusBar
    reruns = 0
    """Reruns started, the newest one's number."""

    def action_diff_cell(self, profiles: list[str], profile: str | None) -> None:
        """Rerun the active REPL's current cell (after the cells before it) on `profile`,
        or on one picked from `profiles`; `DiffScreen` shows both outcomes."""
        repl = self.tabs.active_repl
        if repl is None:
            return
        cells = repl.cells_to_rerun()
        if not cells:
            self.notify("No finished cell to rerun yet.", severity="warning")
            return
        if not profiles:
            self.notify(
                "No other profile: add one with `sandbox-workbench profiles add`.",
                severity="warning",
            )
            return
        here, context = self.connection.profile, repl.context

        def chosen(target: str | None) -> None:
            if target is None:
                return
            started = f"Rerunning cell [{cells[-1].shown_number}] on {target}"
            if earlier := len(cells) - 1:
                started += f" after replaying {earlier} earlier cell{'s' if earlier != 1 else ''}"
            self.notify(f"{started}… (the command palette can cancel it)", timeout=5)
            self.reruns += 1
            number = cells[-1].shown_number
            self.post_message(CellRerunProgress(self.reruns, number, target, 0, len(cells)))
            self.run_worker(
                rerun_cell(
                    self,
                    self.connection.backend_factory,
                    here,
                    target,
                    context,
                    cells,
                    self.reruns,
                ),
                group=RERUN_GROUP,
                exclusive=True,
                exit_on_error=False,
            )

        if profile is not None:
            chosen(profile)
        else:
            self.app.push_screen(RerunProfilePickerScreen(profiles, here), chosen)

    @property
    def rerunning(self) -> bool:
        """A rerun is replaying cells on another profile."""
        return any(
            worker.group == RERUN_GROUP and worker.is_running
            for worker in self.workers
            if worker.node is self
        )

    def cancel_rerun(self) -> None:
        """Stop the rerun; its scratch sandbox there is destroyed as it ends."""
        if self.rerunning:
            self.workers.cancel_group(self, RERUN_GROUP)
            self.notify("Rerun cancelled.", timeout=3)

    @on_report(CellRerunProgress)
    def cell_rerun_progress(self, message: CellRerunProgress) -> None:
        if message.rerun != self.reruns:  # replaced by a rerun started since (exclusive)
            return
        if message.ended:
            self.status.rerun = ""
        else:
            self.status.rerun = (
                f"rerunning cell [{message.number}] on {message.profile}: "
                f"{message.replayed} of {message.total} cells replayed"
            )

    @on_report(CellRerun)
    def cell_rerun(self, message: CellRerun) -> None:
        self.app.push_screen(DiffScreen(message))

    @on_report(CellNotRerun)
    def cell_not_rerun(self, message: CellNotRerun) -> None:
        self.notify(
            message.reason,
            title=f"Cell [{message.number}] was not rerun on {message.profile}",
            severity="warning",
        )
