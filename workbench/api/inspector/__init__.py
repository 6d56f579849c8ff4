"""The context inspector: the code that lists the names a user made in a context, one
script per language beside this module, and how its answer is read.

The same code serves both backends. The local backend runs it in a copy of the context
restored from its stored snapshot and then drops the copy, so an inspection changes
nothing about the context. A gateway without `context-inspect` can only run it in the
context itself, as an execution that counts, and only when the user asks for that.
The guest's answer is untrusted (user code may have replaced what the script calls), so
it is checked field by field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from engines.result import (
    FUEL_EXHAUSTED,
    LIMIT_ERROR,
    TIMED_OUT,
    Limits,
    well_formed,
)
from workbench.protocol.errors import ErrorCode, SandboxError, make_error
from workbench.protocol.types import (
    ContextInspection,
    ExecutionResult,
    InspectedName,
    InspectedValue,
)

SHORT_CHARS: Final = 120
"""A listed value's repr is cut to this many characters, on one line."""
PAGE_CHARS: Final = 4096
"""Characters of a full repr per page: a page stays under the 64 KiB result limit even
when each character is written as two `\\u` escapes (a surrogate pair)."""
MAX_NAMES: Final = 200
"""Names listed at most; `ContextInspection.more` counts the rest."""
MAX_NAME_CHARS: Final = 2 * SHORT_CHARS
"""A longer name (only `globals()[...]` and the like make one) is counted, not listed."""
LIST_BUDGET: Final = 40_000
"""The most a listing's names may take as JSON (in the language's own units: bytes, or
UTF-16 units in JavaScript), so that it stays under the 64 KiB result limit; the names
past it are counted in `more`."""
HELPER_PREFIXES: Final = ("__workbench_", "__wb_root")
"""Names the workbench's own code makes in a context begin so (the watch runner's
`__workbench_run`, left behind when the entry raised, and Ruby's `__wb_root`): they are
not the user's, so no script lists them. Narrow on purpose: a user's `__wb_total` is
listed."""
TIMEOUT_SECONDS: Final = 10.0
"""Wall-clock limit of one inspection (a user's `__repr__` may loop)."""
NAME_SECONDS: Final = 2.5
"""How long a watched listing may stay at one name: then the host stops the pass there and
runs it again passing over that name."""
MAX_PASSED_OVER: Final = 3
"""Names a watched listing passes over before it gives up."""
PASSED_OVER_REPR: Final = "<not shown: it did not finish within the inspector's limit>"
"""The repr listed for a name passed over (its length and size are not read, nor its type
but in Python, which reads that without running user code)."""
MARKER: Final = "__workbench_inspecting__"
"""A watched listing writes a line of this and the index of each name it comes to."""
_MARKED_LINE: Final = re.compile(MARKER.encode() + rb" (\d{1,4})\r?$")
_OUTPUT_BYTES: Final = 1 << 20
"""The output a watched listing may write (markers and what user code writes), which the
host watches: past it, a pass can no longer tell which name it is at."""
_SCRIPTS: Final = {
    "python": "python.py.guest",
    "javascript": "javascript.js",
    "perl": "perl.pl",
    "ruby": "ruby.rb",
}


def inspects(language: str) -> bool:
    """The inspector has a script for `language`."""
    return language in _SCRIPTS


def inspector_code(
    language: str,
    name: str | None = None,
    offset: int = 0,
    *,
    marked: bool = False,
    passed_over: Sequence[int] = (),
) -> str:
    """The code that lists the context's names, or (given `name`) writes out that name's
    value from character `offset`. The name travels as hex digits, so no value of it can
    break out of the string it is put in. `marked`: the listing writes a `MARKER` line as
    it comes to each name; `passed_over`: the indexes of names it lists without reading
    their values."""
    script = _SCRIPTS.get(language)
    if script is None:
        raise make_error(
            ErrorCode.NOT_SUPPORTED, f"The context inspector does not know {language} yet"
        )
    if name is not None and well_formed(name) != name:
        raise make_error(
            ErrorCode.VALIDATION_FAILED, "name must be text (it holds a lone surrogate)"
        )
    from importlib.resources import files  # 5 ms at start-up, for every command

    source = files(__package__).joinpath(script).read_text(encoding="utf-8")
    values = {
        "target_hex": (name or "").encode("utf-8", "surrogatepass").hex(),
        "offset": str(max(0, int(offset))),
        "short_chars": str(SHORT_CHARS),
        "page_chars": str(PAGE_CHARS),
        "max_names": str(MAX_NAMES),
        "budget": str(LIST_BUDGET),
        # JSON literals read the same in each language: ASCII, with no `\`, `$`, `@` or
        # `#` for Perl or Ruby to read otherwise (a test holds the constants to that).
        "helper_prefixes": json.dumps(list(HELPER_PREFIXES)),
        "marker": json.dumps(MARKER if marked else ""),
        "passed_over": json.dumps([int(index) for index in passed_over]),
        "passed_over_repr": json.dumps(PASSED_OVER_REPR),
    }
    for key, value in values.items():
        source = source.replace("{{" + key + "}}", value)
    return source


def marked_limits(limits: Limits) -> Limits:
    """`limits` for a watched listing: room for its markers and for what user code in it
    writes (the output of an inspection is dropped, so only its size matters)."""
    return replace(
        limits,
        output_writes=max(limits.output_writes, 100_000),
        output_bytes=max(limits.output_bytes, _OUTPUT_BYTES),
    )


class ListingProgress:
    """Which name a watched listing is at, and since when, from its output as it comes
    (`told`) or, where an engine does not stream it, from its result (`read`). Once the
    output passed what the host is told of, it can no longer say (`index` None)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._index: int | None = None
        self.since = clock()
        """When the listing came to `index` (or started)."""
        self._line = b""
        self._told = 0
        self._blind = False

    @property
    def index(self) -> int | None:
        return None if self._blind else self._index

    def told(self, stream: str, data: bytes) -> None:
        """An `OutputListener`: the guest wrote `data`."""
        self._told += len(data)
        if self._told >= _OUTPUT_BYTES:
            self._blind = True
        if stream != "stdout":
            return
        *lines, rest = (self._line + data).split(b"\n")
        self._line = rest[-64:]  # a marker's line is short: the end of a long one will do
        for line in lines:
            marked = _MARKED_LINE.search(line[-64:])
            if marked is not None:  # `since` first: a watcher on another thread may look
                self.since = self._clock()
                self._index = int(marked.group(1))

    def read(self, result: ExecutionResult) -> None:
        """Take the markers from the stdout of a pass that streamed none."""
        if self._told == 0 and result.stdout:
            self.told("stdout", "\n".join(result.stdout).encode("utf-8", "surrogatepass"))
            self.told("stdout", b"\n")


def stopped_at(result: ExecutionResult, progress: ListingProgress) -> int | None:
    """The index of the name a watched listing was at when it ran out of time or fuel;
    None when it ended otherwise (a cancel, an output limit, neither of which says which
    name caused it) or its progress cannot say."""
    error = result.error
    if error is None or error.name != LIMIT_ERROR:
        return None
    if error.message != FUEL_EXHAUSTED and not error.message.startswith(TIMED_OUT):
        return None
    progress.read(result)
    return progress.index


ListingPass = Callable[[str], Awaitable[tuple[ExecutionResult, int | None]]]
"""Runs a watched listing's code in a fresh copy of the context: its result, and the index
of the name it was stopped at (None: it ended, or nothing says which name it was at)."""


async def list_names(language: str, run_pass: ListingPass) -> ExecutionResult:
    """The listing's result, from passes of `run_pass`: a pass stopped at a name is run
    again passing over that name, up to `MAX_PASSED_OVER` names, so one looping `__repr__`
    or getter costs only its own entry. User code can write a false marker, which at worst
    passes over the wrong name, and then stops the listing as one not watched."""
    passed_over: list[int] = []
    while True:
        result, stuck = await run_pass(
            inspector_code(language, marked=True, passed_over=passed_over)
        )
        if stuck is None or stuck in passed_over or len(passed_over) == MAX_PASSED_OVER:
            return result
        passed_over.append(stuck)


def _answer(result: ExecutionResult, *, listing: bool) -> dict[str, Any]:
    """The JSON object the script returned, or the error that says why there is none."""
    if result.error is not None and result.error.name == LIMIT_ERROR:
        why = (
            "a value whose repr never ends (a `__repr__`, getter or `inspect` that loops) "
            "stops the listing, unless the inspector can tell which it is and pass over it "
            f"(up to {MAX_PASSED_OVER}, where it reads a copy of the context); other names "
            "can still be asked for one by one"
            if listing
            else "this value's repr does not end within it"
        )
        raise make_error(
            ErrorCode.CODE_EXECUTION_ERROR,
            f"The inspector stopped at its limit ({result.error.message}): {why}",
        )
    if result.error is not None:
        raise make_error(
            ErrorCode.CODE_EXECUTION_ERROR,
            f"The inspector failed: {result.error.name}: {result.error.message}",
        )
    entries = [entry.json for entry in result.results if entry.is_json]
    if not entries or not isinstance(entries[-1], dict):
        raise _unexpected("it returned no JSON object")
    return entries[-1]


def _unexpected(why: str) -> SandboxError:
    return make_error(
        ErrorCode.CODE_EXECUTION_ERROR,
        f"The inspector's answer is not what it writes ({why}); code in the context may "
        "have replaced something it uses",
    )


def _text(data: dict[str, Any], key: str, fallback: str | None = None) -> str:
    """The field as well-formed text (a guest string may hold lone surrogates); without a
    `fallback`, a field that is not text spoils the answer."""
    value = data.get(key)
    if isinstance(value, str):
        return well_formed(value)
    if fallback is None:
        raise _unexpected(f"{key} is not text")
    return fallback


def _count(data: dict[str, Any], key: str) -> int | None:
    """The field as a count; anything else (a user's `__len__` may answer -1) is None."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def read_inspection(
    result: ExecutionResult, context_id: str, execution_count: int, *, ran_code: bool
) -> ContextInspection:
    """The names the script listed in `result`."""
    answer = _answer(result, listing=True)
    listed = answer.get("names")
    if not isinstance(listed, list):
        raise _unexpected("names is not a list")
    names: list[InspectedName] = []
    seen: set[str] = set()
    more = _count(answer, "more") or 0
    for item in listed[:MAX_NAMES]:
        name = item.get("name") if isinstance(item, dict) else None
        # Not a name, too long to ask for, or listed twice (by code the user replaced
        # something of): counted, not listed.
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or name in seen:
            more += 1
            continue
        seen.add(name)
        names.append(
            InspectedName(
                well_formed(name),
                _text(item, "type", "?")[:SHORT_CHARS],
                _text(item, "repr", "?")[:SHORT_CHARS],
                _count(item, "length"),
                _count(item, "bytes"),
            )
        )
    more += max(0, len(listed) - MAX_NAMES)
    return ContextInspection(context_id, execution_count, names, more, ran_code)


def read_value(
    result: ExecutionResult, context_id: str, name: str, offset: int, *, ran_code: bool
) -> InspectedValue:
    """The page of `name`'s value that the script wrote out in `result`."""
    answer = _answer(result, listing=False)
    if answer.get("found") is not True:
        raise make_error(
            ErrorCode.VALIDATION_FAILED, f"The context has no name {name!r} to inspect"
        )
    total = _count(answer, "total") or 0
    return InspectedValue(
        context_id,
        name,
        _text(answer, "type", "?")[:SHORT_CHARS],
        _text(answer, "repr")[:PAGE_CHARS],
        max(0, int(offset)),
        total,
        ran_code,
    )
