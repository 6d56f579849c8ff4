"""Linear-memory snapshots of core-module guests (Perl, Ruby).

A core module keeps its interpreter state in linear memory plus a few mutable globals
(the stack pointer, among others). The builds we use do not export their globals, so at
prepare time `export_globals` rewrites the module to export each defined global as
`__g<index>`. A snapshot is then the memory bytes, those globals and whatever host-side
state the adapter keeps (`extra`); restoring copies them into a fresh instance whose
initialisers were not run (spec 7.7, restore recipe).

Taking a snapshot again into the previous one of the same context compares 1 MiB chunks
in place (memcmp) and copies only those that changed, recording them in `dirty_chunks`
so storage can rewrite just those: a run typically touches a few chunks of 32-65 MiB.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import wasmtime

PAGE_BYTES = 65536
CHUNK_BYTES = 1 << 20
GLOBAL_PREFIX = "__g"

_libc = ctypes.CDLL(None)
_memcmp = _libc.memcmp
_memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_memcmp.restype = ctypes.c_int
_ZERO_CHUNK = bytes(CHUNK_BYTES)


@dataclass
class MemorySnapshot:
    memory: bytes | bytearray
    globals: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    dirty_chunks: set[int] = field(default_factory=set)
    """1 MiB chunks changed since the snapshot was last stored (all, when new)."""

    @property
    def pages(self) -> int:
        return len(self.memory) // PAGE_BYTES

    @property
    def chunk_count(self) -> int:
        return (len(self.memory) + CHUNK_BYTES - 1) // CHUNK_BYTES


def _address(buffer: bytes | bytearray) -> int:
    if isinstance(buffer, bytearray):
        return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
    return ctypes.cast(ctypes.c_char_p(buffer), ctypes.c_void_p).value or 0


def _memory_address(store: wasmtime.Store, memory: wasmtime.Memory) -> int:
    return ctypes.addressof(memory.data_ptr(store).contents)


def nonzero_pages(memory: bytes | bytearray) -> list[bool]:
    """For each 64 KiB page: whether it holds any non-zero byte."""
    source = _address(memory)
    zero = _address(_ZERO_CHUNK)
    return [
        _memcmp(source + page * PAGE_BYTES, zero, PAGE_BYTES) != 0
        for page in range(len(memory) // PAGE_BYTES)
    ]


def _read_uleb(data: bytes | bytearray, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, offset


def _uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _skip_limits(data: bytes, offset: int) -> int:
    flags = data[offset]
    offset += 1
    _, offset = _read_uleb(data, offset)
    if flags & 1:
        _, offset = _read_uleb(data, offset)
    return offset


def _count_imported_globals(payload: bytes) -> int:
    count, offset = _read_uleb(payload, 0)
    globals_seen = 0
    for _ in range(count):
        for _name in range(2):  # module name, field name
            length, offset = _read_uleb(payload, offset)
            offset += length
        kind = payload[offset]
        offset += 1
        if kind == 0:  # function: type index
            _, offset = _read_uleb(payload, offset)
        elif kind == 1:  # table: reftype + limits
            offset = _skip_limits(payload, offset + 1)
        elif kind == 2:  # memory: limits
            offset = _skip_limits(payload, offset)
        elif kind == 3:  # global: valtype + mutability
            offset += 2
            globals_seen += 1
        elif kind == 4:  # tag: attribute + type index
            _, offset = _read_uleb(payload, offset + 1)
        else:
            raise ValueError(f"unknown import kind {kind}")
    return globals_seen


def export_globals(module: bytes) -> bytes:
    """Return `module` with every defined global exported as `__g<index>`."""
    if module[:4] != b"\0asm":
        raise ValueError("not a core wasm module")
    sections: list[tuple[int, bytes]] = []
    offset = 8
    imported = defined = 0
    while offset < len(module):
        section_id = module[offset]
        size, start = _read_uleb(module, offset + 1)
        payload = module[start : start + size]
        sections.append((section_id, payload))
        offset = start + size
        if section_id == 2:
            imported = _count_imported_globals(payload)
        elif section_id == 6:
            defined, _ = _read_uleb(payload, 0)
    out = bytearray(module[:8])
    for section_id, payload in sections:
        if section_id == 7:
            count, rest = _read_uleb(payload, 0)
            extra = b"".join(
                _uleb(len(name)) + name.encode() + b"\x03" + _uleb(index)
                for index in range(imported, imported + defined)
                for name in [f"{GLOBAL_PREFIX}{index}"]
            )
            payload = _uleb(count + defined) + payload[rest:] + extra
        out += bytes([section_id]) + _uleb(len(payload)) + payload
    return bytes(out)


def take(
    store: wasmtime.Store, instance: wasmtime.Instance, into: MemorySnapshot | None = None
) -> MemorySnapshot:
    """Copy the instance's memory and exported mutable globals.

    With `into` (the previous snapshot of this instance's state), update it in place:
    only changed chunks are copied and added to its `dirty_chunks`.
    """
    exports = instance.exports(store)
    memory = exports["memory"]
    assert isinstance(memory, wasmtime.Memory)
    length = memory.data_len(store)
    source = _memory_address(store, memory)
    values: dict[str, Any] = {}
    for name, item in exports.items():
        if not (name.startswith(GLOBAL_PREFIX) and isinstance(item, wasmtime.Global)):
            continue
        if item.type(store).mutable:
            values[name] = item.value(store)
    if into is None:
        snapshot = MemorySnapshot(memory=ctypes.string_at(source, length), globals=values)
        snapshot.dirty_chunks = set(range(snapshot.chunk_count))
        return snapshot
    buffer = into.memory if isinstance(into.memory, bytearray) else bytearray(into.memory)
    old_length = len(buffer)
    if length > old_length:
        buffer.extend(bytes(length - old_length))
    elif length < old_length:  # linear memory never shrinks; a smaller one is another state
        del buffer[length:]
    target = _address(buffer)
    for chunk in range((length + CHUNK_BYTES - 1) // CHUNK_BYTES):
        offset = chunk * CHUNK_BYTES
        size = min(CHUNK_BYTES, length - offset)
        if offset + size > old_length or _memcmp(source + offset, target + offset, size) != 0:
            ctypes.memmove(target + offset, source + offset, size)
            into.dirty_chunks.add(chunk)
    into.memory = buffer
    into.globals = values
    return into


def restore(store: wasmtime.Store, instance: wasmtime.Instance, snapshot: MemorySnapshot) -> None:
    """Copy a snapshot into a fresh instance (its initialisers must not have run)."""
    exports = instance.exports(store)
    memory = exports["memory"]
    assert isinstance(memory, wasmtime.Memory)
    initial = memory.data_len(store)
    missing_pages = snapshot.pages - initial // PAGE_BYTES
    if missing_pages > 0:
        memory.grow(store, missing_pages)
    target = _memory_address(store, memory)
    source = _address(snapshot.memory)
    zero = _address(_ZERO_CHUNK)
    for chunk in range(snapshot.chunk_count):
        offset = chunk * CHUNK_BYTES
        size = min(CHUNK_BYTES, len(snapshot.memory) - offset)
        # Memory grown past the module's initial size is already zero.
        if offset >= initial and _memcmp(source + offset, zero, size) == 0:
            continue
        ctypes.memmove(target + offset, source + offset, size)
    for name, value in snapshot.globals.items():
        item = exports[name]
        assert isinstance(item, wasmtime.Global)
        item.set_value(store, value)
