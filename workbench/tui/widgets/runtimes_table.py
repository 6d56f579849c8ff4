"""The bindings the current backend offers."""

from __future__ import annotations

from textual.widgets import DataTable

from workbench.api.types import RuntimeInfo


class RuntimesTable(DataTable[str]):
    HELP = """\
## Runtimes

Every binding of the current backend: its language, engine, and whether it
supports code contexts (a REPL with state).
"""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_columns("Binding", "Language", "Engine", "Contexts")

    def show_runtimes(self, runtimes: list[RuntimeInfo]) -> None:
        self.clear()
        for runtime in runtimes:
            self.add_row(
                runtime.binding,
                runtime.language,
                runtime.engine,
                "yes" if runtime.contexts else "no",
                key=runtime.binding,
            )
