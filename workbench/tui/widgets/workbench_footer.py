"""The footer: the keys that fit whole, in binding order, and the palette key.

Textual's footer lays every shown key out in one row and cuts the row at the screen's
edge, so at 80 columns it ended in the middle of a word (`f5 R`). This one leaves out the
keys that do not fit; every key is still in the palette (`^p`) and the help (`f1`).

Textual's footer also rebuilds its keys on every change of the screen's bindings, which
is every change of focus; most leave the keys as they were (433 of 524 in the TUI flow
tests), and a rebuild costs about 10 ms. This one rebuilds only when what it would show
differs.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def key_width(key: FooterKey) -> int:
    """Columns a footer key takes (as `FooterKey.render` pads it, not compact)."""
    width = cell_len(key.key_display) + 2
    if key.description:
        width += cell_len(key.description) + 1
    return width


class WorkbenchFooter(Footer):
    """A footer of the keys that fit in its width, whole."""

    composed_width = 0
    """The width the keys were chosen for (a resize to another chooses again)."""

    _composed_from: tuple[object, ...] | None = None
    """What the keys were chosen from (`_chosen_from`)."""

    def _chosen_from(self) -> tuple[object, ...]:
        """Everything `compose` reads: equal values compose the same keys."""
        active = self.screen.active_bindings
        shown: list[tuple[Binding, bool, str]] = [
            (binding, enabled, tooltip)
            for (_, binding, enabled, tooltip) in active.values()
            if binding.show
        ]
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        return (
            self.size.width,
            self._bindings_ready,
            self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE,
            tuple(shown),
            None if palette is None else palette[1:],
        )

    async def recompose(self) -> None:
        if self.is_attached and self._chosen_from() == self._composed_from:
            return
        await super().recompose()

    def compose(self) -> ComposeResult:
        self.composed_width = self.size.width
        self._composed_from = self._chosen_from()
        widgets: list[Widget] = list(super().compose())
        palette = [widget for widget in widgets if widget.has_class("-command-palette")]
        room = self.size.width - sum(
            key_width(widget) for widget in palette if isinstance(widget, FooterKey)
        )
        for widget in widgets:
            if widget in palette:
                continue
            width = key_width(widget) if isinstance(widget, FooterKey) else 0
            if width > room:
                break
            room -= width
            yield widget
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self.composed_width:
            self.call_after_refresh(self.recompose)
