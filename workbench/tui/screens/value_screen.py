"""One inspected name's whole value, a page at a time (`m` asks for the next page)."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static, TextArea

from workbench.api import InspectedValue, without_controls
from workbench.tui.untrusted import shown, shown_content


class ValueScreen(ModalScreen[None]):
    """The value of `name` in a read-only editor (to scroll, search and select); pages
    come from `load_page(offset)`, which answers later through `add_page`."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Close", id="dialog.cancel"),
        Binding("m", "more", "Next page", id="value.more"),
    ]

    def __init__(self, first: InspectedValue, load_page: Callable[[int], None]) -> None:
        super().__init__(classes="dialog-screen")
        self.value = first
        self.shown_chars = len(first.repr)
        self.load_page = load_page
        self.loading = False

    @property
    def value_name(self) -> str:
        return self.value.name

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide", id="value-dialog"):
            title = f"{self.value.name}: {self.value.type}"
            yield Label(shown_content(title), classes="dialog-title")
            yield TextArea(without_controls(self.value.repr), read_only=True, id="value-text")
            yield Static("", id="value-state")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()
        self.show_state()

    def show_state(self) -> None:
        state = f"characters 0-{self.shown_chars} of {self.value.total}"
        if self.shown_chars < self.value.total:
            state += " · m: next page"
        if self.value.ran_code:
            state += " · read by running code in the context"
        self.query_one("#value-state", Static).update(shown(state + " · esc: close", "dim"))

    def action_more(self) -> None:
        if self.loading or self.shown_chars >= self.value.total:
            return
        self.loading = True
        self.query_one("#value-state", Static).update(shown("loading the next page…", "dim"))
        self.load_page(self.shown_chars)

    def add_page(self, page: InspectedValue) -> None:
        """A page `load_page` asked for (or the failure to get it: None)."""
        self.loading = False
        if page.offset == self.shown_chars and page.repr:
            text_area = self.query_one(TextArea)
            text_area.insert(without_controls(page.repr), text_area.document.end)
            self.shown_chars += len(page.repr)
            self.value = page
        self.show_state()

    def page_failed(self, failure: str) -> None:
        self.loading = False
        self.query_one("#value-state", Static).update(shown(f"Loading failed: {failure}", "red"))
