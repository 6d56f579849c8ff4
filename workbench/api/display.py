"""Showing untrusted (guest- or backend-controlled) text without handing it the terminal.

A guest that can write escape sequences to the user's terminal can set its clipboard
(OSC 52), retitle the window or rewrite what was printed before. Both UIs therefore show
every control character except newline and tab as a visible `\\xNN` escape: C0
(U+0000-U+001F, so also carriage return), DEL (U+007F) and C1 (U+0080-U+009F); and the
bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) as
`\\uNNNN`, which reorder what follows them on the screen ("Trojan Source"; QA).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.api.client import Backend

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 controls except tab (0x09) and newline (0x0a), DEL, C1 controls, and the bidi
controls that reorder the text after them."""


def neutralise(text: str) -> str:
    """`text` with each control character replaced by its visible `\\xNN` escape."""
    return _CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """Untrusted `text` for a place of one line (a tree label, a tab's title, a test's id):
    control characters, tab and newline too, as `\\xNN`, as the CLI lists names (a file
    named `new\\nline.txt` showed as `new`)."""
    return neutralise(text).replace("\t", "\\x09").replace("\n", "\\x0a")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def encodable(text: str) -> str:
    """`text` with each lone surrogate (a guest's or a gateway's `"\\ud800"`: JSON
    carries them, UTF-8 cannot) as its `\\udXXX` escape, inside a JSON string the
    escape of the same value: for what writes text out (a terminal, a pipe, the
    clipboard)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def json_escaped(text: str) -> str:
    """JSON text with the control characters `json.dumps` leaves raw (DEL and C1, which
    it may write only inside strings) as `\\u` escapes: the same JSON value, safe to show."""
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def without_controls(text: str) -> str:
    """`text` with its control characters left out: for what is painted where the text
    itself must stay as it is (an editor), since a terminal gives them no width anyway."""
    return _CONTROL.sub("", text)


def warn_untrusted(line: str) -> None:
    """One warning line on stderr: neutralised on a terminal, exact on a pipe or file.
    The headless rooms print through this, the CLI through `workbench.cli.terminal`."""
    sys.stderr.write((neutralise(line) if sys.stderr.isatty() else line) + "\n")
    sys.stderr.flush()


def short_id(identifier: str) -> str:
    """The first block of a UUID-style context id."""
    return identifier.split("-", 1)[0][:8]


def inspected_size(length: int | None, size_bytes: int | None) -> str:
    """An inspected value's size in a few characters: its length, its bytes, or both."""
    parts = []
    if length is not None:
        parts.append(f"len {length}")
    if size_bytes is not None:
        parts.append(f"{size_bytes} B")
    return ", ".join(parts)


def human_bytes(count: int) -> str:
    """`1.5 KiB`-style size."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def counted(count: int, noun: str) -> str:
    """`1 file`, `3 files`, `1,000 files`: a count with its noun (regular plurals only)."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def workspace_summary(entries: int, size: int) -> str:
    """`3 entries, 1.2 KiB`: what a sandbox info says of its `/workspace` (its count is of
    files and directories, spec 8: an empty folder showed as "1 file")."""
    return f"{entries:,} {'entry' if entries == 1 else 'entries'}, {human_bytes(size)}"


def describe_backend(backend: Backend) -> str:
    """`profile NAME (URL)` or `local (DATA DIR)`: which backend an action changes."""
    if backend.engines is not None:
        return backend.description
    return f"profile {backend.name} ({backend.description})"
