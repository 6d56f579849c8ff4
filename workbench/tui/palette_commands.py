"""The command palette's workbench commands: every action, offered when it applies.

Each command runs an app action by name, like its key does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider

from workbench.api import neutralise, short_id
from workbench.api.display import counted
from workbench.tui.key_bindings import (
    NEW_PATH_ACTIONS,
    PALETTE_TITLES,
    PATH_ACTIONS,
    WORKBENCH_BINDINGS,
)

if TYPE_CHECKING:
    from workbench.tui.app import WorkbenchApp


@dataclass(frozen=True)
class PaletteCommand:
    title: str
    help: str
    callback: Callable[[], Any]


def inapplicable_actions(app: WorkbenchApp) -> set[str]:
    """Actions the keys allow but the palette leaves out now: the keys stay bound so
    the footer does not change, and need no re-render, at every run; a tree file key
    on a row it does not apply to says what it needs."""
    screen = app.main_screen
    left_out: set[str] = set()
    if screen.target_directory() is None:
        left_out |= NEW_PATH_ACTIONS
    if screen.renamable_selection() is None:
        left_out |= PATH_ACTIONS
    repl = screen.active_repl
    if repl is not None:
        left_out.add("run_cell" if repl.running else "cancel_run")
    return left_out


def keys_shown(app: WorkbenchApp, binding: Binding) -> str:
    """The binding's keys after the user's keymap, each as the footer writes it
    (`^r / ^⏎`): Textual formats a binding of several keys as one key."""
    keys = app.keymap.get(binding.id or "", binding.key)
    return " / ".join(
        app.get_key_display(replace(binding, key=key.strip())) for key in keys.split(",")
    )


def palette_title(app: WorkbenchApp, binding: Binding) -> str:
    """The binding's command title; preparing an engine says whose it prepares."""
    if binding.action == "prepare_engine":
        target = app.main_screen.engine_to_prepare()
        if target is not None:
            language, whose = target
            return f"Prepare the local engine of {whose} ({language})"
    return PALETTE_TITLES.get(binding.action, binding.description)


def workbench_commands(app: WorkbenchApp) -> list[PaletteCommand]:
    """Every binding's action that applies now, plus per-item commands."""
    commands: list[PaletteCommand] = []
    left_out = inapplicable_actions(app)
    for binding in WORKBENCH_BINDINGS:
        if binding.action in left_out:
            continue
        if app.check_action(binding.action, ()):
            commands.append(
                PaletteCommand(
                    palette_title(app, binding),
                    f"{keys_shown(app, binding)} · {binding.id}",
                    partial(app.run_action, binding.action),
                )
            )
    if app.main_screen.rerunning:
        commands.append(
            PaletteCommand(
                "Cancel the rerun on another profile",
                "Stops replaying the cells there; its scratch sandbox is destroyed",
                app.main_screen.cancel_rerun,
            )
        )
    repl = app.main_screen.active_repl
    if repl is not None:
        commands.append(
            PaletteCommand(
                "Delete one of the context's checkpoints…",
                "Picked from a list, confirmed first (Delete in the restore picker does it too)",
                partial(app.run_action, "delete_checkpoint"),
            )
        )
    can_rerun = repl is not None and bool(repl.cells_to_rerun())
    for name in app.current_profile_names():
        if name != app.profile:
            commands.append(
                PaletteCommand(
                    f"Switch to profile {name}",
                    "Work against this backend",
                    partial(app.run_action, f"use_profile({name!r})"),
                )
            )
            if can_rerun:
                commands.append(
                    PaletteCommand(
                        f"Rerun the current cell on {name} and compare",
                        "Replays the cells up to it there, in a scratch sandbox",
                        partial(app.run_action, f"diff_cell({name!r})"),
                    )
                )
    screen = app.main_screen
    sandbox_id = screen.selected_sandbox_id
    info = screen.sandbox_infos.get(sandbox_id) if sandbox_id is not None else None
    if info is not None:
        for context in info.contexts:  # what the backend listed: neutralised
            commands.append(
                PaletteCommand(
                    neutralise(f"Open context {context.binding} {short_id(context.id)}"),
                    neutralise(f"{info.id} · {context.cwd} · {counted(context.executions, 'run')}"),
                    partial(app.run_action, f"open_context({info.id!r}, {context.id!r})"),
                )
            )
    return commands


class WorkbenchCommands(Provider):
    """Only lists what the current selection allows (e.g. *Run cell* only with a REPL
    open)."""

    def _commands(self) -> list[PaletteCommand]:
        return workbench_commands(cast("WorkbenchApp", self.app))

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
