"""Ignore rules of a synced folder: built-in defaults, nested `.gitignore` files and
`.workbenchignore` files, with git's semantics.

Lines as git reads them: split on newlines (a `\\r` before one dropped); `#` starts a
comment and `\\#` escapes it; trailing spaces are dropped unless escaped (`\\ `); `!`
re-includes (`\\!` is a literal `!`); a trailing `/` matches directories only (`build/`);
a `/` anywhere else anchors the line to its file's directory and matches it against the
whole path there (`doc/*.txt`, `/build`), else it matches the entry's name at any depth.

Patterns are git's wildmatch (`WM_PATHNAME`), ported here and matched on the path's
UTF-8 bytes as git does: `?` and `*` never match `/`; `**` matches across `/` when it is
a whole segment (`**/x`, `a/**/b`, `x/**`), elsewhere it is a `*`; classes such as `[]a]`,
`[!a-z]`, `[^a]` and `[[:digit:]]` never match `/` (a reversed range such as `[b-a]`
matches only its first character, as in git); `\\` escapes. A line git can never match
matches nothing: a trailing `\\`, an unclosed `[`, an unknown `[:class:]`. Git's own quirk
for anchored lines is kept: the literal text before the first wildcard is compared first,
so `a**/b` acts as `a` followed by `**/b`.

Matching simulates the pattern as an automaton over the path's bytes (every state at
once, never backtracking), so one line costs at most (path length) * (pattern length)
steps: a line such as `*a*a*a*a*a*a*a*a*b` cannot stall a pass the way a backtracking
regex does (pathspec's ran past 45 s on a name of 60 `a`s).

A line matches an entry only as itself (a `d/**` line matches what is inside `d`, not
`d`); an entry inside an ignored directory is ignored by that (no re-inclusion:
`!logs/keep.txt` cannot bring back a file of an ignored `logs/`), the way git walks a
tree.

Precedence: within a file the last matching line wins; the defaults come first, deeper
files beat shallower ones, and within one directory `.workbenchignore` is read after
`.gitignore` (so it wins).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from workbench.core.host_paths import checked_relative
from workbench.sync.local import read_regular_file
from workbench.sync.relative_paths import is_under_any

__all__ = [
    "DEFAULT_IGNORES",
    "IGNORE_FILE_NAMES",
    "MAX_IGNORE_FILE_BYTES",
    "IgnoreRule",
    "IgnoreRules",
    "Wildmatch",
    "compile_ignore_lines",
    "rule_file_lines",
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

_SLASH: Final = ord("/")
_BACKSLASH: Final = ord("\\")
_EVERY_BYTE: Final = (1 << 256) - 1
_NOT_SLASH: Final = _EVERY_BYTE & ~(1 << _SLASH)
_WILDCARDS: Final = frozenset(b"*?[\\")


def _byte_set(members: Iterable[int]) -> int:
    """`members` as a 256-bit set."""
    return sum(1 << byte for byte in set(members))


_POSIX_CLASSES: Final = {
    # ASCII only, as git's own ctype (its `space` leaves out \v and \f).
    b"alnum": _byte_set(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"alpha": _byte_set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"blank": _byte_set(b" \t"),
    b"cntrl": _byte_set([*range(32), 127]),
    b"digit": _byte_set(b"0123456789"),
    b"graph": _byte_set(range(33, 127)),
    b"lower": _byte_set(b"abcdefghijklmnopqrstuvwxyz"),
    b"print": _byte_set(range(32, 127)),
    b"punct": _byte_set(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    b"space": _byte_set(b" \t\n\r"),
    b"upper": _byte_set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"xdigit": _byte_set(b"0123456789abcdefABCDEF"),
}


class _Unmatchable(ValueError):
    """A pattern git's wildmatch aborts on, wherever it is tried: it matches nothing."""


@dataclass(frozen=True)
class _Step:
    """One position of a pattern: the bytes it takes (a 256-bit set), whether it takes
    any number of them (`*`, `**`; passed over without taking any), and whether the
    pattern may also go on right after the two steps that follow it (the start of `**/`:
    no directory at all)."""

    takes: int
    repeats: bool = False
    skips_directories: bool = False


_STAR: Final = _Step(_NOT_SLASH, repeats=True)
_ANY_DEPTH: Final = _Step(_EVERY_BYTE, repeats=True)
_DIRECTORIES: Final = (
    _Step(0, repeats=True, skips_directories=True),
    _ANY_DEPTH,
    _Step(1 << _SLASH),
)
"""`**/`: nothing, or anything that ends with a `/`."""


def _escaped(pattern: bytes, backslash: int) -> tuple[int, int]:
    """The index and value of the byte the `\\` at `backslash` escapes (a pattern that
    ends in one matches nothing, as in git)."""
    index = backslash + 1
    if index >= len(pattern):
        raise _Unmatchable
    return index, pattern[index]


def _class_at(pattern: bytes, start: int) -> tuple[int, int]:
    """The byte set of the `[...]` class opening at `start` and the index after it,
    parsed as git's wildmatch does (`]` first is a member, `\\` escapes, `a-z` ranges,
    `[:name:]`)."""
    index = start + 1
    negated = index < len(pattern) and pattern[index] in b"!^"
    index += negated
    members = 0
    previous = 0
    while True:
        if index >= len(pattern):
            raise _Unmatchable
        byte = pattern[index]
        if byte == _BACKSLASH:
            index, byte = _escaped(pattern, index)
            members |= 1 << byte
        elif (
            byte == ord("-")
            and previous
            and index + 1 < len(pattern)
            and pattern[index + 1] != ord("]")
        ):
            index += 1
            high = pattern[index]
            if high == _BACKSLASH:
                index, high = _escaped(pattern, index)
            members |= _byte_set(range(previous, high + 1))
            byte = 0
        elif byte == ord("[") and pattern[index + 1 : index + 2] == b":":
            close = pattern.find(b"]", index + 2)
            if close < 0:
                raise _Unmatchable
            name = pattern[index + 2 : close]
            if name.endswith(b":"):
                posix = _POSIX_CLASSES.get(name[:-1])
                if posix is None:
                    raise _Unmatchable
                members |= posix
                index = close
                byte = 0
            else:  # no `:]`: the `[` is a member like any other
                members |= 1 << byte
        else:
            members |= 1 << byte
        previous = byte
        index += 1
        if index >= len(pattern):
            raise _Unmatchable
        if pattern[index] == ord("]"):
            break
    if negated:
        members = _EVERY_BYTE & ~members
    return members & _NOT_SLASH, index + 1


def _steps_of(pattern: bytes) -> list[_Step]:
    """The pattern as steps (see `_Step`); raises `_Unmatchable`."""
    steps: list[_Step] = []
    index = 0
    while index < len(pattern):
        byte = pattern[index]
        if byte == ord("*"):
            first = index
            while index < len(pattern) and pattern[index] == ord("*"):
                index += 1
            rest = pattern[index : index + 2]
            whole_segment = (
                index - first > 1
                and (first == 0 or pattern[first - 1] == _SLASH)
                and (not rest or rest[:1] == b"/" or rest == b"\\/")
            )
            if not whole_segment:
                steps.append(_STAR)
            elif rest[:1] == b"/":
                index += 1
                if steps[-3:] != list(_DIRECTORIES):  # `**/**/` is `**/`
                    steps.extend(_DIRECTORIES)
            else:
                if steps[-3:] == list(_DIRECTORIES):  # `**/**` is `**`
                    del steps[-3:]
                steps.append(_ANY_DEPTH)
            continue
        if byte == ord("?"):
            steps.append(_Step(_NOT_SLASH))
        elif byte == ord("["):
            takes, index = _class_at(pattern, index)
            steps.append(_Step(takes))
            continue
        else:
            if byte == _BACKSLASH:
                index, byte = _escaped(pattern, index)
            steps.append(_Step(1 << byte))
        index += 1
    return steps


def _literal_of(steps: list[_Step]) -> bytes | None:
    """The bytes `steps` match when each takes exactly one byte, else None."""
    if any(step.repeats or step.takes.bit_count() != 1 for step in steps):
        return None
    return bytes(step.takes.bit_length() - 1 for step in steps)


def _longest_pass(steps: list[_Step]) -> int:
    """The most steps in a row a match can pass without taking a byte."""
    longest = [0] * (len(steps) + 3)
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        if step.repeats:
            longest[index] = 1 + longest[index + 1]
        if step.skips_directories:
            longest[index] = max(longest[index], 1 + longest[index + 3])
    return max(longest)


_KNOWN_MOVES: Final = 4096
"""Moves a pattern remembers (a hostile one has more sets of states than that)."""


class Wildmatch:
    """One compiled wildmatch pattern (`WM_PATHNAME`), matched against whole byte strings
    in one pass over the text: every state of the pattern is followed at once, as a bit
    set, so the cost is (text length) * (pattern length) bit operations at worst."""

    def __init__(self, pattern: bytes) -> None:
        try:
            steps = _steps_of(pattern)
        except _Unmatchable:
            steps = [_Step(0)]  # takes no byte: matches nothing
        self._steps = steps
        self._shortest = sum(not step.repeats for step in steps) - sum(
            step.skips_directories for step in steps
        )
        self._literal = _literal_of(steps)
        self._suffix = _literal_of(steps[1:]) if steps[:1] == [_STAR] else None
        """The text after a leading `*` when nothing else is a wildcard (`*.log`)."""
        self._repeating = sum(1 << i for i, step in enumerate(steps) if step.repeats)
        self._skipping = sum(1 << i for i, step in enumerate(steps) if step.skips_directories)
        self._passes = _longest_pass(steps)
        self._accepted = 1 << len(steps)
        self._start = self._closure(1)
        self._taking: dict[int, int] = {}
        self._moves: dict[int, int] = {}
        """(states << 8 | byte) -> the states after taking `byte`: a path repeats its
        pieces (a deep folder's paths share their directories), so most moves are known."""

    def _closure(self, states: int) -> int:
        """`states` and every state reachable from them without taking a byte."""
        for _ in range(self._passes):
            states |= (states & self._repeating) << 1 | (states & self._skipping) << 3
        return states

    def _steps_taking(self, byte: int) -> int:
        """The states whose step takes `byte`, as a bit set (computed once per byte)."""
        found = self._taking.get(byte)
        if found is None:
            flags = "".join("1" if step.takes >> byte & 1 else "0" for step in self._steps)
            found = int(flags[::-1] or "0", 2)
            self._taking[byte] = found
        return found

    def matches(self, text: bytes) -> bool:
        """Whether the pattern matches all of `text`."""
        if len(text) < self._shortest:
            return False
        if self._literal is not None:
            return text == self._literal
        if self._suffix is not None:
            head = len(text) - len(self._suffix)
            return text.endswith(self._suffix) and b"/" not in text[:head]
        states, moves = self._start, self._moves
        for byte in text:
            key = states << 8 | byte
            after = moves.get(key)
            if after is None:
                moved = states & self._steps_taking(byte)
                after = self._closure((moved & ~self._repeating) << 1 | (moved & self._repeating))
                if len(moves) >= _KNOWN_MOVES:
                    moves.clear()
                moves[key] = after
            if not after:
                return False
            states = after
        return bool(states & self._accepted)


def _path_bytes(path: str) -> bytes:
    """A path's bytes as git sees them (names the OS gave back undecoded are restored)."""
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return path.encode("utf-8", "surrogatepass")


def _without_trailing_spaces(line: str) -> str:
    """`line` without its trailing spaces, except an escaped one (`\\ `), as git trims."""
    first_trailing: int | None = None
    index = 0
    while index < len(line):
        char = line[index]
        if char == " ":
            if first_trailing is None:
                first_trailing = index
        else:
            first_trailing = None
            if char == "\\":
                index += 1
                if index == len(line):
                    return line
        index += 1
    return line if first_trailing is None else line[:first_trailing]


@dataclass(frozen=True)
class IgnoreRule:
    """One line of a rule file, compiled."""

    ignores: bool
    """True for an ignoring line, False for a `!` line."""
    directory_only: bool
    """`name/`: never matches a file."""
    name_only: bool
    """No `/` but a trailing one: matched against the entry's name, at any depth; else
    against its whole path from the rule file's directory."""
    prefix: bytes
    """The literal text before the first wildcard, compared as is (git's fast path,
    whose effect on `**` the module docstring describes)."""
    glob: Wildmatch
    """The rest of the pattern."""

    @classmethod
    def compile(cls, line: str) -> IgnoreRule | None:
        """The rule of one line; None for blanks and comments."""
        line = line.partition("\0")[0]  # git reads a line as a C string
        if not line or line.startswith("#"):
            return None
        body = _without_trailing_spaces(line)
        ignores = not body.startswith("!")
        body = body if ignores else body[1:]
        directory_only = body.endswith("/")
        body = body[:-1] if directory_only else body
        name_only = "/" not in body
        if body.startswith("/"):
            body = body[1:]
        if not body:
            return None
        pattern = _path_bytes(body)
        literal = next((i for i, byte in enumerate(pattern) if byte in _WILDCARDS), len(pattern))
        return cls(
            ignores,
            directory_only,
            name_only,
            pattern[:literal],
            Wildmatch(pattern[literal:]),
        )

    def matches(self, relative_path: bytes, is_dir: bool) -> bool:
        """Whether the line matches this entry itself (path relative to the rule file's
        directory, as bytes: see `_path_bytes`)."""
        if self.directory_only and not is_dir:
            return False
        text = relative_path.rpartition(b"/")[2] if self.name_only else relative_path
        return text.startswith(self.prefix) and self.glob.matches(text[len(self.prefix) :])


def rule_file_lines(text: str) -> list[str]:
    """The lines of a rule file as git splits them: on `\\n` only, a `\\r` before it
    dropped, a leading byte order mark skipped."""
    return [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]


def compile_ignore_lines(lines: Iterable[str]) -> list[IgnoreRule]:
    """The rules of one file of gitignore-syntax `lines`, in order."""
    return [rule for line in lines if (rule := IgnoreRule.compile(line)) is not None]


def rules_verdict(rules: list[IgnoreRule], relative_path: str, is_dir: bool) -> bool | None:
    """True: ignored, False: re-included by `!`, None: no line of `rules` matches."""
    path = _path_bytes(relative_path)
    for rule in reversed(rules):
        if rule.matches(path, is_dir):
            return rule.ignores
    return None


@dataclass(frozen=True)
class _Scope:
    """The rule files of one directory, and those in effect above it (each directory's
    own, so a deep tree costs one scope per directory that has rule files)."""

    start: int
    """Where a path below this directory starts, relative to it."""
    files: list[list[IgnoreRule]]
    above: _Scope | None


class IgnoreRules:
    """The ignore decision for paths of one local folder, reading rule files lazily.

    Rule files, the scopes of directories and the verdicts on directories are cached,
    so a decision costs the path's length, not its depth times that; call
    `invalidate()` after a rule file changes.
    """

    def __init__(
        self, root: Path, *, use_defaults: bool = True, kept_out: Collection[str] = ()
    ) -> None:
        """`kept_out`: folder-relative directories ignored whatever the rules say."""
        self.root = root
        self._defaults = compile_ignore_lines(DEFAULT_IGNORES) if use_defaults else []
        self._kept_out = frozenset(kept_out)
        self._scopes: dict[str, _Scope | None] = {}
        self._ignored_directories: dict[str, bool] = {}

    def invalidate(self) -> None:
        """Forget cached rule files (after a `.gitignore` or `.workbenchignore` changed)."""
        self._scopes.clear()
        self._ignored_directories.clear()

    def forget(self, directories: Iterable[str]) -> None:
        """Forget what is cached of these directories and below (each was made, moved or
        removed: the rule files there may be others now); nothing for one never looked
        at. One sweep of the caches for them all: a burst of events stays linear."""
        gone = {
            directory
            for directory in directories
            if directory in self._scopes or directory in self._ignored_directories
        }
        if not gone:
            return
        for cache in (self._scopes, self._ignored_directories):
            for name in [name for name in cache if is_under_any(name, gone)]:
                del cache[name]

    def _files_of(self, directory: str) -> list[list[IgnoreRule]]:
        """The rules of each rule file in `directory`, in increasing precedence."""
        found = []
        for name in IGNORE_FILE_NAMES:
            relative = f"{directory}/{name}" if directory else name
            if not os.path.lexists(os.path.join(self.root, checked_relative(relative))):
                continue  # one cheap look before the segment-by-segment open
            data = read_regular_file(self.root, relative, MAX_IGNORE_FILE_BYTES)
            if data is not None:
                # Undecodable bytes stay bytes (as escapes): git matches bytes.
                text = data[:MAX_IGNORE_FILE_BYTES].decode("utf-8", "surrogateescape")
                found.append(compile_ignore_lines(rule_file_lines(text)))
        return found

    def _scope(self, directory: str) -> _Scope | None:
        """The rule files in effect in `directory` ('' = the folder), innermost first."""
        pending: list[str] = []
        current = directory
        while current not in self._scopes:
            pending.append(current)
            if not current:
                break
            current = current.rpartition("/")[0]
        scope = self._scopes.get(current)
        for name in reversed(pending):
            files = self._files_of(name)
            if files:
                scope = _Scope(len(name) + 1 if name else 0, files, scope)
            self._scopes[name] = scope
        return scope

    def _decide(self, relative_path: str, is_dir: bool) -> bool:
        """This entry's own verdict (ignoring whether an ancestor is ignored): kept out,
        else the deepest rule file's, then the defaults'."""
        if relative_path in self._kept_out:
            return True
        scope = self._scope(relative_path.rpartition("/")[0])
        while scope is not None:
            below = relative_path[scope.start :]
            for rules in reversed(scope.files):
                found = rules_verdict(rules, below, is_dir)
                if found is not None:
                    return found
            scope = scope.above
        return bool(rules_verdict(self._defaults, relative_path, is_dir))

    def _directory_ignored(self, directory: str) -> bool:
        """Whether the directory or one above it is excluded."""
        pending: list[str] = []
        current = directory
        while current and current not in self._ignored_directories:
            pending.append(current)
            current = current.rpartition("/")[0]
        ignored = bool(current) and self._ignored_directories[current]
        for name in reversed(pending):
            ignored = ignored or self._decide(name, True)
            self._ignored_directories[name] = ignored
        return ignored

    def is_ignored(self, relative_path: str, is_dir: bool) -> bool:
        """Whether a folder-relative path (`a/b.txt`) is excluded, its ancestors included."""
        parent = relative_path.rpartition("/")[0]
        return self._directory_ignored(parent) or self._decide(relative_path, is_dir)

    def is_ignored_child(self, relative_path: str, is_dir: bool) -> bool:
        """Like `is_ignored` for a walk that already knows the parent is not ignored."""
        return self._decide(relative_path, is_dir)
