"""Fuel in the reference's units: a tick at every function entry and every loop header.

The reference meters its engines by rewriting them with Binaryen at build time: one unit
at each function entry and each loop header (spec 9.2). `instrument` makes the same
rewrite of a core module at prepare time, with the counter inside the module rather than
a host call per tick: the ticks left, an i64 in a one-page memory of the counter's own
(a memory, not a global, so that the modules of a linked component can import it without
renumbering anything; no guest instruction addresses it). Each tick traps (`unreachable`)
when the counter is 0 and otherwise takes one from it, so a budget of N allows exactly N
ticks, and a fresh counter (0) allows none until the host sets a budget. The host sets the
counter before a call and reads it after; a trap with the counter at 0 is fuel exhaustion.

Only the decoding needed to find loops is done, but every instruction's immediates must
be skipped exactly (an immediate byte can look like a `loop` opcode), so an opcode we do
not know (the GC proposal's, for one) refuses the module rather than guess.
"""

from __future__ import annotations

import wasmtime

from engines.wasm_binary import (
    CODE_SECTION,
    EXPORT_SECTION,
    IMPORT_SECTION,
    MEMORY,
    MEMORY_SECTION,
    assemble,
    count_entries,
    encode_name,
    read_imports,
    read_name,
    read_uleb,
    sections,
    uleb,
)

METER_EXPORT = "sandbox_workbench_fuel"
"""The counter's export name."""
UNMETERED = (1 << 62) - 1
"""A budget that never runs out, for an interpreter's start-up."""
_ONE_PAGE = b"\x01\x01\x01"
"""Memory limits: exactly one 64 KiB page."""
_SECTION_ORDER = (1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11)
"""Section ids in the order the binary format requires (custom sections aside)."""
_OFFSET_SECTIONS = (".debug_", "metadata.code.", "sourceMappingURL")
"""Custom sections that point into the code by offset: stale once ticks are inserted."""
_START_SECTION = 8

# Immediate kinds, one per opcode.
(
    _NONE,
    _LEB,
    _TWO_INDICES,
    _BLOCK,
    _LOOP,
    _BR_TABLE,
    _MEMARG,
    _BYTES4,
    _BYTES8,
    _SELECT_TYPES,
    _HEAP_TYPE,
    _TRY_TABLE,
    _PREFIX_FC,
    _PREFIX_FD,
    _PREFIX_FE,
    _UNKNOWN,
) = range(16)


def _opcode_table() -> list[int]:
    table = [_UNKNOWN] * 256
    for opcode in (0x00, 0x01, 0x05, 0x0A, 0x0B, 0x0F, 0x19, 0x1A, 0x1B, 0xD1, 0xD3, 0xD4):
        table[opcode] = _NONE  # unreachable nop else throw_ref end return catch_all drop ...
    for opcode in range(0x45, 0xC5):  # numeric and sign-extension instructions
        table[opcode] = _NONE
    for opcode in (0x02, 0x04, 0x06):  # block if try
        table[opcode] = _BLOCK
    table[0x03] = _LOOP
    # catch throw rethrow br br_if call return_call call_ref return_call_ref delegate,
    # local/global get/set/tee, table.get/set, memory.size/grow, ref.func, br_on_(non_)null
    for opcode in (0x07, 0x08, 0x09, 0x0C, 0x0D, 0x10, 0x12, 0x14, 0x15, 0x18):
        table[opcode] = _LEB
    for opcode in (*range(0x20, 0x27), 0x3F, 0x40, 0xD2, 0xD5, 0xD6):
        table[opcode] = _LEB
    table[0x0E] = _BR_TABLE
    table[0x11] = table[0x13] = _TWO_INDICES  # call_indirect, return_call_indirect
    table[0x1C] = _SELECT_TYPES
    table[0x1F] = _TRY_TABLE
    for opcode in range(0x28, 0x3F):  # loads and stores
        table[opcode] = _MEMARG
    table[0x41] = table[0x42] = _LEB  # i32.const i64.const
    table[0x43] = _BYTES4
    table[0x44] = _BYTES8
    table[0xD0] = _HEAP_TYPE  # ref.null
    table[0xFC] = _PREFIX_FC
    table[0xFD] = _PREFIX_FD
    table[0xFE] = _PREFIX_FE
    return table


_OPCODES = _opcode_table()
_FC_INDICES = {8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2, 15: 1, 16: 1, 17: 1}
"""0xFC sub-opcodes with index immediates (0 to 7, the saturating truncations, and 19 to
22, wide arithmetic, have none)."""
_FC_LAST = 22
_FD_LAST = 0x113
"""SIMD and relaxed SIMD; beyond them (FP16, say) immediates are not known here. An
unassigned sub-opcode below it makes the module invalid whatever is inserted."""
_FE_KNOWN = frozenset(range(0x00, 0x04)) | frozenset(range(0x10, 0x4F))
"""Atomics: notify, waits, fence, then loads, stores and read-modify-writes (memargs)."""
_FD_MEMARG = frozenset(range(0, 12)) | {92, 93}
_FD_MEMARG_LANE = frozenset(range(84, 92))
_FD_LANE = frozenset(range(21, 35))
_FD_BYTES16 = frozenset({12, 13})  # v128.const, i8x16.shuffle
_REFERENCE_PREFIXES = (0x63, 0x64)
"""`(ref null? heaptype)` value types: the byte is followed by a heap type."""


def _skip_leb(data: bytes, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def _skip_value_type(data: bytes, pos: int) -> int:
    if data[pos] in _REFERENCE_PREFIXES:
        return _skip_leb(data, pos + 1)
    return pos + 1


def _skip_block_type(data: bytes, pos: int) -> int:
    """0x40, a value type, or a type index (a signed LEB)."""
    if data[pos] in _REFERENCE_PREFIXES:
        return _skip_leb(data, pos + 1)
    return _skip_leb(data, pos)


def _skip_memarg(data: bytes, pos: int) -> int:
    align, pos = read_uleb(data, pos)
    if align & 0x40:  # multi-memory: a memory index follows
        pos = _skip_leb(data, pos)
    return _skip_leb(data, pos)


def tick(memory: int) -> bytes:
    """One unit: trap if the counter (at address 0 of `memory`) is 0, else take one from it."""
    memarg = (b"\x43" + uleb(memory) if memory else b"\x03") + b"\x00"  # 8-aligned, offset 0
    load = b"\x41\x00\x29" + memarg  # i32.const 0; i64.load
    return (
        load + b"\x50\x04\x40\x00\x0b"  # i64.eqz; if; unreachable; end
        b"\x41\x00" + load + b"\x42\x01\x7d\x37" + memarg  # i64.const 1; i64.sub; i64.store
    )


def _metered_body(body: bytes, tick_code: bytes) -> bytes:
    """One function body with a tick after its locals and after each loop's block type."""
    groups, pos = read_uleb(body, 0)
    for _ in range(groups):
        pos = _skip_value_type(body, _skip_leb(body, pos))
    out = bytearray(body[:pos])
    out += tick_code
    copied = pos
    end = len(body)
    opcodes = _OPCODES
    while pos < end:
        opcode = body[pos]
        pos += 1
        kind = opcodes[opcode]
        if kind == _NONE:
            continue
        if kind == _LEB:  # an index, a label or a constant
            pos = _skip_leb(body, pos)
        elif kind == _MEMARG:
            pos = _skip_memarg(body, pos)
        elif kind == _BLOCK:
            pos = _skip_block_type(body, pos)
        elif kind == _LOOP:
            pos = _skip_block_type(body, pos)
            out += body[copied:pos]
            out += tick_code
            copied = pos
        elif kind == _TWO_INDICES:
            pos = _skip_leb(body, _skip_leb(body, pos))
        elif kind == _BR_TABLE:
            count, pos = read_uleb(body, pos)
            for _ in range(count + 1):
                pos = _skip_leb(body, pos)
        elif kind == _BYTES4:
            pos += 4
        elif kind == _BYTES8:
            pos += 8
        elif kind == _SELECT_TYPES:
            count, pos = read_uleb(body, pos)
            for _ in range(count):
                pos = _skip_value_type(body, pos)
        elif kind == _HEAP_TYPE:
            pos = _skip_leb(body, pos)
        elif kind == _TRY_TABLE:
            pos = _skip_block_type(body, pos)
            count, pos = read_uleb(body, pos)
            for _ in range(count):
                catch_kind = body[pos]
                pos += 1
                if catch_kind in (0, 1):  # catch, catch_ref: a tag index
                    pos = _skip_leb(body, pos)
                pos = _skip_leb(body, pos)  # the label
        elif kind == _PREFIX_FC:
            sub, pos = read_uleb(body, pos)
            if sub > _FC_LAST:
                raise ValueError(f"unknown instruction 0xfc {sub}")
            for _ in range(_FC_INDICES.get(sub, 0)):
                pos = _skip_leb(body, pos)
        elif kind == _PREFIX_FD:
            sub, pos = read_uleb(body, pos)
            if sub > _FD_LAST:
                raise ValueError(f"unknown instruction 0xfd {sub}")
            if sub in _FD_MEMARG:
                pos = _skip_memarg(body, pos)
            elif sub in _FD_MEMARG_LANE:
                pos = _skip_memarg(body, pos) + 1
            elif sub in _FD_LANE:
                pos += 1
            elif sub in _FD_BYTES16:
                pos += 16
        elif kind == _PREFIX_FE:
            sub, pos = read_uleb(body, pos)
            if sub not in _FE_KNOWN:
                raise ValueError(f"unknown instruction 0xfe {sub}")
            pos = pos + 1 if sub == 0x03 else _skip_memarg(body, pos)  # atomic.fence: 0x00
        else:
            raise ValueError(f"unknown instruction 0x{opcode:02x} at byte {pos - 1} of a body")
    if pos != end:
        raise ValueError("a function body ends inside an instruction")
    out += body[copied:]
    return bytes(out)


def _metered_code(payload: bytes, tick_code: bytes) -> bytes:
    count, pos = read_uleb(payload, 0)
    out = bytearray(uleb(count))
    for _ in range(count):
        size, pos = read_uleb(payload, pos)
        body = _metered_body(payload[pos : pos + size], tick_code)
        out += uleb(len(body)) + body
        pos += size
    return bytes(out)


def _with_entry(payload: bytes | None, entry: bytes) -> bytes:
    """A vector section's payload with one more entry at its end."""
    if payload is None:
        return uleb(1) + entry
    count, pos = read_uleb(payload, 0)
    return uleb(count + 1) + payload[pos:] + entry


def instrument(module: bytes, counter_from: tuple[str, str] | None = None) -> bytes:
    """`module` with fuel ticks. The counter is a one-page memory of its own that the
    module defines and exports as `METER_EXPORT`, or, given `counter_from` (an import's
    module and name), imports: so several linked modules can share one budget."""
    parts = sections(module)
    found = {section_id: payload for section_id, payload in parts if section_id != 0}
    imported_memories = sum(
        1 for item in read_imports(found.get(IMPORT_SECTION, b"\0")) if item.kind == MEMORY
    )
    defined_memories = count_entries(found.get(MEMORY_SECTION))
    counter = imported_memories + defined_memories
    if encode_name(METER_EXPORT) in found.get(EXPORT_SECTION, b""):
        raise ValueError("the module is metered already")
    replaced: dict[int, bytes] = {}
    if counter_from is None:
        if _START_SECTION in found:  # it would run before a budget can be set: trap
            raise ValueError("a module with a start function cannot own the counter")
        replaced[MEMORY_SECTION] = _with_entry(found.get(MEMORY_SECTION), _ONE_PAGE)
        counter_export = encode_name(METER_EXPORT) + bytes([MEMORY]) + uleb(counter)
        replaced[EXPORT_SECTION] = _with_entry(found.get(EXPORT_SECTION), counter_export)
    else:
        if defined_memories:  # an import would renumber them
            raise ValueError("a module that defines memories cannot import the counter")
        counter_import = encode_name(counter_from[0]) + encode_name(counter_from[1])
        counter_import += bytes([MEMORY]) + _ONE_PAGE
        replaced[IMPORT_SECTION] = _with_entry(found.get(IMPORT_SECTION), counter_import)
    if CODE_SECTION in found:
        replaced[CODE_SECTION] = _metered_code(found[CODE_SECTION], tick(counter))
    out: list[tuple[int, bytes]] = []
    for section_id, payload in parts:
        if section_id == 0:
            if not read_name(payload, 0)[0].startswith(_OFFSET_SECTIONS):
                out.append((section_id, payload))
            continue
        for missing in [key for key in replaced if _before(key, section_id)]:
            out.append((missing, replaced.pop(missing)))
        out.append((section_id, replaced.pop(section_id, payload)))
    out.extend(sorted(replaced.items(), key=lambda item: _SECTION_ORDER.index(item[0])))
    return assemble(module[:8], out)


def _before(new_id: int, existing_id: int) -> bool:
    """Whether a section `new_id` the module lacks goes before section `existing_id`."""
    return _SECTION_ORDER.index(new_id) < _SECTION_ORDER.index(existing_id)


class Meter:
    """An instrumented instance's counter: the ticks left."""

    def __init__(self, store: wasmtime.Store, memory: object) -> None:
        if not isinstance(memory, wasmtime.Memory):
            raise wasmtime.WasmtimeError("the engine module is not metered: prepare it again")
        self._store = store
        self._memory = memory

    @property
    def remaining(self) -> int:
        return int.from_bytes(self._memory.read(self._store, 0, 8), "little")

    @remaining.setter
    def remaining(self, ticks: int) -> None:
        self._memory.write(self._store, ticks.to_bytes(8, "little"), 0)
