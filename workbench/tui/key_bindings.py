"""The workbench's key bindings (ids are what `Config.keys` remaps) and which actions
need what selected."""

from __future__ import annotations

import difflib
import unicodedata
from typing import Any

from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import KEY_NAME_REPLACEMENTS, Keys
from textual.screen import Screen

# A table, one `Binding` a row: the rows share their shape on purpose (data, not logic).
WORKBENCH_BINDINGS: list[Binding] = [
    Binding("ctrl+q", "quit", "Quit", id="app.quit"),
    Binding("f1", "help", "Help", id="app.help"),
    # A REPL's own keys next, before the sandbox's: the footer shows the keys that fit.
    # Not ctrl+j: many terminals send it for a newline, and a paste must never run half a cell.
    Binding("ctrl+r,ctrl+enter", "run_cell", "Run cell", id="repl.run", priority=True),
    Binding("ctrl+g", "cancel_run", "Cancel run", id="repl.cancel", priority=True),
    Binding("ctrl+s", "save_file", "Save", id="file.save"),
    Binding("f2", "create_sandbox", "New sandbox", id="sandbox.create"),
    Binding("f3", "create_context", "New context", id="context.create"),
    Binding("f4", "edit_env_vars", "Env vars", id="sandbox.env_vars"),
    Binding("f5", "refresh", "Refresh", id="sidebar.refresh"),
    Binding("f6", "watch_folder", "Watch a folder…", id="sandbox.watch", show=False),
    Binding("shift+f6", "unwatch", "Stop watching", id="sandbox.unwatch", show=False),
    Binding("f8", "destroy_sandbox", "Destroy sandbox", id="sandbox.destroy"),
    Binding("f9", "pick_profile", "Profiles", id="profile.pick"),
    Binding("ctrl+l", "toggle_remote", "Local/remote", id="profile.toggle"),
    Binding("f12", "show_runtimes", "Runtimes", id="app.runtimes", show=False),
    Binding("f7", "prepare_engine", "Prepare engine", id="runtimes.prepare", show=False),
    Binding("alt+s", "toggle_env_reveal", "Reveal env vars", id="sandbox.reveal_env", show=False),
    Binding("alt+h", "search_history", "History", id="repl.history_search"),
    Binding("ctrl+f", "find_in_transcript", "Find", id="repl.find"),
    Binding("alt+c", "copy_cell", "Copy cell", id="repl.copy_cell", show=False),
    Binding("alt+o", "copy_result", "Copy result", id="repl.copy_result", show=False),
    Binding("alt+y", "pick_cell", "Copy from a cell…", id="repl.copy_from_cell", show=False),
    Binding("alt+u", "copy_curl", "Copy as curl", id="repl.copy_curl", show=False),
    Binding("alt+m", "export_markdown", "Export Markdown", id="repl.export_markdown", show=False),
    Binding("alt+j", "export_json", "Export JSON", id="repl.export_json", show=False),
    Binding("alt+i", "export_notebook", "Export notebook", id="repl.export_notebook", show=False),
    Binding("alt+v", "diff_cell", "Rerun on a profile", id="repl.diff", show=False),
    Binding("alt+w", "close_tab", "Close tab", id="repl.close_tab", show=False),
    # Priority: every scrolling widget (the editor, the tree) takes these keys to page sideways.
    Binding("ctrl+pagedown", "next_tab", "Next tab", id="tabs.next", show=False, priority=True),
    Binding(
        "ctrl+pageup", "previous_tab", "Previous tab", id="tabs.previous", show=False, priority=True
    ),
    Binding("ctrl+t", "focus_tree", "Sandbox tree", id="sidebar.focus", show=False),
    Binding("ctrl+b", "toggle_sidebar", "Sidebar", id="sidebar.toggle", show=False),
    Binding("alt+g", "toggle_inspector", "Inspector", id="context.inspector", show=False),
    Binding(
        "alt+a",
        "inspect_by_running",
        "Inspect by running code",
        id="context.inspect_by_running",
        show=False,
    ),
    Binding("alt+k", "fork_context", "Fork context", id="context.fork", show=False),
    # Not alt+b or alt+f: terminals that send alt as ESC deliver those as ctrl+left/right.
    Binding(
        "alt+p", "save_checkpoint", "Save checkpoint", id="context.save_checkpoint", show=False
    ),
    Binding(
        "alt+z",
        "restore_checkpoint",
        "Restore checkpoint",
        id="context.restore_checkpoint",
        show=False,
    ),
    Binding("alt+d", "delete_context", "Delete context", id="context.delete", show=False),
    Binding("alt+r", "reset_context", "Reset context", id="context.reset", show=False),
    Binding("alt+l", "reload_file", "Reload file", id="file.reload", show=False),
    Binding("alt+n", "new_file", "New file", id="workspace.new_file", show=False),
    Binding("alt+t", "new_folder", "New folder", id="workspace.new_folder", show=False),
    Binding("alt+e", "rename_path", "Rename", id="workspace.rename", show=False),
    Binding("alt+x", "delete_path", "Delete file/folder", id="workspace.delete", show=False),
]

REPL_ACTIONS = frozenset(
    {
        "run_cell",
        "cancel_run",
        "search_history",
        "find_in_transcript",
        "copy_cell",
        "copy_result",
        "pick_cell",
        "copy_curl",
        "export_markdown",
        "export_json",
        "export_notebook",
        "diff_cell",
        "close_tab",
        "toggle_inspector",
        "inspect_by_running",
        "fork_context",
        "save_checkpoint",
        "restore_checkpoint",
        "delete_checkpoint",
        "delete_context",
        "reset_context",
    }
)
SANDBOX_ACTIONS = frozenset(
    {"destroy_sandbox", "edit_env_vars", "toggle_env_reveal", "create_context", "watch_folder"}
)
BACKEND_ACTIONS = frozenset({"create_sandbox"})
FILE_ACTIONS = frozenset({"save_file", "reload_file"})
"""Actions on the active file view."""
NEW_PATH_ACTIONS = frozenset({"new_file", "new_folder"})
"""Actions in the selected workspace directory (or the selected sandbox's `/workspace`)."""
PATH_ACTIONS = frozenset({"rename_path", "delete_path"})
"""Actions on the tree's selected workspace file or directory."""

PALETTE_TITLES = {
    "watch_folder": "Watch a folder into the selected sandbox…",
    "unwatch": "Stop watching the folder",
    "prepare_engine": "Prepare the selected runtime's local engine",
    "pick_cell": "Copy the code, output or result of any cell…",
    "copy_curl": "Copy the current cell's request as a curl command (remote profiles)",
    "export_notebook": "Export the transcript as a Jupyter notebook…",
    "toggle_inspector": "Show or hide the context inspector (the names in the REPL state)",
    "inspect_by_running": "Inspect the context by running code in it (remote gateways)",
    "fork_context": "Fork the context: a new one from a copy of its state",
    "save_checkpoint": "Save a checkpoint of the context's state…",
    "restore_checkpoint": "Restore one of the context's checkpoints…",
    "diff_cell": "Rerun the current cell on another profile and compare…",
    "next_tab": "Show the next tab",
    "previous_tab": "Show the previous tab",
    "focus_tree": "Focus the sandbox tree",
    "toggle_sidebar": "Show or hide the sandbox tree (the tabs take its room)",
    "save_file": "Save the file to the sandbox",
    "reload_file": "Reload the file from the sandbox (discarding unsaved edits)",
    "new_file": "New file in the selected folder…",
    "new_folder": "New folder in the selected folder…",
    "rename_path": "Rename the selected file or folder…",
    "delete_path": "Delete the selected file or folder…",
}
"""Palette titles longer than the binding's (short, footer/help-sized) description."""


def action_keys(screen: Screen[Any], action: str) -> str:
    """The keys bound to `action` where `screen` is, after the user's keymap, as the footer
    writes them (`^g / ^k`); empty when none is."""
    return " / ".join(
        screen.app.get_key_display(active.binding)
        for active in screen.active_bindings.values()
        if active.binding.action == action
    )


MODIFIERS = frozenset({"ctrl", "alt", "shift", "meta", "super", "hyper"})
NAMED_KEYS = frozenset(
    key.value.split("+")[-1] for key in Keys if not key.value.startswith("<")
) | frozenset(KEY_NAME_REPLACEMENTS.values())


def is_key(key: str) -> bool:
    """Whether Textual can deliver `key` (`ctrl+r`, `f5`, `full_stop`, `x`)."""
    *modifiers, name = key.split("+")
    if not name or not MODIFIERS.issuperset(modifiers):
        return False
    if len(name) == 1 or name in NAMED_KEYS:
        return True
    try:
        unicodedata.lookup(name.replace("_", " "))
    except KeyError:
        return False
    return True


def binding_ids() -> set[str]:
    """The id of every binding of the workbench: its table's, and its screens' and
    widgets' own (each class's `BINDINGS`, of the modules imported so far: the app
    imports every screen)."""
    ids = {binding.id for binding in WORKBENCH_BINDINGS if binding.id is not None}
    classes: list[type[DOMNode]] = [DOMNode]
    seen: set[type[DOMNode]] = set()
    while classes:
        node_class = classes.pop()
        if node_class in seen:
            continue
        seen.add(node_class)
        classes.extend(node_class.__subclasses__())
        if node_class.__module__.startswith("workbench.tui"):
            for binding in node_class.__dict__.get("BINDINGS", []):
                if isinstance(binding, Binding) and binding.id is not None:
                    ids.add(binding.id)
    return ids


def checked_keymap(keymap: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The config's `[keys]` that apply, and what is wrong with the rest: an entry with a
    key Textual could not deliver is left out (its binding keeps its own keys: QA,
    `notakey+++` left Run cell with none), and so is a key of a workbench binding that
    keeps it (`app.quit = "ctrl+r"` made ctrl+r quit instead of running the cell); an id
    no binding has is said (QA: a typo was ignored without a word)."""
    problems = []
    usable = {}
    known = binding_ids()
    for binding_id, keys in keymap.items():
        if binding_id not in known:
            close = difflib.get_close_matches(binding_id, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else " (F1 lists the ids)"
            problems.append(f"keys.{binding_id}: no binding has this id{hint}")
            continue
        bad = [key for key in keys.split(",") if not is_key(key.strip())]
        if bad:
            problems.append(
                f"keys.{binding_id}: {', '.join(map(repr, bad))} is not a key; "
                "that binding keeps its own keys"
            )
        else:
            usable[binding_id] = keys
    kept = {
        key: binding
        for binding in WORKBENCH_BINDINGS
        if binding.id is not None and binding.id not in usable
        for key in binding.key.split(",")
    }
    for binding_id, keys in list(usable.items()):
        wanted = [key.strip() for key in keys.split(",")]
        free = [key for key in wanted if key not in kept]
        for key in wanted:
            if key in kept:
                owner = kept[key]
                problems.append(
                    f"keys.{binding_id}: {key} is the key of {owner.description} "
                    f"({owner.id}), which keeps it; remap {owner.id} to free it"
                )
        if free:
            usable[binding_id] = ",".join(free)
        else:
            del usable[binding_id]
    return usable, problems
