"""The command palette's workbench commands: every action, offered when it applies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from workbench.tui.app import WorkbenchApp


@dataclass(frozen=True)
class PaletteCommand:
    title: str
    help: str
    callback: Callable[[], Any]


class WorkbenchCommands(Provider):
    """Commands come from `WorkbenchApp.palette_commands()`, which only lists what the
    current selection allows (e.g. *Run cell* only with a REPL open)."""

    def _commands(self) -> list[PaletteCommand]:
        return cast("WorkbenchApp", self.app).palette_commands()

    async def discover(self) -> Hits:
        for command in self._commands():
            yield DiscoveryHit(command.title, command.callback, help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in self._commands():
            score = matcher.match(command.title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(command.title), command.callback, help=command.help
                )
