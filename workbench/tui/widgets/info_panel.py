"""The selected sandbox at a glance: times, live expiry countdown, workspace, env, contexts."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from workbench.api.types import SandboxInfo
from workbench.core.clock import iso_from_ms
from workbench.tui.formatting import MASK, countdown, human_bytes, short_id


class InfoPanel(Widget):
    """Renders a `SandboxInfo`; the countdown to `expiresAt` ticks every second."""

    HELP = """\
## Sandbox info

Created and last-used times, a live countdown to expiry, the size of
`/workspace`, the sandbox's env vars (masked until revealed) and its code
contexts with their snapshot sizes.
"""

    info: reactive[SandboxInfo | None] = reactive(None, layout=True)
    reveal_env: reactive[bool] = reactive(False, layout=True)

    def __init__(self, now_ms: Callable[[], int], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.now_ms = now_ms

    def on_mount(self) -> None:
        self.set_interval(1.0, self.refresh)

    def render(self) -> RenderableType:
        info = self.info
        if info is None:
            return Text("Select a sandbox in the tree (or create one).", style="dim")
        facts = Table.grid(padding=(0, 2))
        facts.add_column(style="bold")
        facts.add_column()
        facts.add_row("Sandbox", info.id)
        facts.add_row("Created", info.created_at)
        facts.add_row("Last used", info.last_used)
        if info.expires_at is None:
            facts.add_row("Expires", "never")
        else:
            remaining = countdown(info.expires_at - self.now_ms())
            facts.add_row("Expires", f"{iso_from_ms(info.expires_at)}  (in {remaining})")
        workspace = f"{info.workspace_files} files, {human_bytes(info.workspace_bytes)}"
        facts.add_row("Workspace", workspace if info.file_api else f"{workspace} (File API off)")

        env = Table(title="Env vars", title_justify="left", expand=True, show_edge=False)
        env.add_column("Key")
        env.add_column("Value")
        for key, value in sorted(info.env_vars.items()):
            env.add_row(key, value if self.reveal_env else MASK)
        if not info.env_vars:
            env.add_row(Text("none", style="dim"), "")

        contexts = Table(title="Code contexts", title_justify="left", expand=True, show_edge=False)
        for column in ("Id", "Binding", "Language", "Cwd", "Runs", "Snapshot"):
            contexts.add_column(column)
        for context in info.contexts:
            snapshot = "none"
            if context.snapshot is not None:
                stale = " (stale)" if context.snapshot.stale else ""
                snapshot = f"{human_bytes(context.snapshot.stored_bytes)}{stale}"
            contexts.add_row(
                short_id(context.id),
                context.binding,
                context.language,
                context.cwd,
                str(context.executions),
                snapshot,
            )
        if not info.contexts:
            contexts.add_row(Text("none", style="dim"), "", "", "", "", "")
        return Group(facts, Text(""), env, Text(""), contexts)
