"""A one-line input that takes no alt chord as text."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class DialogInput(Input):
    """Textual's `Input`, but an alt chord is a key, never text: terminals send it as ESC
    and the letter, which `Input` inserted (alt+n in the new-file dialog typed an `n`;
    QA). It goes on to the bindings, as in the code editors."""

    async def _on_key(self, event: events.Key) -> None:
        if "alt" in event.key.split("+")[:-1]:
            event.prevent_default()
