"""Linear-memory snapshots of core-module guests (Perl and Ruby; Python and JavaScript
through `engines.decomposed`).

A core module keeps its interpreter state in linear memory plus a few mutable globals
(the stack pointer, among others). The builds we use do not export their globals, so at
prepare time `export_globals` rewrites the module to export each defined global as
`__g<index>`. A snapshot is then the memory bytes, those globals and whatever host-side
state the adapter keeps (`extra`); restoring copies them into a fresh instance whose
initialisers were not run (spec 7.7, restore recipe).

Taking a snapshot again into the previous one of the same context compares 1 MiB chunks
in place (memcmp), then the 4 KiB blocks of those that differ, and copies only the
changed blocks, recording them in `changed_blocks`: a run typically changes a few
hundred KiB of 32-65 MiB.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import wasmtime

from engines.wasm_binary import GLOBAL_PREFIX, export_definitions

PAGE_BYTES = 65536
CHUNK_BYTES = 1 << 20
BLOCK_BYTES = 4096

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
    changed_blocks: set[int] = field(default_factory=set)
    """4 KiB blocks changed since they were last sent elsewhere (all, when new): a run
    typically changes a few hundred KiB spread over many chunks, so copies between
    processes travel by block."""

    @property
    def pages(self) -> int:
        return len(self.memory) // PAGE_BYTES


@dataclass
class SnapshotDelta:
    """The 4 KiB blocks of a guest's memory changed since the snapshot was last stored
    (all of them for a first snapshot), by index, with the memory's length, globals and
    host state: what the host keeps of a guest's memory when it keeps no copy of it."""

    length: int
    blocks: dict[int, memoryview]
    globals: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


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


def export_globals(module: bytes) -> bytes:
    """Return `module` with every defined global exported as `__g<index>`."""
    return export_definitions(module)


def capture(
    store: wasmtime.Store,
    memory: wasmtime.Memory,
    values: dict[str, Any],
    into: MemorySnapshot | None = None,
) -> MemorySnapshot:
    """A snapshot of `memory` with the globals' `values`.

    With `into` (the previous snapshot of this instance's state), update it in place:
    only changed blocks are copied and added to its `changed_blocks`.
    """
    length = memory.data_len(store)
    source = _memory_address(store, memory)
    if into is None:  # a bytearray: the next snapshot updates it in place
        buffer = bytearray(length)
        ctypes.memmove(_address(buffer), source, length)
        snapshot = MemorySnapshot(memory=buffer, globals=values)
        snapshot.changed_blocks = set(range((length + BLOCK_BYTES - 1) // BLOCK_BYTES))
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
            _copy_changed(source, target, offset, offset + size, old_length, into.changed_blocks)
    into.memory = buffer
    into.globals = values
    return into


def _copy_changed(
    source: int, target: int, start: int, end: int, old_length: int, changed: set[int]
) -> None:
    """Copy the 4 KiB blocks of [start, end) that differ, narrowing down through 64 KiB
    pages first (a run changes a few hundred KiB spread thinly over many chunks, and each
    comparison here is a call from Python)."""
    for page in range(start, end, PAGE_BYTES):
        page_end = min(page + PAGE_BYTES, end)
        fresh = page_end > old_length
        if not fresh and _memcmp(source + page, target + page, page_end - page) == 0:
            continue
        for block in range(page, page_end, BLOCK_BYTES):
            width = min(BLOCK_BYTES, page_end - block)
            if fresh or _memcmp(source + block, target + block, width) != 0:
                ctypes.memmove(target + block, source + block, width)
                changed.add(block // BLOCK_BYTES)


def load_memory(store: wasmtime.Store, memory: wasmtime.Memory, snapshot: MemorySnapshot) -> None:
    """Copy a snapshot's bytes into the memory of a fresh instance.

    Only 64 KiB pages that differ are written: the fresh image is mapped copy-on-write
    from the compiled module, so pages left alone cost neither a copy nor memory, and
    memory grown past the initial size is already zero.
    """
    if len(snapshot.memory) % PAGE_BYTES:
        raise ValueError("snapshot memory is not a whole number of pages")
    initial = memory.data_len(store)
    if len(snapshot.memory) < initial:
        raise ValueError("snapshot memory is smaller than a fresh instance's")
    missing_pages = snapshot.pages - initial // PAGE_BYTES
    if missing_pages > 0:
        memory.grow(store, missing_pages)
    target = _memory_address(store, memory)
    source = _address(snapshot.memory)
    zero = _address(_ZERO_CHUNK)
    for offset in range(0, len(snapshot.memory), PAGE_BYTES):
        current = target + offset if offset < initial else zero
        if _memcmp(source + offset, current, PAGE_BYTES) != 0:
            ctypes.memmove(target + offset, source + offset, PAGE_BYTES)


def take(
    store: wasmtime.Store, instance: wasmtime.Instance, into: MemorySnapshot | None = None
) -> MemorySnapshot:
    """Copy the instance's memory and exported mutable globals (see `capture`)."""
    exports = instance.exports(store)
    memory = exports["memory"]
    assert isinstance(memory, wasmtime.Memory)
    values: dict[str, Any] = {}
    for name, item in exports.items():
        if not (name.startswith(GLOBAL_PREFIX) and isinstance(item, wasmtime.Global)):
            continue
        if item.type(store).mutable:
            values[name] = item.value(store)
    return capture(store, memory, values, into)


def restore(store: wasmtime.Store, instance: wasmtime.Instance, snapshot: MemorySnapshot) -> None:
    """Copy a snapshot into a fresh instance (its initialisers must not have run)."""
    exports = instance.exports(store)
    memory = exports["memory"]
    assert isinstance(memory, wasmtime.Memory)
    load_memory(store, memory, snapshot)
    for name, value in snapshot.globals.items():
        item = exports[name]
        assert isinstance(item, wasmtime.Global)
        item.set_value(store, value)
