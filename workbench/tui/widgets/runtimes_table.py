"""The bindings the current backend offers, with their versions and the state of local
engines."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from workbench.api import EngineInfo, RuntimeInfo
from workbench.tui.untrusted import one_line, shown

STATE_COLUMN = "state"
PROTOCOL_COLUMN = "protocol"


class RuntimesTable(DataTable[str | Text]):
    """Bindings, engine versions and engine states come from the backend (a remote
    gateway says what it likes): every text cell is rendered with `shown`."""

    HELP = """\
## Runtimes

Every binding of the current backend: its language, engine (with its version), whether
it supports code contexts (a REPL with state), the interpreter protocol it speaks (marked
when the backend's core expects another: its contexts fail) and, on the local backend,
whether its engine is prepared.
**f7** prepares the selected row's engine (downloads and compiles it once, with progress);
the first run in a language also prepares it.
"""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.protocols: dict[str, int] = {}
        """Each shown binding's interpreter protocol."""
        self.expected_protocol: int | None = None
        """The one protocol the backend's core accepts (None until its health says)."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_columns("Binding", "Contexts")
        self.add_column("Protocol", key=PROTOCOL_COLUMN)
        self.add_column("State", key=STATE_COLUMN)
        self.add_column("Engine")

    def show_runtimes(self, runtimes: list[RuntimeInfo], engines: dict[str, EngineInfo]) -> None:
        self.clear()
        self.protocols = {runtime.binding: runtime.protocol for runtime in runtimes}
        for runtime in runtimes:
            self.add_row(
                shown(one_line(f"{runtime.binding} ({runtime.language})")),
                shown("yes" if runtime.contexts else "no"),
                self.protocol_cell(runtime.protocol),
                shown(describe(engines.get(runtime.language))),
                shown(one_line(runtime.engine)),
                key=runtime.binding,
            )

    def show_expected_protocol(self, expected: int | None) -> None:
        """Mark the rows whose protocol differs from the core's `expected` one."""
        self.expected_protocol = expected
        for binding, protocol in self.protocols.items():
            self.update_cell(binding, PROTOCOL_COLUMN, self.protocol_cell(protocol))

    def protocol_cell(self, protocol: int) -> Text:
        if self.expected_protocol is None or protocol == self.expected_protocol:
            return Text(str(protocol))
        return Text(f"{protocol} ≠ core's {self.expected_protocol}", style="bold red")

    def show_engine_state(self, binding: str, text: str) -> None:
        if binding in {row.value for row in self.rows}:
            self.update_cell(binding, STATE_COLUMN, shown(text))

    @property
    def selected_binding(self) -> str | None:
        if self.row_count == 0:
            return None
        return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)


def describe(engine: EngineInfo | None) -> str:
    """The state column: `deployed` for a remote runtime, else the local engine's state."""
    if engine is None:
        return "deployed"
    if engine.detail:
        return f"{engine.state}: {engine.detail}"
    return engine.state
