"""What the workbench keeps on this machine between sessions: per-context input history
for backends that keep none, each profile's open REPL and file tabs, and what its tree
showed expanded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workbench.api import CodeContext

HISTORY_FILE_NAME = "tui-history.json"
OPEN_TABS_FILE_NAME = "tui-tabs.json"
OPEN_FILES_FILE_NAME = "tui-files.json"
TREE_FILE_NAME = "tui-tree.json"
MAX_ENTRIES_PER_CONTEXT = 1000


def _read_json_object(path: Path) -> dict[str, object]:
    """The JSON object in `path`; empty when it is missing or not such an object."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return {}
    return raw if isinstance(raw, dict) else {}


def _write_json(path: Path, data: object) -> None:
    """Replace `path` with `data` as JSON (atomically: a crash leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data), encoding="utf-8")
    os.replace(temporary, path)


class LocalHistoryStore:
    """`{profile/sandbox/context: [code, ...]}` in one JSON file (oldest first)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def _key(profile: str, sandbox_id: str, context_id: str) -> str:
        return f"{profile}/{sandbox_id}/{context_id}"

    def _load(self) -> dict[str, list[str]]:
        return {
            str(key): [str(code) for code in codes]
            for key, codes in _read_json_object(self.path).items()
            if isinstance(codes, list)
        }

    def entries(self, profile: str, sandbox_id: str, context_id: str) -> list[str]:
        return self._load().get(self._key(profile, sandbox_id, context_id), [])

    def append(self, profile: str, sandbox_id: str, context_id: str, code: str) -> None:
        everything = self._load()
        key = self._key(profile, sandbox_id, context_id)
        everything[key] = [*everything.get(key, []), code][-MAX_ENTRIES_PER_CONTEXT:]
        _write_json(self.path, everything)


class OpenTabs:
    """`{profile: [{"sandbox": id, "context": CodeContext JSON, "draft": code}, ...]}` in
    one JSON file: the REPL tabs open in each profile, reopened when the workbench starts
    again with the code typed in them and not run (`draft`, kept at quit)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def tabs(self, profile: str) -> list[tuple[str, CodeContext]]:
        """The profile's open tabs, in the order they were opened (unreadable ones left out)."""
        entries = _read_json_object(self.path).get(profile)
        found = []
        for entry in entries if isinstance(entries, list) else []:
            try:
                found.append((str(entry["sandbox"]), CodeContext.from_json(entry["context"])))
            except (KeyError, TypeError, ValueError):
                continue
        return found

    def _save(self, profile: str, tabs: list[tuple[str, CodeContext]]) -> None:
        """Write the profile's tabs, each with the draft kept for it: the tabs reopen one
        by one, and a later one's draft must outlive the earlier ones' `opened`."""
        everything = _read_json_object(self.path)
        drafts = {
            context_id: entry["draft"]
            for entry, context_id in _entries_by_context(everything.get(profile))
            if isinstance(entry.get("draft"), str)
        }
        everything[profile] = [
            {"sandbox": sandbox_id, "context": context.to_json()}
            | ({"draft": drafts[context.id]} if context.id in drafts else {})
            for sandbox_id, context in tabs
        ]
        _write_json(self.path, everything)

    def opened(self, profile: str, sandbox_id: str, context: CodeContext) -> None:
        tabs = [tab for tab in self.tabs(profile) if tab[1].id != context.id]
        self._save(profile, [*tabs, (sandbox_id, context)])

    def closed(self, profile: str, context_id: str) -> None:
        tabs = self.tabs(profile)
        if any(context.id == context_id for _, context in tabs):
            self._save(profile, [tab for tab in tabs if tab[1].id != context_id])

    def keep_drafts(self, profile: str, drafts: dict[str, str]) -> None:
        """Keep the code typed and not run in the profile's open tabs (by context id; at
        quit and at a profile switch), for `take_draft` when each reopens. A tab not
        among `drafts` (not reopened yet) keeps the draft it has."""
        everything = _read_json_object(self.path)
        for entry, context_id in _entries_by_context(everything.get(profile)):
            if context_id not in drafts:
                continue
            if drafts[context_id]:
                entry["draft"] = drafts[context_id]
            else:
                entry.pop("draft", None)
        _write_json(self.path, everything)

    def take_draft(self, profile: str, context_id: str) -> str:
        """The code kept typed in the tab of `context_id`, taken out of the file: its tab
        holds it now (kept again by `keep_drafts`), so a later reopening brings back no
        code the user has since run or cleared."""
        everything = _read_json_object(self.path)
        for entry, entry_context_id in _entries_by_context(everything.get(profile)):
            if entry_context_id == context_id:
                draft = entry.pop("draft", None)
                if draft is not None:
                    _write_json(self.path, everything)
                return draft if isinstance(draft, str) else ""
        return ""


def _entries_by_context(entries: object) -> list[tuple[dict[str, Any], str]]:
    """A profile's open-tab entries with their context ids (malformed ones left out)."""
    found = []
    for entry in entries if isinstance(entries, list) else []:
        context = entry.get("context") if isinstance(entry, dict) else None
        context_id = context.get("id") if isinstance(context, dict) else None
        if isinstance(context_id, str):
            found.append((entry, context_id))
    return found


class OpenFiles:
    """`{profile: [[sandbox_id, path], ...]}` in one JSON file: the file tabs open in each
    profile, in the order they were opened, opened again when the profile opens next."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def files(self, profile: str) -> list[tuple[str, str]]:
        """The profile's open files (malformed entries left out)."""
        entries = _read_json_object(self.path).get(profile)
        return [
            (entry[0], entry[1])
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, list)
            and len(entry) == 2
            and all(isinstance(part, str) for part in entry)
        ]

    def opened(self, profile: str, sandbox_id: str, path: str) -> None:
        files = self.files(profile)
        if (sandbox_id, path) not in files:
            self._keep(profile, [*files, (sandbox_id, path)])

    def closed(self, profile: str, sandbox_id: str, path: str) -> None:
        files = self.files(profile)
        if (sandbox_id, path) in files:
            self._keep(profile, [entry for entry in files if entry != (sandbox_id, path)])

    def moved(self, profile: str, sandbox_id: str, old_path: str, new_path: str) -> None:
        """The file of an open tab was renamed (or its folder): its entry follows it."""
        files = self.files(profile)
        if (sandbox_id, old_path) in files:
            moved = [
                (sandbox_id, new_path) if entry == (sandbox_id, old_path) else entry
                for entry in files
            ]
            self._keep(profile, list(dict.fromkeys(moved)))

    def _keep(self, profile: str, files: list[tuple[str, str]]) -> None:
        everything = _read_json_object(self.path)
        everything[profile] = [list(entry) for entry in files]
        _write_json(self.path, everything)


class ExpandedTree:
    """`{profile: {sandbox_id: [directory, ...]}}` in one JSON file: the sandboxes each
    profile's tree showed expanded, with their expanded `/workspace` directories, expanded
    again when the profile opens next (those still listed, and shown again)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def expanded(self, profile: str) -> dict[str, list[str]]:
        """The profile's expanded sandboxes and directories (malformed entries left out)."""
        entries = _read_json_object(self.path).get(profile)
        if not isinstance(entries, dict):
            return {}
        return {
            str(sandbox_id): [path for path in paths if isinstance(path, str)]
            for sandbox_id, paths in entries.items()
            if isinstance(paths, list)
        }

    def keep(self, profile: str, expanded: dict[str, list[str]]) -> None:
        everything = _read_json_object(self.path)
        everything[profile] = expanded
        _write_json(self.path, everything)
