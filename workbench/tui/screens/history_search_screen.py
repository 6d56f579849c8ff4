"""Fuzzy search over a context's history; choosing an entry recalls it.

History may come from a shared `serve`: entries are listed as plain text (no markup)
with control characters shown as `\\xNN`; the chosen entry is recalled exactly.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.fuzzy import Matcher
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from workbench.tui.untrusted import shown_content
from workbench.tui.widgets.dialog_input import DialogInput


def entry_summary(entry: str) -> Content:
    """An entry as one row: its first line that is not blank (at most 200 characters),
    and how many lines it has besides."""
    lines = entry.splitlines() or [""]
    first = next((line for line in lines if line.strip()), lines[0])
    shown = first if len(first) <= 200 else first[:200] + "…"
    summary = shown_content(shown)
    more = len(lines) - 1
    if more:
        summary += Content.styled(f"  (+{more} line{'s' if more > 1 else ''})", "dim")
    return summary


class HistorySearchScreen(ModalScreen[str | None]):
    """Newest entries first; typing filters and ranks them by fuzzy match."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel"),
        Binding("down", "focus_matches", "Matches", show=False, id="history.focus_matches"),
    ]

    def __init__(self, history: list[str]) -> None:
        super().__init__()
        self.entries = list(dict.fromkeys(reversed(history)))

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label("Search history", classes="dialog-title")
            yield DialogInput(placeholder="type to filter", id="history-query")
            yield OptionList(id="history-matches")

    def on_mount(self) -> None:
        self.show_matches("")

    @on(Input.Changed, "#history-query")
    def filter_entries(self, event: Input.Changed) -> None:
        self.show_matches(event.value)

    def show_matches(self, query: str) -> None:
        matches = self.query_one("#history-matches", OptionList)
        matches.clear_options()
        if query:
            matcher = Matcher(query)
            scored = [(matcher.match(entry), entry) for entry in self.entries]
            ranked = [entry for score, entry in sorted(scored, key=lambda s: -s[0]) if score]
        else:
            ranked = self.entries
        for index, entry in enumerate(ranked[:200]):
            matches.add_option(Option(entry_summary(entry), id=str(index)))
        self._ranked = ranked
        if ranked:
            matches.highlighted = 0

    @on(Input.Submitted, "#history-query")
    def choose_highlighted(self) -> None:
        matches = self.query_one("#history-matches", OptionList)
        if matches.highlighted is not None and self._ranked:
            self.dismiss(self._ranked[matches.highlighted])

    @on(OptionList.OptionSelected, "#history-matches")
    def choose(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self._ranked[event.option_index])

    def action_focus_matches(self) -> None:
        self.query_one("#history-matches", OptionList).focus()
