"""The selected sandbox at a glance: times, live expiry countdown, workspace, env, contexts."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from workbench.api import SandboxInfo, iso_from_ms, short_id
from workbench.api.display import human_bytes, workspace_summary
from workbench.tui.formatting import MASK, countdown
from workbench.tui.untrusted import shown


def add_row(table: Table, *cells: str | Text) -> None:
    """Add a row to `table`. Its text may come from the backend (ids, env vars, cwd), so
    every `str` cell is rendered with `shown` (no markup, control characters as `\\xNN`)."""
    table.add_row(*(shown(cell) if isinstance(cell, str) else cell for cell in cells))


class InfoPanel(Widget):
    """Renders a `SandboxInfo`; the countdown to `expiresAt` ticks every second."""

    HELP = """\
## Sandbox info

Created and last-used times, a live countdown to expiry, the size of
`/workspace`, what its checkpoints hold of their budget (local and `serve`
only), what the runs it keeps would cost on Workers (an estimate, at the
prices of the config file's `[prices]`), the sandbox's env vars (masked until
revealed) and its code contexts with their snapshot sizes.
"""

    info: reactive[SandboxInfo | None] = reactive(None, layout=True)
    reveal_env: reactive[bool] = reactive(False, layout=True)

    def __init__(self, now_ms: Callable[[], int], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.now_ms = now_ms
        self.checkpoints: dict[str, str] = {}
        """Sandbox id -> what its checkpoints hold of their budget, as the panel says it."""
        self.costs: dict[str, str] = {}
        """Sandbox id -> the estimated cost of its kept runs, as the panel says it."""

    def on_mount(self) -> None:
        self.set_interval(1.0, self.refresh)

    def render(self) -> RenderableType:
        info = self.info
        if info is None:
            return Text("Select a sandbox in the tree (or create one).", style="dim")
        facts = Table.grid(padding=(0, 2))
        facts.add_column(style="bold")
        facts.add_column()
        add_row(facts, "Sandbox", info.id)
        add_row(facts, "Created", info.created_at)
        add_row(facts, "Last used", info.last_used)
        if info.expires_at is None:
            add_row(facts, "Expires", "never")
        else:
            remaining = countdown(info.expires_at - self.now_ms())
            add_row(facts, "Expires", f"{iso_from_ms(info.expires_at)}  (in {remaining})")
        workspace = workspace_summary(info.workspace_files, info.workspace_bytes)
        add_row(facts, "Workspace", workspace if info.file_api else f"{workspace} (File API off)")
        checkpoints = self.checkpoints.get(info.id)
        if checkpoints is not None:
            add_row(facts, "Checkpoints", checkpoints)
        cost = self.costs.get(info.id)
        if cost is not None:
            add_row(facts, "Cost", cost)

        env = Table(title="Env vars", title_justify="left", expand=True, show_edge=False)
        env.add_column("Key")
        env.add_column("Value")
        for key, value in sorted(info.env_vars.items()):
            # An empty value says so: masked, it read as a secret (QA); it reveals nothing.
            shown_value = value if self.reveal_env else MASK
            add_row(env, key, shown_value if value else Text("(empty)", style="dim"))
        if not info.env_vars:
            add_row(env, Text("none", style="dim"), "")

        contexts = Table(title="Code contexts", title_justify="left", expand=True, show_edge=False)
        for column in ("Id", "Binding", "Language", "Cwd", "Runs", "Snapshot"):
            contexts.add_column(column)
        for context in info.contexts:
            snapshot = "none"
            if context.snapshot is not None:
                stale = " (stale)" if context.snapshot.stale else ""
                snapshot = f"{human_bytes(context.snapshot.bytes)}{stale}"
            add_row(
                contexts,
                short_id(context.id),
                context.binding,
                context.language,
                context.cwd,
                str(context.executions),
                snapshot,
            )
        if not info.contexts:
            add_row(contexts, Text("none", style="dim"), "", "", "", "", "")
        return Group(facts, Text(""), env, Text(""), contexts)
