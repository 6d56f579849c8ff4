"""Ignore rules of a synced folder: built-in defaults, nested `.gitignore` files and
`.workbenchignore` files, with git's semantics.

Each line is compiled by `pathspec.GitIgnoreSpec` (git's wildmatch: classes such as
`[]a]`, `**`, escapes, trailing spaces, `!`); a line it refuses matches nothing
(a trailing `\\`, as in git; a reversed range such as `[b-a]`, which git matches
as its first character). The matching itself follows git rather than
`GitIgnoreSpec.check_file`, which also matches everything *inside* a matching directory
(so a `!dir` line would re-include `dir/a.txt` that `*.txt` ignores) and reports `d/**`
as matching `d` itself: here a pattern matches an entry only as itself (a directory as
`name/`, so `build/` applies to directories only), and an entry inside an ignored
directory is ignored by that (no re-inclusion), the way git walks a tree.

Precedence: within a file the last matching line wins; the defaults come first, deeper
files beat shallower ones, and within one directory `.workbenchignore` is read after
`.gitignore` (so it wins). POSIX classes (`[[:digit:]]`) are not supported by pathspec
and match nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from re import error as RegexError
from typing import Final

from pathspec import GitIgnoreSpec, Pattern

from workbench.sync.local import read_regular_file

__all__ = [
    "DEFAULT_IGNORES",
    "IGNORE_FILE_NAMES",
    "MAX_IGNORE_FILE_BYTES",
    "IgnoreRule",
    "IgnoreRules",
    "compile_ignore_lines",
    "rules_verdict",
]

IGNORE_FILE_NAMES: Final = (".gitignore", ".workbenchignore")
"""Per-directory rule files, in increasing precedence."""

MAX_IGNORE_FILE_BYTES: Final = 1_048_576
"""Rule files beyond this size are read only this far."""

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
    # Secrets: never copied into a sandbox unless a rule file re-includes them with `!`.
    ".env",
    "*.pem",
    ".ssh/",
    "id_*",
)
"""Built-in rules (lowest precedence: a `.gitignore` may re-include with `!`)."""


@dataclass(frozen=True)
class IgnoreRule:
    """One compiled line of a rule file."""

    pattern: Pattern
    ignores: bool
    """True for an ignoring line, False for a `!` line."""
    anchored: bool
    """A `/` before the end (a leading `**/` aside): matched against the whole path,
    else against the entry's name only."""
    directory_only: bool
    """`name/`: never matches a file."""
    inside_only: bool
    """`name/**`: matches what is inside `name`, not `name` itself."""

    @classmethod
    def compile(cls, line: str) -> list[IgnoreRule]:
        """The rule of one line (none for blanks, comments and lines pathspec refuses)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # re's FutureWarning on `[[`
                patterns = GitIgnoreSpec.from_lines([line]).patterns
        except (ValueError, RegexError):
            return []
        body = line.rstrip()
        body = body[1:] if body.startswith("!") else body
        while body.startswith("**/"):
            body = body[3:]
        stem = body.rstrip("/")
        return [
            cls(
                pattern,
                pattern.include,
                anchored="/" in stem,
                directory_only=body.endswith("/"),
                inside_only=stem.endswith("/**") and bool(stem[:-3].strip("/")),
            )
            for pattern in patterns
            if pattern.include is not None
        ]

    def _matches_as(self, path: str, is_dir: bool) -> bool:
        if not is_dir:
            return self.pattern.match_file(path) is not None
        if self.pattern.match_file(path + "/") is None:
            return False
        return not self.inside_only or self.pattern.match_file(path) is not None

    def matches(self, relative_path: str, is_dir: bool) -> bool:
        """Whether the line matches this entry itself (path relative to the rule file's
        directory); matching only as something inside a matching directory is not."""
        if self.directory_only and not is_dir:
            return False
        if not self.anchored:
            return self._matches_as(relative_path.rpartition("/")[2], is_dir)
        if not self._matches_as(relative_path, is_dir):
            return False
        if self.inside_only:
            return True  # everything below `name` matches `name/**` itself
        parent = relative_path.rpartition("/")[0]
        while parent:
            if self._matches_as(parent, True):
                return False
            parent = parent.rpartition("/")[0]
        return True


def compile_ignore_lines(lines: Iterable[str]) -> list[IgnoreRule]:
    """The rules of one file of gitignore-syntax `lines`, in order."""
    return [rule for line in lines for rule in IgnoreRule.compile(line)]


def rules_verdict(rules: list[IgnoreRule], relative_path: str, is_dir: bool) -> bool | None:
    """True: ignored, False: re-included by `!`, None: no line of `rules` matches."""
    for rule in reversed(rules):
        if rule.matches(relative_path, is_dir):
            return rule.ignores
    return None


class IgnoreRules:
    """The ignore decision for paths of one local folder, reading rule files lazily.

    Rule files are cached per directory; call `invalidate()` after one changes.
    """

    def __init__(self, root: Path, *, use_defaults: bool = True) -> None:
        self.root = root
        self._defaults = compile_ignore_lines(DEFAULT_IGNORES) if use_defaults else []
        self._by_dir: dict[str, list[list[IgnoreRule]]] = {}

    def invalidate(self) -> None:
        """Forget cached rule files (after a `.gitignore` or `.workbenchignore` changed)."""
        self._by_dir.clear()

    def _files_of(self, directory: str) -> list[list[IgnoreRule]]:
        """The rules of each rule file in `directory`, in increasing precedence."""
        cached = self._by_dir.get(directory)
        if cached is None:
            cached = []
            for name in IGNORE_FILE_NAMES:
                relative = f"{directory}/{name}" if directory else name
                data = read_regular_file(self.root, relative, MAX_IGNORE_FILE_BYTES)
                if data is not None:
                    text = data[:MAX_IGNORE_FILE_BYTES].decode("utf-8", errors="replace")
                    cached.append(compile_ignore_lines(text.splitlines()))
            self._by_dir[directory] = cached
        return cached

    def _decide(self, relative_path: str, is_dir: bool) -> bool:
        """This entry's own verdict (ignoring whether an ancestor is ignored)."""
        verdict = rules_verdict(self._defaults, relative_path, is_dir)
        parts = relative_path.split("/")
        for depth in range(len(parts)):
            below = "/".join(parts[depth:])
            for rules in self._files_of("/".join(parts[:depth])):
                found = rules_verdict(rules, below, is_dir)
                if found is not None:
                    verdict = found
        return bool(verdict)

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
