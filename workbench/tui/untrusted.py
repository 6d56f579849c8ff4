"""Rendering text that did not come from this user's keyboard: guest output, file names,
env vars, ids and messages of a backend or a gateway.

Rich and Textual keep ESC and C1 characters in what they paint, so such text would reach
the terminal as escape sequences (clipboard writes, a cleared screen, window titles).
Each widget renders it through one of these helpers (or `neutralise` where Textual wants
a `str`): control characters are shown as `\\xNN`, like the CLI does on a terminal, and
`shown` and `shown_content` never read markup. Exports are files and stay exact.
"""

from __future__ import annotations

from rich.style import StyleType
from rich.text import Span, Text
from textual.content import Content
from textual.strip import Strip
from textual.widgets import TextArea

from workbench.api import neutralise, without_controls


def shown(text: str, style: StyleType = "") -> Text:
    """Untrusted `text` as a Rich `Text` in `style`: control characters as `\\xNN`."""
    return Text(neutralise(text), style=style)


def shown_content(text: str) -> Content:
    """Untrusted `text` for a Textual label or option: plain text (never markup), control
    characters as `\\xNN`."""
    return Content(neutralise(text))


def shown_text(text: Text) -> Text:
    """A copy of a styled `text` with its control characters shown as `\\xNN`, each span
    still covering what it covered (the same `text` when there is nothing to show).
    Rich itself drops BEL, backspace, VT, FF and CR from a `Text` built from a `str`, so
    those are gone rather than shown."""
    pieces = [neutralise(character) for character in text.plain]
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


class ControlFreeTextArea(TextArea):
    """A text editor whose text may hold control characters (recalled history, a
    sandbox's env vars): the text is kept exactly, but they are left out of what is
    painted (they take no cells, so the layout and the cursor stay where they were)."""

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
