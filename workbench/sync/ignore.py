"""Ignore rules of a synced folder: built-in defaults, nested `.gitignore` files and
`.workbenchignore` files, with the common gitignore semantics.

Supported: `#` comments and blank lines, `\\#` / `\\!` escapes, trailing-space trimming
(unless escaped), `!` negation, a trailing `/` for directories only, anchoring by a
leading or inner `/`, `*`, `?`, `[...]` classes and `**` (leading `**/`, trailing `/**`,
inner `/**/`). Precedence follows git: the last matching rule wins, deeper files beat
shallower ones, and a path inside an ignored directory stays ignored (no re-inclusion).
Within one directory `.workbenchignore` is read after `.gitignore`, so it wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_IGNORES",
    "IGNORE_FILE_NAMES",
    "IgnoreRule",
    "IgnoreRules",
    "parse_ignore_lines",
]

IGNORE_FILE_NAMES: Final = (".gitignore", ".workbenchignore")
"""Per-directory rule files, in increasing precedence."""

DEFAULT_IGNORES: Final = (
    ".git/",
    ".hg/",
    ".svn/",
    "node_modules/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    "venv/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    "*.swp",
    "*.swo",
    "*.swx",
    "*~",
    ".#*",
    "#*#",
    ".DS_Store",
)
"""Built-in rules (lowest precedence: a `.gitignore` may re-include with `!`)."""


@dataclass(frozen=True)
class IgnoreRule:
    """One compiled pattern; `base` is the folder-relative directory of its file."""

    pattern: str
    regex: re.Pattern[str]
    negated: bool
    directory_only: bool
    base: str

    def matches(self, relative_path: str, is_dir: bool) -> bool:
        """Whether the rule's pattern matches `relative_path` (relative to the folder)."""
        if self.directory_only and not is_dir:
            return False
        if self.base:
            prefix = self.base + "/"
            if not relative_path.startswith(prefix):
                return False
            relative_path = relative_path[len(prefix) :]
        return self.regex.fullmatch(relative_path) is not None


def _translate_glob(glob: str) -> str:
    """Regex source for a gitignore glob without its anchoring/dir-only markers."""
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        char = glob[i]
        if char == "*":
            if glob.startswith("**", i):
                at_segment_start = i == 0 or glob[i - 1] == "/"
                after = i + 2
                if at_segment_start and after < n and glob[after] == "/":
                    out.append("(?:.*/)?")  # `**/`: zero or more directories
                    i = after + 1
                    continue
                if at_segment_start and after == n:
                    out.append(".*")  # trailing `/**`: everything inside
                    i = after
                    continue
                out.append("[^/]*")  # any other `**` acts like `*`
                i = after
                continue
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = glob[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif char == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "
    return stripped


def parse_ignore_lines(lines: Iterable[str], base: str = "") -> list[IgnoreRule]:
    """Compile gitignore-syntax `lines` whose file lives in folder-relative dir `base`."""
    rules: list[IgnoreRule] = []
    for raw in lines:
        line = _strip_trailing_spaces(raw.rstrip("\r\n"))
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated or line.startswith(("\\#", "\\!")):
            line = line[1:]
        directory_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        glob = line.lstrip("/")
        source = _translate_glob(glob)
        if not anchored:
            source = "(?:.*/)?" + source
        rules.append(
            IgnoreRule(raw.strip(), re.compile(source, re.DOTALL), negated, directory_only, base)
        )
    return rules


class IgnoreRules:
    """The ignore decision for paths of one local folder, reading rule files lazily.

    Rule files are cached per directory; call `invalidate()` after one changes.
    """

    def __init__(self, root: Path, *, use_defaults: bool = True) -> None:
        self.root = root
        self._defaults = parse_ignore_lines(DEFAULT_IGNORES) if use_defaults else []
        self._by_dir: dict[str, list[IgnoreRule]] = {}

    def invalidate(self) -> None:
        """Forget cached rule files (after a `.gitignore` or `.workbenchignore` changed)."""
        self._by_dir.clear()

    def _rules_of(self, directory: str) -> list[IgnoreRule]:
        cached = self._by_dir.get(directory)
        if cached is None:
            cached = []
            folder = self.root / directory if directory else self.root
            for name in IGNORE_FILE_NAMES:
                try:
                    text = (folder / name).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                cached.extend(parse_ignore_lines(text.splitlines(), directory))
            self._by_dir[directory] = cached
        return cached

    def _decide(self, relative_path: str, is_dir: bool) -> bool:
        """This entry's own verdict (ignoring whether an ancestor is ignored)."""
        parts = relative_path.split("/")
        verdict = False
        candidates = list(self._defaults)
        for depth in range(len(parts)):
            candidates.extend(self._rules_of("/".join(parts[:depth])))
        for rule in candidates:
            if rule.negated == verdict and rule.matches(relative_path, is_dir):
                verdict = not rule.negated
        return verdict

    def is_ignored(self, relative_path: str, is_dir: bool) -> bool:
        """Whether a folder-relative path (`a/b.txt`) is excluded, its ancestors included."""
        parts = relative_path.split("/")
        for depth in range(1, len(parts)):
            if self._decide("/".join(parts[:depth]), True):
                return True
        return self._decide(relative_path, is_dir)

    def is_ignored_child(self, relative_path: str, is_dir: bool) -> bool:
        """Like `is_ignored` for a walk that already knows the parent is not ignored."""
        return self._decide(relative_path, is_dir)
