"""The line under the transcript: a spinner, the elapsed time and the key that cancels,
while a cell runs."""

from __future__ import annotations

import time

from textual.timer import Timer
from textual.widgets import Static

from workbench.tui.untrusted import shown_content

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class RunStatus(Static):
    """Idle text, or `⠋ 1.2 s · running… (^g cancels)` refreshed ten times a second."""

    def __init__(self, *, show_measurements: bool, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.show_measurements = show_measurements
        self._started: float | None = None
        self._frame = 0
        self._label = ""
        self._hint = ""
        self._timer: Timer | None = None

    def start(self, label: str, hint: str = "") -> None:
        """Show the run as `label`, then `hint` in brackets (how to cancel it)."""
        self._started = time.monotonic()
        self._label = label
        self._hint = hint
        self.add_class("-running")
        if self.show_measurements and self._timer is None:  # started again: one timer
            self._timer = self.set_interval(0.1, self._tick)
        self._tick()

    def relabel(self, label: str) -> None:
        """Say something else about the run in progress."""
        self._label = label
        self._tick()

    def stop(self, text: str = "") -> None:
        self._started = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.remove_class("-running")
        self.update(text)

    @property
    def running(self) -> bool:
        return self._started is not None

    @property
    def label(self) -> str:
        """What the run in progress is said to be doing ("" when none is)."""
        return self._label if self._started is not None else ""

    def _tick(self) -> None:
        if self._started is None:
            return
        # Plain text, never markup: a label may name a context the backend described.
        text = f"{self._label}…" + (f" ({self._hint})" if self._hint else "")
        if not self.show_measurements:
            self.update(shown_content(text))
            return
        self._frame = (self._frame + 1) % len(SPINNER_FRAMES)
        elapsed = time.monotonic() - self._started
        # The time first: a narrow pane cuts the label (with an ellipsis), never the time.
        self.update(shown_content(f"{SPINNER_FRAMES[self._frame]} {elapsed:.1f} s · {text}"))
