"""Creating wasmtime engines and stores the way every guest expects them.

All guests run with epoch interruption (fuel is counted inside the module:
`engines.metering`), a linear-memory cap, an empty WASI environment (the effective env
travels in the request envelope), no host file at all (their files are `engines.vfs`
trees served by our WASI hosts), and stdout/stderr captured into `OutputCapture`.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import _func as wasmtime_func

WORKSPACE = "/workspace"
IDLE_EPOCH_DEADLINE = 1 << 62
"""Deadline between executions: effectively never (executions set their own)."""


def make_engine() -> wasmtime.Engine:
    """An engine with the one configuration our compiled modules are keyed by (core
    modules only: components are decomposed into core modules)."""
    config = wasmtime.Config()
    config.epoch_interruption = True
    config.wasm_multi_memory = True  # the fuel counter's memory (engines.metering)
    config.wasm_component_model = False
    return wasmtime.Engine(config)


ENGINE_CONFIG_KEY = "epoch+ticks/v2"
"""Part of the compiled-module cache key: bump when `make_engine` or what
`engines.metering` inserts changes."""


@dataclass
class OutputCapture:
    """Guest stdout/stderr bytes in write order, with the write count (spec 9.2 limits).

    Bytes beyond `byte_cap` are dropped so that a guest flooding output cannot exhaust
    host memory; `overflowed` records that it happened.
    """

    byte_cap: int = 1 << 20
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    writes: int = 0
    total_bytes: int = 0
    overflowed: bool = False
    listener: Callable[[str, bytes], None] | None = None
    """Told of each write as it is captured ("stdout" or "stderr", the bytes kept), for
    output that streams while the guest runs; None when nobody listens."""

    def _write(self, stream: str, target: bytearray, data: bytes) -> None:
        # wasmtime requires the callback to return None (or the byte count).
        self.writes += 1
        self.total_bytes += len(data)
        room = self.byte_cap - len(self.stdout) - len(self.stderr)
        if len(data) > room:
            self.overflowed = True
            data = data[: max(room, 0)]
        target.extend(data)
        if self.listener is not None and data:
            self.listener(stream, bytes(data))

    def on_stdout(self, data: bytes) -> None:
        self._write("stdout", self.stdout, data)

    def on_stderr(self, data: bytes) -> None:
        self._write("stderr", self.stderr, data)

    def reset(self) -> None:
        self.stdout.clear()
        self.stderr.clear()
        self.writes = self.total_bytes = 0
        self.overflowed = False


def make_wasi_store(
    engine: wasmtime.Engine, *, memory_bytes: int, argv: tuple[str, ...], data: object
) -> wasmtime.Store:
    """A store with wasmtime's WASI for what touches no file (`argv`, no env, no
    preopen, no stdio: the preview 1 host in `data` shadows every descriptor call)."""
    wasi = wasmtime.WasiConfig()
    if argv:
        wasi.argv = list(argv)
    wasi.env = []
    store = new_store(engine, memory_bytes=memory_bytes, data=data)
    store.set_wasi(wasi)
    return store


def new_store(engine: wasmtime.Engine, *, memory_bytes: int, data: object = None) -> wasmtime.Store:
    """A store without WASI: the memory cap, the idle epoch deadline; `data` is what
    `Store.data()` returns."""
    store = wasmtime.Store(engine, data)
    store.set_limits(memory_size=memory_bytes)
    store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
    return store


HostHandler = Callable[..., int | None]
"""A host function over i32/i64 parameters (Python ints) with no result or one."""
_HANDLERS: dict[int, tuple[HostHandler, tuple[bool, ...], str | None]] = {}
"""Index -> (handler, which parameters are i64, the result's type)."""
_indices = itertools.count(1)


@ffi.wasmtime_func_unchecked_callback_t  # type: ignore[untyped-decorator]
def _call_unchecked(env: int | None, caller: Any, values: Any, count: int) -> int:
    """Every host function of `host_func`: the parameters are read straight from the raw
    values and the result written back, without wasmtime-py's per-call `Val` conversions.
    An exception becomes a trap that wasmtime-py raises again as that exception (the same
    contract as its own trampoline)."""
    try:
        handler, wide, result = _HANDLERS[env or 0]
        value = handler(*[values[i].i64 if w else values[i].i32 for i, w in enumerate(wide)])
        if result == "i32":
            values[0].i32 = value
        elif result == "i64":
            values[0].i64 = value
        return 0
    except BaseException as error:
        wasmtime_func.LAST_EXCEPTION = error  # type: ignore[assignment]  # raised again by wasmtime-py
        trap = wasmtime.Trap("python exception")._consume()
        return int(ctypes.cast(trap, ctypes.c_void_p).value or 0)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # type: ignore[untyped-decorator]
def _forget(env: int | None) -> None:
    _HANDLERS.pop(env or 0, None)


def host_func(store: wasmtime.Store, functype: wasmtime.FuncType, handler: HostHandler) -> Any:
    """A `wasmtime.Func` calling `handler`: for i32/i64 parameters and at most one result,
    several times cheaper per call than wasmtime-py's own (what a guest's file calls cost
    is mostly this crossing); any other type gets wasmtime-py's own."""
    kinds = [str(valtype) for valtype in functype.params]
    results = [str(valtype) for valtype in functype.results]
    if not set(kinds) <= {"i32", "i64"} or len(results) > 1 or not set(results) <= {"i32", "i64"}:
        return wasmtime.Func(store, functype, handler)
    index = next(_indices)
    _HANDLERS[index] = (
        handler,
        tuple(kind == "i64" for kind in kinds),
        results[0] if results else None,
    )
    raw = ffi.wasmtime_func_t()
    ffi.wasmtime_func_new_unchecked(
        store._context(), functype.ptr(), _call_unchecked, index, _forget, ctypes.byref(raw)
    )
    return wasmtime.Func._from_raw(raw)


_VALUE_FIELDS = {
    "i32": (ffi.WASMTIME_I32.value, "i32"),
    "i64": (ffi.WASMTIME_I64.value, "i64"),
    "f32": (ffi.WASMTIME_F32.value, "f32"),
    "f64": (ffi.WASMTIME_F64.value, "f64"),
}


def linked_globals(
    linker: wasmtime.Linker, store: wasmtime.Store, sources: Iterable[tuple[str, str]]
) -> list[Any]:
    """The globals `linker` defines under each (module, name) of `sources`, as wasmtime's
    C handles for `GlobalReader` (`Linker.get` copies both names into new buffers and
    wraps what it finds: 16 µs a global, 8 ms for Python's 493 at each session's first
    snapshot). LookupError for a name that is not a global."""
    get, context, linker_pointer = ffi.dll.wasmtime_linker_get, store._context(), linker.ptr()
    found: list[Any] = []
    for module, name in sources:
        module_bytes, name_bytes = module.encode(), name.encode()
        item = ffi.wasmtime_extern_t()
        linked = get(
            linker_pointer,
            context,
            module_bytes,
            len(module_bytes),
            name_bytes,
            len(name_bytes),
            ctypes.byref(item),
        )
        kind = item.kind
        if not linked or kind != ffi.WASMTIME_EXTERN_GLOBAL.value:  # type: ignore[comparison-overlap]  # an int when read
            raise LookupError(f"no global {module}.{name} in the linker")
        found.append(item.of.global_)  # a view that keeps `item` alive
    return found


_GLOBAL_GET = ctypes.CDLL(ffi.dll._name).wasmtime_global_get
"""`wasmtime_global_get` without declared argument types: ctypes then passes the pointers
`GlobalReader` holds as they are, instead of checking each against its type (Python's
493 globals, read back to back: 0.53 -> 0.22 ms)."""
_GLOBAL_GET.restype = None


class GlobalReader:
    """Reads numeric globals of one store through wasmtime's C API, a call each.
    wasmtime-py's `Global.value` makes three calls and two objects per read: for
    Python's ~500 mutable globals that was 3-10 ms of every snapshot."""

    def __init__(self, store: wasmtime.Store, items: list[tuple[Any, str]]) -> None:
        """`items`: each global's C handle (`linked_globals`) with its value type (`i32`,
        `i64`, `f32` or `f64`)."""
        self._store = store
        self._raw = ffi.wasmtime_val_t()
        self._out = ctypes.byref(self._raw)
        self._union = self._raw.of  # shares the value's buffer
        self._items = [(ctypes.byref(handle), *_VALUE_FIELDS[kind]) for handle, kind in items]

    def read(self) -> list[int | float]:
        """The value of each global, in order."""
        context, get = self._store._context(), _GLOBAL_GET
        raw, out, union = self._raw, self._out, self._union
        values: list[int | float] = []
        for pointer, kind, name in self._items:
            get(context, pointer, out)
            if raw.kind != kind:  # type: ignore[comparison-overlap]  # an int when read
                raise TypeError(f"a global is not of the type its module declares ({name})")
            values.append(getattr(union, name))
        return values
