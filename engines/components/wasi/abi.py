"""The canonical ABI as seen from a lowered import: guest memory, results and the registry
of host implementations with their core signatures.

Every pointer a guest passes is bounds-checked against its linear memory and every
string must be UTF-8; a violation is a `GuestTrap`, as in a component runtime.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wasmtime

if TYPE_CHECKING:
    from engines.components.wasi.host import WasiHost

U64_MASK = (1 << 64) - 1


class GuestTrap(wasmtime.WasmtimeError):
    """The guest trapped, or broke a rule of the component model (an unknown handle, a
    pointer out of bounds, invalid UTF-8). `trap_code` is set for Wasm traps."""

    def __init__(self, message: str, trap_code: wasmtime.TrapCode | None = None) -> None:
        super().__init__(message)
        self.trap_code = trap_code


class GuestExit(wasmtime.ExitTrap):
    """The guest called `wasi:cli/exit#exit`."""

    def __init__(self, code: int) -> None:
        wasmtime.WasmtimeError.__init__(self, f"Exited with i32 exit status {code}")
        self.code = code


def u64(value: int) -> int:
    """An i64 core value read as the u64 it carries."""
    return value & U64_MASK


def i64(value: int) -> int:
    """A u64 as the i64 core value that carries it."""
    value &= U64_MASK
    return value - (1 << 64) if value >= 1 << 63 else value


class GuestMemory:
    """The guest's linear memory (its base is read on every access: it may move), or, while
    `pin`ned by a host call that runs no guest code (so the memory cannot grow), read once."""

    def __init__(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        self.store = store
        self.memory = memory
        self._pinned: tuple[int, int] | None = None

    def size(self) -> int:
        return int(self.memory.data_len(self.store))

    def pin(self) -> None:
        self._pinned = (ctypes.addressof(self.memory.data_ptr(self.store).contents), self.size())

    def unpin(self) -> None:
        self._pinned = None

    def _address(self, ptr: int, length: int) -> int:
        if self._pinned is None:
            base, size = ctypes.addressof(self.memory.data_ptr(self.store).contents), self.size()
        else:
            base, size = self._pinned
        if ptr < 0 or length < 0 or ptr + length > size:
            raise GuestTrap(f"guest pointer {ptr:#x}+{length} is out of bounds")
        return base + ptr

    def read(self, ptr: int, length: int) -> bytes:
        address = self._address(ptr, length)
        return ctypes.string_at(address, length) if length else b""

    def write(self, ptr: int, data: bytes | memoryview) -> None:
        """Copy `data` in (a memoryview must be writable: it is copied without a copy of
        its own)."""
        address = self._address(ptr, len(data))
        if not data:
            return
        if isinstance(data, memoryview):
            ctypes.memmove(address, ctypes.addressof(ctypes.c_char.from_buffer(data)), len(data))
        else:
            ctypes.memmove(address, data, len(data))

    def pack(self, fmt: str, ptr: int, *values: Any) -> None:
        self.write(ptr, struct.pack("<" + fmt, *values))

    def unpack(self, fmt: str, ptr: int) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.read(ptr, struct.calcsize("<" + fmt)))

    def string(self, ptr: int, length: int) -> str:
        try:
            return self.read(ptr, length).decode("utf-8")
        except UnicodeDecodeError:
            raise GuestTrap("the guest passed a string that is not UTF-8") from None


class MemoryUser:
    """A host whose calls read and write one guest's memory, bound after instantiation."""

    _memory: GuestMemory | None = None

    def attach(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        self._memory = GuestMemory(store, memory)

    @property
    def memory(self) -> GuestMemory:
        if self._memory is None:
            raise GuestTrap("the WASI host is not attached to a guest")
        return self._memory

    def close(self) -> None:
        """Close every handle the guest holds (the instance is going away)."""


class Call:
    """What a lowered import works with: the host, guest memory and the lowering's
    `realloc` (for results that return lists or strings)."""

    def __init__(self, host: WasiHost, realloc: Callable[[], wasmtime.Func] | None) -> None:
        self.host = host
        self._realloc_source = realloc
        self._realloc: wasmtime.Func | None = None

    @property
    def memory(self) -> GuestMemory:
        return self.host.memory

    def alloc(self, size: int, align: int) -> int:
        """`size` bytes of guest memory from the guest's own allocator."""
        if self._realloc is None:
            if self._realloc_source is None:
                raise GuestTrap("this import was lowered without a realloc")
            self._realloc = self._realloc_source()
        store = self.host.store
        assert store is not None, "the WASI host is attached before the guest runs"
        ptr = int(self._realloc(store, 0, 0, align, size))
        self.memory.read(ptr, size)  # bounds check of what the guest handed back
        return ptr

    def bytes_out(self, data: bytes) -> tuple[int, int]:
        """Copy `data` into guest memory: (pointer, length)."""
        ptr = self.alloc(len(data), 1) if data else 0
        self.memory.write(ptr, data)
        return ptr, len(data)

    def string_out(self, text: str) -> tuple[int, int]:
        return self.bytes_out(text.encode())


Handler = Callable[..., Any]


@dataclass(frozen=True)
class HostImport:
    handler: Handler
    params: str
    """The core parameter types, one letter each: i (i32), I (i64), f (f32), F (f64)."""
    results: str


IMPORTS: dict[str, HostImport] = {}
"""`interface#function` (interface without its version) -> implementation."""


def implements(*names: str, params: str, results: str = "") -> Callable[[Handler], Handler]:
    """Register a handler for the lowered imports `names` with this core signature."""

    def register(handler: Handler) -> Handler:
        for name in names:
            IMPORTS[name] = HostImport(handler, params, results)
        return handler

    return register


VALTYPE_LETTERS = {"i32": "i", "i64": "I", "f32": "f", "f64": "F"}


def core_signature(functype: wasmtime.FuncType) -> tuple[str, str]:
    """(params, results) of a core function type in the registry's letters."""

    def letters(types: list[wasmtime.ValType]) -> str:
        try:
            return "".join(VALTYPE_LETTERS[str(valtype)] for valtype in types)
        except KeyError as error:
            raise ValueError(f"unsupported core value type {error}") from None

    return letters(functype.params), letters(functype.results)


def functype(params: str, results: str) -> wasmtime.FuncType:
    """The core function type for registry letters."""
    make = {
        "i": wasmtime.ValType.i32,
        "I": wasmtime.ValType.i64,
        "f": wasmtime.ValType.f32,
        "F": wasmtime.ValType.f64,
    }
    return wasmtime.FuncType([make[c]() for c in params], [make[c]() for c in results])
