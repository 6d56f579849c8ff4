"""The bindings the current backend offers, with the state of local engines."""

from __future__ import annotations

from textual.widgets import DataTable

from workbench.api.engines import EngineInfo
from workbench.api.types import RuntimeInfo

STATE_COLUMN = "state"


class RuntimesTable(DataTable[str]):
    HELP = """\
## Runtimes

Every binding of the current backend: its language, engine, whether it supports code
contexts (a REPL with state) and, on the local backend, whether its engine is prepared.
**f7** prepares the selected row's engine (downloads and compiles it once, with progress);
the first run in a language also prepares it.
"""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_columns("Binding", "Contexts")
        self.add_column("State", key=STATE_COLUMN)
        self.add_column("Engine")

    def show_runtimes(self, runtimes: list[RuntimeInfo], engines: dict[str, EngineInfo]) -> None:
        self.clear()
        for runtime in runtimes:
            self.add_row(
                f"{runtime.binding} ({runtime.language})",
                "yes" if runtime.contexts else "no",
                describe(engines.get(runtime.language)),
                runtime.engine,
                key=runtime.binding,
            )

    def show_engine_state(self, binding: str, text: str) -> None:
        if binding in {row.value for row in self.rows}:
            self.update_cell(binding, STATE_COLUMN, text)

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
