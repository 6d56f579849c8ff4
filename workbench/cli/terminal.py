"""The CLI's one way to print: text (guest-, sandbox- or server-controlled, or ours, which
often quotes theirs) never gets the terminal.

A guest that can write escape sequences to the user's terminal can set its clipboard
(OSC 52), retitle the window or rewrite what was printed before. When the stream is a
terminal, every control character except newline and tab is shown as a visible `\\xNN`
escape instead: C0 (U+0000-U+001F, so also carriage return), DEL (U+007F) and C1
(U+0080-U+009F). When it is a pipe or a file the text is written exactly as received.

A closed stdout (`>&-`) is a `BrokenPipeError`, as when a pipe's reader went away: the
error boundary ends the command quietly (exit 1). Lines for a closed stderr (`2>&-`) are
dropped: notes and errors have nowhere to go, and the exit code still tells.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import Any, TextIO

import click


def _stdout() -> TextIO:
    """stdout; closed, a `BrokenPipeError`."""
    if sys.stdout is None:
        raise BrokenPipeError(errno.EBADF, "stdout is closed")
    return sys.stdout


def _stream(err: bool) -> TextIO | None:
    """stderr (None: closed) or stdout."""
    return sys.stderr if err else _stdout()


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (a closed one is not)."""
    return sys.stderr is not None and sys.stderr.isatty()


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (a closed one is not)."""
    return sys.stdout is not None and sys.stdout.isatty()


def stdin_is_terminal() -> bool:
    """Whether stdin is a terminal (a closed one is not)."""
    return sys.stdin is not None and sys.stdin.isatty()


def _encodable(text: str) -> str:
    """`text` as `workbench.api.display.encodable` makes it, imported only for text that
    needs it (importing the API takes 50 ms)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        from workbench.api.display import encodable

        return encodable(text)
    return text


def echo_untrusted(
    text: str,
    *,
    err: bool = False,
    fg: str | None = None,
    dim: bool = False,
    one_line: bool = False,
) -> None:
    """One line of text (plus newline) to stdout or stderr, safely; every other module of
    the CLI prints through this (a test holds them to it).

    On a terminal the text is neutralised first and our own style (`fg`, `dim`) applied;
    on a pipe or file it is written exactly, without style. `one_line`: the text is one
    entry of a listing, so on a terminal its newlines and tabs are escaped too (a name
    holding a newline would otherwise look like two entries).
    """
    stream = _stream(err)
    if stream is None:
        return
    text = _encodable(text)
    if stream.isatty():
        from workbench.api.display import neutralise  # here: --help and --version stay quick

        safe = neutralise(text)
        if one_line:
            safe = safe.replace("\t", "\\x09").replace("\n", "\\x0a")
        styled = click.style(safe, fg=fg, dim=dim or None) if fg or dim else safe
        click.echo(styled, err=err)
    else:
        # color=True: click would otherwise strip CSI sequences from non-terminal output.
        click.echo(text, err=err, color=True)


def echo_json(payload: Any, *, err: bool = False, indent: int | None = 2) -> None:
    """`payload` as JSON (indented, or one line with `indent=None`), which stays valid
    JSON on a terminal (`json_escaped`)."""
    echo_json_text(json.dumps(payload, indent=indent, ensure_ascii=False), err=err)


def echo_json_text(text: str, *, err: bool = False) -> None:
    """A JSON document already written out, which stays valid JSON on a terminal: its
    control characters escaped as JSON escapes (`echo_untrusted`'s `\x9b` is none)."""
    stream = _stream(err)
    if stream is None:
        return
    text = _encodable(text)
    if stream.isatty():
        from workbench.api.display import json_escaped

        text = json_escaped(text)
    click.echo(text, err=err, color=True)


def write_untrusted_bytes(data: bytes) -> None:
    """Raw bytes to stdout: exactly when redirected, decoded and neutralised on a terminal.

    On a terminal, bytes that are not UTF-8 are shown as `\\xNN` too (backslashreplace),
    so a stray 0x9b byte cannot act as an 8-bit control either.
    """
    stdout = _stdout()
    if stdout.isatty():
        from workbench.api.display import neutralise

        stdout.write(neutralise(data.decode("utf-8", errors="backslashreplace")))
        stdout.flush()
    else:
        # A write at a time, to the end: a pipe whose reader went away (`| head -c 1`)
        # took part of one large write, which the buffered writer then counted as done,
        # and the command exited 0 (QA).
        stdout.flush()
        remaining = memoryview(data)
        while remaining:
            remaining = remaining[os.write(stdout.fileno(), remaining) :]
