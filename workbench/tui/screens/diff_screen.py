"""Both outcomes of a cell rerun on another profile, side by side (`DiffScreen`), and the
profile picker that starts a rerun.

The cell's recorded outcome and the rerun's are compared like `sandbox-workbench diff`
does (logs, results, error name and message; not timing or usage); the rerun itself is
in `workbench/tui/cell_rerun.py`.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from workbench.api import neutralise
from workbench.transcripts import (
    changed_lines,
    differing_fields,
    outcome_lines,
)
from workbench.tui.messages import CellRerun
from workbench.tui.screens.profile_picker_screen import ProfilePickerScreen
from workbench.tui.untrusted import ShownBudget, clipped


class RerunProfilePickerScreen(ProfilePickerScreen):
    """The profile picker, titled for a rerun (the current profile is not offered)."""

    def on_mount(self) -> None:
        self.query_one(".dialog-title", Label).update("Rerun the cell on profile")


DIFF_LINES = 2_000
"""Lines of each side compared and shown: comparing is quadratic at worst (4,000 lines
alike took 1.6 s), and a gateway's answer may hold hundreds of thousands."""


def compared_lines(lines: list[str]) -> tuple[list[str], str | None]:
    """The lines of one side the screen compares and shows, and a note of the rest."""
    if not lines:
        return [], None
    head, note = clipped("\n".join(lines), ShownBudget(lines=DIFF_LINES), whole="an export has all")
    return head.split("\n"), note


def side_text(
    lines: list[str], changed: set[int], marker: str, style: str, note: str | None = None
) -> Text:
    """One side's lines (guest output: control characters shown as `\\xNN`); a changed
    line gets `marker` and `style` (the marker shows the change without colour too);
    `note`: what was left out."""
    text = Text(no_wrap=False)
    for index, line in enumerate(lines):
        visible = neutralise(line)
        if index in changed:
            text.append(f"{marker} {visible}\n", style=style)
        else:
            text.append(f"  {visible}\n")
    if note is not None:
        text.append(note, style="dim")
    return text


class DiffScreen(ModalScreen[None]):
    """Both outcomes of a cell, side by side, differing lines highlighted."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Close", id="diff.close")]

    def __init__(self, rerun: CellRerun) -> None:
        super().__init__()
        self.rerun = rerun
        self.differences = differing_fields(rerun.recorded, rerun.observed)

    @property
    def summary(self) -> str:
        rerun = self.rerun
        verdict = (
            f"Different: {', '.join(self.differences)}."
            if self.differences
            else "Same outcome on both."
        )
        if rerun.earlier:
            verdict += (
                f" {rerun.earlier} earlier cell{'s' if rerun.earlier != 1 else ''} replayed "
                f"first ({rerun.earlier_diverged} differed)."
            )
        return verdict

    def compose(self) -> ComposeResult:
        rerun = self.rerun
        left, left_note = compared_lines(outcome_lines(rerun.recorded))
        right, right_note = compared_lines(outcome_lines(rerun.observed))
        left_changed, right_changed = changed_lines(left, right)
        with Vertical(id="diff-dialog", classes="dialog"):
            yield Label(
                f"Cell [{rerun.number}]: {rerun.here} vs {rerun.profile} "
                "(rerun in a scratch sandbox)",
                classes="dialog-title",
            )
            yield Static(self.summary, id="diff-summary", markup=False)
            with Horizontal(id="diff-sides"):
                with VerticalScroll(classes="diff-side") as here_side:
                    here_side.border_title = f"{rerun.here} (recorded)"
                    yield Static(
                        side_text(left, left_changed, "-", "bold red", left_note), id="diff-here"
                    )
                with VerticalScroll(classes="diff-side") as there_side:
                    there_side.border_title = f"{rerun.profile} (rerun)"
                    yield Static(
                        side_text(right, right_changed, "+", "bold green", right_note),
                        id="diff-there",
                    )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Close", variant="primary", id="close")

    @on(Button.Pressed, "#close")
    def close(self) -> None:
        self.dismiss(None)
