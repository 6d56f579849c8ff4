"""Printing untrusted (guest- or sandbox-controlled) text without handing it the terminal.

A guest that can write escape sequences to the user's terminal can set its clipboard
(OSC 52), retitle the window or rewrite what was printed before. When the stream is a
terminal, every control character except newline and tab is shown as a visible `\\xNN`
escape instead: C0 (U+0000-U+001F, so also carriage return), DEL (U+007F) and C1
(U+0080-U+009F). When it is a pipe or a file the text is written exactly as received.
"""

from __future__ import annotations

import sys

import click

from workbench.api import neutralise


def echo_untrusted(text: str, *, err: bool = False, fg: str | None = None) -> None:
    """One line of untrusted text (plus newline) to stdout or stderr, safely.

    On a terminal the text is neutralised first and our own colour `fg` applied; on a
    pipe or file it is written exactly, without colour.
    """
    if (sys.stderr if err else sys.stdout).isatty():
        safe = neutralise(text)
        click.echo(click.style(safe, fg=fg) if fg else safe, err=err)
    else:
        # color=True: click would otherwise strip CSI sequences from non-terminal output.
        click.echo(text, err=err, color=True)


def write_untrusted_bytes(data: bytes) -> None:
    """Raw bytes to stdout: exactly when redirected, decoded and neutralised on a terminal.

    On a terminal, bytes that are not UTF-8 are shown as `\\xNN` too (backslashreplace),
    so a stray 0x9b byte cannot act as an 8-bit control either.
    """
    if sys.stdout.isatty():
        sys.stdout.write(neutralise(data.decode("utf-8", errors="backslashreplace")))
        sys.stdout.flush()
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
