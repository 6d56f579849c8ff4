"""The one JSON codec of the wire types: each shape is declared once, as a dataclass.

A wire type is a frozen dataclass deriving from `WireType`. Its fields, in order, are the
JSON keys (snake_case names travel as camelCase); `wire(...)` metadata marks a field that
differs: another key, grouped in a nested object, left out when None, a value for a
missing key, or passed through as sent. Fields declared with ``init=False`` are written
(constants such as ``success``, values derived from other fields) but never read. A value
with its own ``to_json``/``from_json`` (the engines' `ExecutionResult`) travels by those.

Reading is as lenient as the protocol's clients have always been: scalars are coerced to
their declared type, a missing or null list or object is empty, a missing optional value is
None; a missing required scalar fails (``KeyError``), and so does what is not an object
where one belongs (``TypeError``). A boolean is read only from a boolean (or null, as
false): coercing would read the string "false" as true.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self, cast

__all__ = ["Json", "WireType", "encode", "wire"]

Json = dict[str, Any]
Reader = Callable[[Any], Any]

_MISSING: Any = dataclasses.MISSING
_NOT_GIVEN: Any = object()
"""`wire(missing=...)` not given (None is a value a missing key may read as)."""


def _boolean(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    raise TypeError(f"expected a boolean, got {type(value).__name__}")


_COERCE: dict[Any, Reader] = {str: str, int: int, float: float, bool: _boolean}


@dataclass(frozen=True)
class _Wire:
    name: str | None = None
    group: str | None = None
    omit_none: bool = False
    missing: Any = _NOT_GIVEN
    raw: bool = False


def wire(
    *,
    name: str | None = None,
    group: str | None = None,
    omit_none: bool = False,
    missing: Any = _NOT_GIVEN,
    raw: bool = False,
) -> dict[str, Any]:
    """Field metadata: `name` replaces the camelCase key, `group` nests the key in that
    object, `omit_none` leaves the key out when the value is None, `missing` is read when
    the key is absent, `raw` passes the value through uncoerced."""
    return {"wire": _Wire(name, group, omit_none, missing, raw)}


@dataclass(frozen=True)
class _Field:
    attr: str
    key: str
    spec: _Wire
    init: bool
    default: Any
    read: Reader


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda match: match.group(1).upper(), name)


def _reader(hint: Any) -> Reader:
    """How to read one JSON value as `hint` (see the module docstring for the rules)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        (inner,) = (arg for arg in args if arg is not type(None))
        if hasattr(inner, "from_json"):
            return lambda value: inner.from_json(value) if isinstance(value, dict) else None
        read = _reader(inner)
        return lambda value: None if value is None else read(value)
    if origin is list:
        item = _reader(args[0])
        return lambda value: [item(entry) for entry in value or []]
    if origin is dict:
        key, item = _reader(args[0]), _reader(args[1])
        return lambda value: {key(k): item(v) for k, v in (value or {}).items()}
    if hint in _COERCE:
        return _COERCE[hint]
    if hasattr(hint, "from_json"):
        return cast(Reader, hint.from_json)
    return lambda value: value


def _admits_none(hint: Any) -> bool:
    return typing.get_origin(hint) in (types.UnionType, typing.Union) and type(None) in (
        typing.get_args(hint)
    )


_FIELDS: dict[type, tuple[_Field, ...]] = {}


def _fields(cls: type) -> tuple[_Field, ...]:
    """How each field of a wire type travels (worked out once per type)."""
    known = _FIELDS.get(cls)
    if known is None:
        known = _FIELDS[cls] = _describe(cls)
    return known


def _describe(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for item in dataclasses.fields(cls):
        spec: _Wire = item.metadata.get("wire", _Wire())
        hint = hints[item.name]
        default = item.default
        if spec.missing is not _NOT_GIVEN:
            default = spec.missing
        elif default is _MISSING and item.default_factory is not _MISSING:
            default = cast(Callable[[], Any], item.default_factory)()
        elif default is _MISSING and _admits_none(hint):
            default = None
        elif default is _MISSING and typing.get_origin(hint) in (list, dict):
            default = typing.get_origin(hint)()
        read = (lambda value: value) if spec.raw else _reader(hint)
        found.append(
            _Field(item.name, spec.name or _camel(item.name), spec, item.init, default, read)
        )
    return tuple(found)


def encode(value: Any) -> Any:
    """`value` as JSON-ready data: wire types (and anything with ``to_json``) by their
    fields, lists and dicts item by item, everything else as it is."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    return value


class WireType:
    """Base of the wire dataclasses: `to_json` and `from_json` by the one codec."""

    def to_json(self) -> Json:
        data: Json = {}
        for item in _fields(type(self)):
            value = getattr(self, item.attr)
            if value is None and item.spec.omit_none:
                continue
            target = data if item.spec.group is None else data.setdefault(item.spec.group, {})
            target[item.key] = encode(value)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for item in _fields(cls):
            if not item.init:
                continue
            source = data if item.spec.group is None else data.get(item.spec.group) or {}
            if item.key in source:
                values[item.attr] = item.read(source[item.key])
            elif item.default is not _MISSING:
                values[item.attr] = item.read(item.default)
            else:
                raise KeyError(item.key)
        return cls(**values)
