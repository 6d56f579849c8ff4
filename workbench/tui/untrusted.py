"""Rendering text that did not come from this user's keyboard: guest output, file names,
env vars, ids and messages of a backend or a gateway.

Rich and Textual keep ESC and C1 characters in what they paint, so such text would reach
the terminal as escape sequences (clipboard writes, a cleared screen, window titles).
Each widget renders it through one of these helpers (or `neutralise` where Textual wants
a `str`): control characters are shown as `\\xNN`, like the CLI does on a terminal, and
`shown` and `shown_content` never read markup. Exports are files and stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import RenderableType
from rich.style import StyleType
from rich.text import Span, Text
from textual.content import Content
from textual.strip import Strip
from textual.widgets import TextArea

from workbench.api import neutralise, without_controls
from workbench.api import one_line as one_line  # with the rest of the TUI's helpers here
from workbench.api.display import counted

SHOWN_LINES = 12_000
"""Lines of untrusted text rendered in one go: of a cell in the transcript (its code,
stdout, stderr, results and traceback together), a read-only file, a side of a diff.
Rendering takes about 30 µs a line, all at once, so 10,000 lines take a third of a
second, while a gateway's answer of megabytes froze the app for minutes. What is past it
is left out with a note; copies and exports keep everything."""
SHOWN_CHARS = 256 * 1024
"""Characters rendered in one go, with `SHOWN_LINES` (a line of 256 KiB wraps into about
2,000)."""
HIGHLIGHTED_CHARS = 16 * 1024
"""Code longer than this is shown plain: highlighting 64 KiB (the longest code a runtime
takes) took almost a second."""


def cut(text: str, width: int) -> str:
    """`text` up to `width` characters, ending in `…` when it was longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


def shown(text: str, style: StyleType = "") -> Text:
    """Untrusted `text` as a Rich `Text` in `style`: control characters as `\\xNN`."""
    return Text(neutralise(text), style=style)


def shown_content(text: str) -> Content:
    """Untrusted `text` for a Textual label or option: plain text (never markup), control
    characters as `\\xNN`."""
    return Content(neutralise(text))


def shown_text(text: Text, *, on_one_line: bool = False) -> Text:
    """A copy of a styled `text` with its control characters shown as `\\xNN` (tab and
    newline too `on_one_line`), each span still covering what it covered (the same `text`
    when there is nothing to show). Rich itself drops BEL, backspace, VT, FF and CR from a
    `Text` built from a `str`, so those are gone rather than shown."""
    show = one_line if on_one_line else neutralise
    if show(text.plain) == text.plain:  # at once, not a call per character (the usual)
        return text
    pieces = [show(character) for character in text.plain]
    if all(len(piece) == 1 for piece in pieces):
        return text
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    last = len(pieces)
    copy = text.blank_copy("".join(pieces))
    copy.spans = [
        Span(offsets[min(span.start, last)], offsets[min(span.end, last)], span.style)
        for span in text.spans
    ]
    return copy


@dataclass
class ShownBudget:
    """What is left to render of one cell: each part takes its lines and characters
    from it, so a cell of many parts stays within the clip too."""

    lines: int = SHOWN_LINES
    chars: int = SHOWN_CHARS
    skipped: int = 0
    """Parts that came once it was spent (a note counts them)."""

    @property
    def spent(self) -> bool:
        return self.lines <= 0 or self.chars <= 0

    def skipped_note(self) -> list[RenderableType]:
        """A note of the parts left out whole, if any."""
        if not self.skipped:
            return []
        return [Text(f"… {counted(self.skipped, 'more part')} not shown (a copy has all)", "dim")]


def clipped(
    text: str, budget: ShownBudget | None = None, whole: str = "a copy has all"
) -> tuple[str, str | None]:
    """`text` cut to what `budget` has left (a cell's whole budget if None; at least one
    line), which it then uses up, and a note of what was left out (None when nothing
    was; `whole` says where the rest is)."""
    budget = budget or ShownBudget()
    body = text.removesuffix("\n")  # a last newline ends a line, it starts none
    head = body[: max(budget.chars, 1)]
    cut = -1
    for _ in range(max(budget.lines, 1)):
        cut = head.find("\n", cut + 1)
        if cut < 0:
            break
    between_lines = cut >= 0
    if between_lines:
        head = head[:cut]
    budget.lines -= head.count("\n") + 1
    budget.chars -= len(head)
    if len(head) == len(body):
        return text, None
    rest = body[len(head) + 1 :] if between_lines else body[len(head) :]  # not the newline
    return head, (
        f"… {counted(len(rest), 'more character')} not shown, in "
        f"{counted(rest.count(chr(10)) + 1, 'line')} ({whole})"
    )


def shown_part(
    text: str, style: StyleType = "", budget: ShownBudget | None = None
) -> list[RenderableType]:
    """Untrusted `text` as `shown` renders it, clipped to `budget`, with a note if it was
    (the note alone when the budget was spent)."""
    if budget is not None and budget.spent:
        budget.skipped += 1
        return []
    head, note = clipped(text, budget)
    return [shown(head, style)] if note is None else [shown(head, style), Text(note, "dim")]


class ControlFreeTextArea(TextArea):
    """A text editor whose text may hold control characters (recalled history, a
    sandbox's env vars): the text is kept exactly, but they are left out of what is
    painted (they take no cells, so the layout and the cursor stay where they were).
    It is the base of every editor the workbench has, which also keeps an undo from
    crashing the app (below)."""

    def _recompute_cursor_offset(self) -> None:
        """The cursor's offset, from its location clamped to the document: an undo of a
        multiline paste shortens the document before it moves the cursor back, and a
        scrollbar that goes meanwhile asked for the offset of a line gone, which crashed
        the workbench (Textual issue 6686, in 8.2.8; the fix its pull request 6687 makes)."""
        location = self.clamp_visitable(self.cursor_location)
        self._cursor_offset = self.wrapped_document.location_to_offset(location)

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        segments = list(strip)
        painted = [without_controls(segment.text) for segment in segments]
        if all(text == segment.text for text, segment in zip(painted, segments, strict=True)):
            return strip
        return Strip(
            [segment._replace(text=text) for text, segment in zip(painted, segments, strict=True)],
            strip.cell_length,
        )
