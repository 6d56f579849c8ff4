"""The context inspector beside a REPL: the names the user made, their types, sizes and
short reprs. Enter on a name asks for its whole value (`ValueRequested`).

Where the backend inspects a copy of the context (local, serve), the panel fills itself
after every cell. A Worker gateway can only run the inspector in the context, as a run
that counts: there the panel waits for the user to ask (`RunRequested`), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Button, DataTable, Static

from workbench.api import ContextInspection, inspected_size
from workbench.tui.untrusted import one_line, shown

VALUE_WIDTH = 24
"""Columns of a value's short repr in the table (the whole value is a key away)."""
RUN_CODE_HINT = (
    "This gateway can inspect only by running code in the context: that counts as a run "
    "and stays in its history."
)


class InspectorPanel(Vertical):
    """The inspection of one context, shown as a table of names."""

    @dataclass
    class ValueRequested(Message):
        """Show the whole value of `name`."""

        name: str

    class RunRequested(Message):
        """Inspect by running the inspector in the context (a remote gateway)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.inspection: ContextInspection | None = None
        self.runs_code = False
        """Inspecting runs code in the context (the backend cannot inspect a copy)."""

    def compose(self) -> ComposeResult:
        yield Static(Text("Names", style="bold"), id="inspector-title")
        yield Static("", id="inspector-state")
        yield Button("Run the inspector in the context", id="inspector-run", compact=True)
        table: DataTable[str | Text] = DataTable(
            id="inspector-names", cursor_type="row", zebra_stripes=True
        )
        # The short columns first: a narrow panel cuts the value's repr (Enter shows it
        # whole), not the type and size.
        table.add_columns("Name", "Type", "Size")
        table.add_column("Value", width=VALUE_WIDTH)
        yield table

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#inspector-names", DataTable)

    def set_state(self, text: str, style: str = "dim") -> None:
        self.query_one("#inspector-state", Static).update(shown(text, style))

    def expect(self, *, runs_code: bool) -> None:
        """The panel was opened, or the context ran: say what comes next."""
        self.runs_code = runs_code
        self.query_one("#inspector-run").display = runs_code
        hint = "Enter: a value, run in the context" if runs_code else "Enter: a value"
        title = Text.assemble(("Names", "bold"), (f"  {hint}", "dim"))
        self.query_one("#inspector-title", Static).update(title)
        if runs_code:
            stale = " The names below are of an earlier run." if self.inspection else ""
            self.set_state(RUN_CODE_HINT + stale, "yellow")
        else:
            self.set_state("reading a copy of the context…")

    def show_inspection(self, inspection: ContextInspection) -> None:
        self.inspection = inspection
        table = self.table
        table.clear()
        for name in inspection.names:
            # One line each: a table cell shows its first (`two\nlines` read `two`; QA).
            table.add_row(
                shown(one_line(name.name), "bold"),
                shown(one_line(name.type), "cyan"),
                shown(inspected_size(name.length, name.bytes), "dim"),
                shown(one_line(name.repr)),
                key=name.name,
            )
        run = inspection.execution_count
        how = f"the inspector ran as run {run}" if inspection.ran_code else "a copy, nothing ran"
        count = f"{len(inspection.names)} names" if inspection.names else "no names yet"
        if inspection.more:
            count += f" (+{inspection.more} not listed)"
        self.set_state(f"{count} · after run {run} · {how}")

    def show_failure(self, failure: str) -> None:
        self.set_state(f"Inspecting failed: {failure}", "red")

    @on(DataTable.RowSelected, "#inspector-names")
    def name_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.ValueRequested(event.row_key.value))

    @on(Button.Pressed, "#inspector-run")
    def run_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.RunRequested())
