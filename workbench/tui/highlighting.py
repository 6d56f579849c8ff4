"""Pygments highlighting of untrusted text, within a time bound.

Pygments' lexers are regular expressions, and some take time quadratic or exponential in
crafted input: a file of 32 KiB of blank lines froze the workbench for 12 s in the Python
lexer at every key, and one of 44 bytes for 12 s in the TADS 3 lexer (Pygments issue
3311; helper measurements). Every lex of text a guest, a gateway or another client wrote
goes through `lexed`, which gives it `LEX_SECONDS` of the process's CPU time (CPU, not
wall time: a loaded machine must not turn ordinary code plain): a profiling timer's
SIGPROF then interrupts it (the regular expression engine checks for signals as it
matches, holding the GIL, so neither a thread's timer nor a lex in the background could
do it), and the text is shown plain. Textual paints on the main thread, the only one that
gets signals; nothing else in the workbench uses that timer.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TypeVar

from pygments.lexer import Lexer  # type: ignore[import-untyped]
from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]
from pygments.token import Token, _TokenType  # type: ignore[import-untyped]
from pygments.util import ClassNotFound  # type: ignore[import-untyped]

LEX_SECONDS = 0.1
"""How long one lex may take: 32 KiB of ordinary Python takes about 80 ms."""

LexedToken = tuple[_TokenType, str]
Result = TypeVar("Result")

_TIMER, _SIGNAL = signal.ITIMER_PROF, signal.SIGPROF
_bounded = False
"""A bounded call runs with its timer armed (only the main thread sets it)."""


class _Overdue(BaseException):
    """A bounded call ran past its time (a `BaseException`: Pygments' text analysers catch
    every `Exception`, which would swallow it and leave the rest unbounded; review)."""


AGAIN_SECONDS = 0.01
"""When the timer fires again, should its interrupt be swallowed: Python drops an
exception raised in a garbage collector's callback or a `__del__` ("Exception ignored"),
and the lex went on unbounded (CI, in a test's collector callback)."""


def _overdue(signum: int, frame: object) -> None:
    """The timer's signal: ends the bounded call that runs (armed again until that call
    has ended, in case this interrupt is swallowed). A signal of a timer stopped as it
    fired may arrive late, at the next call or after it: ignored while the timer armed
    for that call still runs, or once it ended."""
    if _bounded and not signal.getitimer(_TIMER)[0]:
        signal.setitimer(_TIMER, AGAIN_SECONDS)
        raise _Overdue


def _timer_is_ours() -> bool:
    """Whether the timer and its signal are free for the bound (the handler is installed
    on first use and stays; another's is never taken)."""
    handler = signal.getsignal(_SIGNAL)
    if handler is not _overdue:
        if handler is not signal.SIG_DFL or signal.getitimer(_TIMER)[0]:
            return False
        signal.signal(_SIGNAL, _overdue)
    return True


def within_bound(call: Callable[[], Result], seconds: float = LEX_SECONDS) -> Result | None:
    """`call()`, or None when it takes longer than `seconds` of CPU time (or fails: a
    lexer's own error shows the text plain too). Off the main thread, or where the timer
    is another's, it is not run."""
    global _bounded
    if threading.current_thread() is not threading.main_thread() or not _timer_is_ours():
        return None
    result: Result | None = None
    try:
        signal.setitimer(_TIMER, seconds)
        _bounded = True
        try:
            result = call()
        except Exception:
            result = None
        _bounded = False  # from here a late signal is ignored
    except _Overdue:
        return None  # (the finally lets go of the bound)
    finally:
        _bounded = False
        signal.setitimer(_TIMER, 0)
    return result


def lexed(lexer: Lexer, text: str) -> list[LexedToken] | None:
    """`lexer`'s tokens of `text`, or None when lexing took longer than `LEX_SECONDS`."""
    return within_bound(lambda: list(lexer.get_tokens(text)))


class BoundedLexer(Lexer):  # type: ignore[misc]
    """`inner` as Rich's `Syntax` uses a lexer, within `LEX_SECONDS` for each text (plain
    past it). The tokens of the texts lexed last are kept: Rich lexes again at every
    render, and a transcript renders its cells again at each change of width."""

    KEPT_TEXTS = 64

    def __init__(self, inner: Lexer) -> None:
        super().__init__()
        self.inner = inner
        self._kept: OrderedDict[str, list[LexedToken]] = OrderedDict()

    def get_tokens(self, text: str, unfiltered: bool = False) -> Iterator[LexedToken]:
        tokens = self._kept.get(text)
        if tokens is None:
            tokens = lexed(self.inner, text) or [(Token.Text, text)]
            self._kept[text] = tokens
            if len(self._kept) > self.KEPT_TEXTS:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(text)
        return iter(tokens)


@functools.cache
def lexer_by_name(name: str) -> BoundedLexer | None:
    """The bounded lexer Pygments calls `name` (one per name, so that the tokens it keeps
    serve every render), None when Pygments knows none."""
    try:
        inner = get_lexer_by_name(name, stripnl=False, ensurenl=True)
    except ClassNotFound:
        return None
    return BoundedLexer(inner)
