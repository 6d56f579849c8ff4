"""The guest's resource handles and what they stand for, as plain JSON data.

A handle is an index into one table (as a component instance's handle table: indices
from 1, freed ones reused last-in first-out). Each entry names its WIT resource type and
holds only strings, numbers and booleans, so the table is part of a snapshot. Host file
descriptors are not: they live beside the table (`WasiHost`) and are reopened from an
entry's path after a restore.
"""

from __future__ import annotations

from typing import Any

from engines.components.wasi.abi import GuestTrap

Entry = dict[str, Any]

SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "descriptor": {"preopen": (int,), "path": (str,), "dir": (bool,), "flags": (int,)},
    "directory-entry-stream": {"entries": (list,), "position": (int,)},
    "input-stream": {"source": (str,), "preopen": (int,), "path": (str,), "offset": (int,)},
    "output-stream": {
        "sink": (str,),
        "preopen": (int,),
        "path": (str,),
        "offset": (int,),
        "append": (bool,),
    },
    "pollable": {"deadline": (int, type(None))},
    "error": {"message": (str,), "code": (int, type(None))},
    "network": {},
}
"""Resource type -> its fields and their JSON types (entries are checked on load)."""
SOURCES = {"stdin", "file"}
SINKS = {"stdout", "stderr", "file"}


def _checked_entry(raw: object) -> Entry:
    if not isinstance(raw, dict):
        raise ValueError("a resource entry is not an object")
    kind = raw.get("type")
    fields = SCHEMA.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise ValueError(f"unknown resource type {kind!r}")
    if set(raw) != {"type", *fields}:
        raise ValueError(f"{kind} entry has fields {sorted(raw)}")
    for name, types in fields.items():
        value = raw[name]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise ValueError(f"{kind}.{name} has the wrong type")
    if kind == "input-stream" and raw["source"] not in SOURCES:
        raise ValueError("unknown input stream source")
    if kind == "output-stream" and raw["sink"] not in SINKS:
        raise ValueError("unknown output stream sink")
    if kind == "directory-entry-stream":
        for item in raw["entries"]:
            if not (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[0], int)
                and isinstance(item[1], str)
            ):
                raise ValueError("malformed directory entry")
    return dict(raw)


class ResourceTable:
    """Handles -> plain-data resources."""

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}
        self.free: list[int] = []
        self.next = 1

    def add(self, entry: Entry) -> int:
        handle = self.free.pop() if self.free else self.next
        if handle == self.next:
            self.next += 1
        self.entries[handle] = entry
        return handle

    def get(self, handle: int, kind: str) -> Entry:
        """The entry of `handle`, which must be a `kind` (the guest traps otherwise)."""
        entry = self.entries.get(handle)
        if entry is None or entry["type"] != kind:
            raise GuestTrap(f"handle {handle} is not a live {kind}")
        return entry

    def kind_of(self, handle: int) -> str | None:
        entry = self.entries.get(handle)
        return None if entry is None else str(entry["type"])

    def drop(self, handle: int, kind: str) -> Entry:
        entry = self.get(handle, kind)
        del self.entries[handle]
        self.free.append(handle)
        return entry

    def state(self) -> dict[str, Any]:
        return {
            "next": self.next,
            "free": list(self.free),
            "entries": {str(handle): dict(entry) for handle, entry in self.entries.items()},
        }

    def load(self, state: object) -> None:
        """Take back what `state` returned (after JSON); raises ValueError if malformed."""
        if not isinstance(state, dict) or set(state) != {"next", "free", "entries"}:
            raise ValueError("malformed resource table")
        next_handle, free, entries = state["next"], state["free"], state["entries"]
        if not isinstance(next_handle, int) or not isinstance(free, list):
            raise ValueError("malformed resource table")
        if not isinstance(entries, dict):
            raise ValueError("malformed resource table")
        loaded = {int(handle): _checked_entry(entry) for handle, entry in entries.items()}
        handles = set(loaded) | set(free)
        if any(not isinstance(h, int) or not 0 < h < next_handle for h in handles) or len(
            handles
        ) != len(loaded) + len(free):
            raise ValueError("resource handles out of range or reused")
        self.entries, self.free, self.next = loaded, list(free), next_handle
