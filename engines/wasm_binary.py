"""Reading and rewriting the sections of core Wasm modules (no wasmtime here).

Used to export a module's defined state for snapshots (`export_definitions`) and, for
decomposed components, to point a core module's imports at their real sources
(`rename_imports`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

MAGIC = b"\0asm"
IMPORT_SECTION = 2
TABLE_SECTION = 4
MEMORY_SECTION = 5
GLOBAL_SECTION = 6
EXPORT_SECTION = 7
CODE_SECTION = 10
SECTIONS_AFTER_EXPORTS = frozenset({8, 9, 10, 11, 12})
"""start, element, code, data, data count: the export section goes before these."""

FUNC, TABLE, MEMORY, GLOBAL, TAG = 0, 1, 2, 3, 4
"""Import/export kinds."""
_REFERENCE_TYPES = (0x63, 0x64)
"""`(ref null? ht)`: typed function references, which these helpers do not decode."""


def read_uleb(data: bytes | bytearray, offset: int) -> tuple[int, int]:
    """An unsigned LEB128 at `offset`: (value, offset after it)."""
    result = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, offset


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_name(text: str) -> bytes:
    raw = text.encode()
    return uleb(len(raw)) + raw


def read_name(data: bytes, offset: int) -> tuple[str, int]:
    """A UTF-8 name (length, bytes) at `offset`: (name, offset after it)."""
    length, offset = read_uleb(data, offset)
    return data[offset : offset + length].decode(), offset + length


def _skip_limits(data: bytes, offset: int) -> int:
    """Limits: flags (1: a maximum, 2: shared, 4: 64-bit, 8: a page size follows), minimum,
    maximum, page size."""
    flags = data[offset]
    if flags & ~0x0F:
        raise ValueError(f"unknown limits flags {flags:#x}")
    _, offset = read_uleb(data, offset + 1)
    if flags & 1:
        _, offset = read_uleb(data, offset)
    if flags & 8:
        _, offset = read_uleb(data, offset)
    return offset


def _skip_import_desc(data: bytes, offset: int, kind: int) -> int:
    if kind == FUNC:  # type index
        return read_uleb(data, offset)[1]
    if kind == TABLE:  # reftype + limits
        if data[offset] in _REFERENCE_TYPES:
            raise ValueError("typed function references are not supported")
        return _skip_limits(data, offset + 1)
    if kind == MEMORY:
        return _skip_limits(data, offset)
    if kind == GLOBAL:  # valtype + mutability
        if data[offset] in _REFERENCE_TYPES:
            raise ValueError("typed function references are not supported")
        return offset + 2
    if kind == TAG:  # attribute + type index
        return read_uleb(data, offset + 1)[1]
    raise ValueError(f"unknown import kind {kind}")


def sections(module: bytes) -> list[tuple[int, bytes]]:
    """The module's sections in order as (id, payload)."""
    if module[:4] != MAGIC or module[4:8] != b"\x01\x00\x00\x00":
        raise ValueError("not a core wasm module")
    found: list[tuple[int, bytes]] = []
    offset = 8
    while offset < len(module):
        section_id = module[offset]
        size, start = read_uleb(module, offset + 1)
        if start + size > len(module):
            raise ValueError("truncated section")
        found.append((section_id, module[start : start + size]))
        offset = start + size
    return found


def assemble(header: bytes, parts: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(header)
    for section_id, payload in parts:
        out += bytes([section_id]) + uleb(len(payload)) + payload
    return bytes(out)


@dataclass(frozen=True)
class Import:
    module: str
    name: str
    kind: int
    desc: bytes
    """The raw type description after the kind byte."""


def read_imports(payload: bytes) -> list[Import]:
    count, offset = read_uleb(payload, 0)
    imports = []
    for _ in range(count):
        module, offset = read_name(payload, offset)
        name, offset = read_name(payload, offset)
        kind = payload[offset]
        end = _skip_import_desc(payload, offset + 1, kind)
        imports.append(Import(module, name, kind, payload[offset + 1 : end]))
        offset = end
    return imports


def count_entries(payload: bytes | None) -> int:
    """A vector section's entry count (0 for a section the module lacks)."""
    return 0 if payload is None else read_uleb(payload, 0)[0]


def _has_entries(module: bytes, section_id: int) -> bool:
    return any(sid == section_id and count_entries(body) for sid, body in sections(module))


def defines_memory(module: bytes) -> bool:
    return _has_entries(module, MEMORY_SECTION)


def has_code(module: bytes) -> bool:
    return _has_entries(module, CODE_SECTION)


def rename_imports(module: bytes, rename: Callable[[str, str], tuple[str, str]]) -> bytes:
    """`module` with each import (module, name) renamed to `rename(module, name)`."""
    parts = []
    for section_id, payload in sections(module):
        if section_id == IMPORT_SECTION:
            imports = read_imports(payload)
            body = bytearray(uleb(len(imports)))
            for item in imports:
                new_module, new_name = rename(item.module, item.name)
                body += encode_name(new_module) + encode_name(new_name)
                body += bytes([item.kind]) + item.desc
            payload = bytes(body)
        parts.append((section_id, payload))
    return assemble(module[:8], parts)


GLOBAL_PREFIX = "__g"
MEMORY_PREFIX = "__m"
TABLE_PREFIX = "__t"
_STATE_EXPORT = re.compile(r"^__([gmt])\d+$")


def state_export(name: str) -> str | None:
    """ "global", "memory" or "table" for an export `export_definitions` added, else None."""
    found = _STATE_EXPORT.match(name)
    if found is None:
        return None
    return {"g": "global", "m": "memory", "t": "table"}[found.group(1)]


def _read_exports(payload: bytes) -> list[tuple[str, bytes]]:
    """The export section's entries as (name, encoded entry)."""
    count, offset = read_uleb(payload, 0)
    entries = []
    for _ in range(count):
        begin = offset
        name, offset = read_name(payload, offset)
        _, offset = read_uleb(payload, offset + 1)  # kind byte, then the index
        entries.append((name, payload[begin:offset]))
    return entries


def export_definitions(
    module: bytes,
    *,
    memories: bool = False,
    tables: bool = False,
    keep: Collection[str] | None = None,
) -> bytes:
    """`module` with every defined global exported as `__g<index>` (and, when asked, every
    defined memory as `__m<index>` and table as `__t<index>`; indices count imports).
    `keep`: drop the module's own exports not named in it (nothing outside uses them)."""
    parts = sections(module)
    imported = dict.fromkeys((TABLE, MEMORY, GLOBAL), 0)
    defined = dict.fromkeys((TABLE, MEMORY, GLOBAL), 0)
    kinds = {TABLE_SECTION: TABLE, MEMORY_SECTION: MEMORY, GLOBAL_SECTION: GLOBAL}
    exports: list[tuple[str, bytes]] = []
    for section_id, payload in parts:
        if section_id == IMPORT_SECTION:
            for item in read_imports(payload):
                if item.kind in imported:
                    imported[item.kind] += 1
        elif section_id in kinds:
            defined[kinds[section_id]] = count_entries(payload)
        elif section_id == EXPORT_SECTION:
            exports = _read_exports(payload)
    if keep is not None:
        exports = [(name, entry) for name, entry in exports if name in keep]
    wanted = [(GLOBAL, GLOBAL_PREFIX)]
    if memories:
        wanted.append((MEMORY, MEMORY_PREFIX))
    if tables:
        wanted.append((TABLE, TABLE_PREFIX))
    for kind, prefix in wanted:
        for index in range(imported[kind], imported[kind] + defined[kind]):
            name = f"{prefix}{index}"
            exports.append((name, encode_name(name) + bytes([kind]) + uleb(index)))
    export_section = (EXPORT_SECTION, uleb(len(exports)) + b"".join(e for _, e in exports))
    out: list[tuple[int, bytes]] = []
    placed = False
    for section_id, payload in parts:
        if section_id == EXPORT_SECTION:
            continue
        if not placed and section_id in SECTIONS_AFTER_EXPORTS:
            out.append(export_section)
            placed = True
        out.append((section_id, payload))
    if not placed:
        out.append(export_section)
    return assemble(module[:8], out)
