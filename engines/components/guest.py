"""One live instantiation of a decomposed component, and its snapshots.

Instantiating calls no guest function (the components are pre-initialised at build time
and their modules have no start functions; only data, element and global initialisers
run), so restoring is: instantiate afresh, then copy the snapshot's memory, mutable
globals and host state over it. A snapshot carries only the globals that differ from a
fresh instance's (recorded in the plan at prepare time: CPython has about 500, of which
a handful ever change). Tables are rebuilt by instantiation; a snapshot whose tables have
another size cannot be restored (their function references are not data).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import wasmtime

from engines import snapshot as snapshots
from engines.components.plan import HOST_NAMESPACE, ComponentArtifact, HostFunc, Source
from engines.components.wasi import lookup
from engines.components.wasi.abi import Call, GuestTrap
from engines.components.wasi.host import WasiHost
from engines.host import GlobalReader, host_func, linked_globals, new_store
from engines.metering import METER_EXPORT, UNMETERED, Meter
from engines.snapshot import MemorySnapshot

INTEGER_TYPES = ("i32", "i64")
_T = TypeVar("_T")


def _denied(name: str) -> Callable[..., None]:
    def denied(*args: Any) -> None:
        raise GuestTrap(f"Unsupported host capability: {name}")

    return denied


class ComponentGuest:
    """A `GuestInstance`: the component's core instances wired by its plan."""

    def __init__(self, artifact: ComponentArtifact, store: wasmtime.Store, host: WasiHost) -> None:
        self.artifact = artifact
        self.plan = plan = artifact.plan
        self.store = store
        self.host = host
        self._linker = linker = wasmtime.Linker(store.engine)
        self._poisoned = False
        for func, func_type in zip(plan.host, artifact.host_types, strict=True):
            linker.define(
                store,
                HOST_NAMESPACE,
                f"f{func.index}",
                host_func(store, func_type, self._bind(func)),
            )
        self._tables: dict[str, wasmtime.Table] = {}
        memories: list[wasmtime.Memory] = []
        for step, module in zip(plan.steps, artifact.modules, strict=True):
            namespace = f"i{step.instance}"
            # Exports are looked up one by one: listing all of an instance's is slow.
            linker.define_instance(store, namespace, linker.instantiate(store, module))
            for name in step.memories:
                memories.append(_typed(self._item((namespace, name)), wasmtime.Memory))
                self.meter = Meter(store, self._item((namespace, METER_EXPORT)))
                self.meter.remaining = UNMETERED
            for name in step.tables:
                table = _typed(self._item((namespace, name)), wasmtime.Table)
                self._tables[f"{step.instance}/{name}"] = table
        self._global_items: dict[str, wasmtime.Global] = {}
        self._global_reader: GlobalReader | None = None
        self._run = _typed(self._item(plan.entry.call), wasmtime.Func)
        self._realloc = _typed(self._item(plan.entry.realloc), wasmtime.Func)
        post_return = plan.entry.post_return
        self._post_return = (
            None if post_return is None else _typed(self._item(post_return), wasmtime.Func)
        )
        self.memory = _typed(self._item(plan.entry.memory), wasmtime.Memory)
        if len(memories) != 1 or _address(store, memories[0]) != _address(store, self.memory):
            raise wasmtime.WasmtimeError("the plan's state memory is not the one its export uses")
        host.attach(store, self.memory)

    def _item(self, source: Source) -> wasmtime.Func | wasmtime.Memory | Any:
        return self._linker.get(self.store, *source)

    def _bind(self, func: HostFunc) -> Callable[..., Any]:
        """The host callable behind one core import."""
        host = self.host
        if func.drop:
            return functools.partial(host.drop, kind=func.name)
        implementation = lookup(func.interface, func.name)
        if implementation is None:
            return _denied(f"{func.interface}#{func.name}")
        realloc = func.realloc
        call = Call(
            host, None if realloc is None else functools.partial(self._realloc_func, realloc)
        )
        return functools.partial(implementation.handler, call)

    def _realloc_func(self, source: Source) -> wasmtime.Func:
        return _typed(self._item(source), wasmtime.Func)

    def global_item(self, key: str) -> wasmtime.Global:
        """A mutable global by snapshot key (looked up on first use: there are hundreds)."""
        item = self._global_items.get(key)
        if item is None:
            source, _ = self.artifact.globals[key]
            item = self._global_items[key] = _typed(self._item(source), wasmtime.Global)
        return item

    def memory_size(self) -> int:
        """Linear memory bytes (`usage.memoryBytes`)."""
        return int(self.memory.data_len(self.store))

    def call(self, request: bytes) -> bytes:
        """`run(request: list<u8>) -> list<u8>` through the canonical ABI. A trap leaves the
        instance unusable, as a component instance is after one."""
        if self._poisoned:
            raise GuestTrap("cannot enter the guest again: it trapped")
        store, memory = self.store, self.host.memory
        try:
            pointer = int(self._realloc(store, 0, 0, 1, len(request))) if request else 0
            memory.write(pointer, request)
            ret = int(self._run(store, pointer, len(request)))
            out_pointer, out_length = memory.unpack("II", ret)
            response = memory.read(out_pointer, out_length)
            if self._post_return is not None:
                self._post_return(store, ret)
            return response
        except wasmtime.Trap as trap:
            self._poisoned = True
            raise GuestTrap(str(trap), trap.trap_code) from trap
        except BaseException:
            self._poisoned = True
            raise

    # -- snapshots -----------------------------------------------------------------------
    def snapshot(self, into: MemorySnapshot | None) -> MemorySnapshot:
        """Memory, the mutable globals that differ from a fresh instance's and the host's
        state (see `snapshot.capture`)."""
        initial = self.plan.initial_globals
        if self._global_reader is None:
            sources = [source for source, _ in self.artifact.globals.values()]
            handles = linked_globals(self._linker, self.store, sources)
            kinds = [kind for _, kind in self.artifact.globals.values()]
            self._global_reader = GlobalReader(self.store, list(zip(handles, kinds, strict=True)))
        values = {
            key: value
            for key, value in zip(self.artifact.globals, self._global_reader.read(), strict=True)
            if key not in initial or value != initial[key]
        }
        taken = snapshots.capture(self.store, self.memory, values, into)
        taken.extra = {
            "plan": self.plan.id,
            "tables": {key: table.size(self.store) for key, table in self._tables.items()},
            "host": self.host.state(),
        }
        return taken

    def restore(self, snapshot: MemorySnapshot) -> None:
        """Load a snapshot into this fresh, never-called instance (raises ValueError for a
        snapshot of another decomposition or a malformed one)."""
        extra = snapshot.extra
        if extra.get("plan") != self.plan.id:
            raise ValueError("the snapshot was taken with another build of this engine")
        tables = extra.get("tables")
        current = {key: table.size(self.store) for key, table in self._tables.items()}
        if tables != current:
            raise ValueError("the snapshot's tables differ from a fresh instance's")
        for key, value in snapshot.globals.items():
            if key not in self.artifact.globals:
                raise ValueError(f"the snapshot has a global {key!r} this engine does not")
            integer = self.artifact.globals[key][1] in INTEGER_TYPES
            if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
                raise ValueError(f"global {key} has a value of the wrong type")
        self.host.load(extra.get("host"))
        snapshots.load_memory(self.store, self.memory, snapshot)
        for key, value in snapshot.globals.items():
            self.global_item(key).set_value(self.store, value)


def initial_global_values(
    artifact: ComponentArtifact, engine: wasmtime.Engine, memory_bytes: int
) -> dict[str, int | float]:
    """The mutable globals' values in a fresh instance (instantiated here once, with a
    WASI host that has nothing to offer: no guest function runs)."""
    host = WasiHost(mounts=[], stdout=_discard, stderr=_discard)
    store = new_store(engine, memory_bytes=memory_bytes, data=host)
    try:
        guest = ComponentGuest(artifact, store, host)
        return {key: guest.global_item(key).value(store) for key in artifact.globals}
    finally:
        store.close()
        host.close()


def _discard(data: bytes) -> None:
    del data


def _typed(item: object, kind: type[_T]) -> _T:
    if not isinstance(item, kind):
        raise wasmtime.WasmtimeError(f"expected a {kind.__name__}, found {type(item).__name__}")
    return item


def _address(store: wasmtime.Store, memory: wasmtime.Memory) -> int:
    return ctypes.addressof(memory.data_ptr(store).contents)
