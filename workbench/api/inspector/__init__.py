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
from typing import Any, Final

from engines.result import well_formed
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
_SCRIPTS: Final = {
    "python": "python.py.guest",
    "javascript": "javascript.js",
    "perl": "perl.pl",
    "ruby": "ruby.rb",
}


def inspects(language: str) -> bool:
    """The inspector has a script for `language`."""
    return language in _SCRIPTS


def inspector_code(language: str, name: str | None = None, offset: int = 0) -> str:
    """The code that lists the context's names, or (given `name`) writes out that name's
    value from character `offset`. The name travels as hex digits, so no value of it can
    break out of the string it is put in."""
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
        "helper_prefixes": json.dumps(list(HELPER_PREFIXES)),  # a literal in each language
    }
    for key, value in values.items():
        source = source.replace("{{" + key + "}}", value)
    return source


def _answer(result: ExecutionResult) -> dict[str, Any]:
    """The JSON object the script returned, or the error that says why there is none."""
    if result.error is not None and result.error.name == "ExecutionLimitError":
        raise make_error(
            ErrorCode.CODE_EXECUTION_ERROR,
            f"The inspector stopped at its limit ({result.error.message}): a value whose "
            "repr never ends (a `__repr__` or `toString` that loops) stops the whole "
            "listing; other names can still be asked for one by one",
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
    answer = _answer(result)
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
    answer = _answer(result)
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
