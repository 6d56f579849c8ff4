"""Per-context input history kept on this machine, for backends that keep none."""

from __future__ import annotations

import json
import os
from pathlib import Path

HISTORY_FILE_NAME = "tui-history.json"
MAX_ENTRIES_PER_CONTEXT = 1000


class LocalHistoryStore:
    """`{profile/sandbox/context: [code, ...]}` in one JSON file (oldest first)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def _key(profile: str, sandbox_id: str, context_id: str) -> str:
        return f"{profile}/{sandbox_id}/{context_id}"

    def _load(self) -> dict[str, list[str]]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict):
            return {}
        return {
            str(key): [str(code) for code in codes]
            for key, codes in raw.items()
            if isinstance(codes, list)
        }

    def entries(self, profile: str, sandbox_id: str, context_id: str) -> list[str]:
        return self._load().get(self._key(profile, sandbox_id, context_id), [])

    def append(self, profile: str, sandbox_id: str, context_id: str, code: str) -> None:
        everything = self._load()
        key = self._key(profile, sandbox_id, context_id)
        everything[key] = [*everything.get(key, []), code][-MAX_ENTRIES_PER_CONTEXT:]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(everything), encoding="utf-8")
        os.replace(temporary, self.path)
