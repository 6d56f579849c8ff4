"""`engines.host.GlobalReader`: snapshots read hundreds of globals through it."""

from __future__ import annotations

import pytest
import wasmtime

from engines.host import GlobalReader, linked_globals, make_engine, new_store


def test_globals_read_as_wasmtime_reads_them() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    values: list[tuple[str, int | float]] = [
        ("i32", -7),
        ("i64", 1 << 40),
        ("f32", 1.5),
        ("f64", -2.25),
        ("i32", 2**31 - 1),
    ]
    items = [
        (
            wasmtime.Global(
                store, wasmtime.GlobalType(getattr(wasmtime.ValType, kind)(), True), value
            ),
            kind,
        )
        for kind, value in values
    ]
    reader = GlobalReader(store, [(item._global, kind) for item, kind in items])
    assert reader.read() == [value for _, value in values]
    items[1][0].set_value(store, 5)
    assert (
        reader.read() == [item.value(store) for item, _ in items] == [-7, 5, 1.5, -2.25, 2**31 - 1]
    )


def test_a_global_of_another_type_is_refused() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    item = wasmtime.Global(store, wasmtime.GlobalType(wasmtime.ValType.i64(), True), 3)
    with pytest.raises(TypeError, match="not of the type"):
        GlobalReader(store, [(item._global, "i32")]).read()


def test_linked_globals_find_what_the_linker_defines_and_nothing_else() -> None:
    engine = make_engine()
    store = new_store(engine, memory_bytes=1 << 20)
    linker = wasmtime.Linker(engine)
    counter = wasmtime.Global(store, wasmtime.GlobalType(wasmtime.ValType.i64(), True), 41)
    linker.define(store, "i0", "__g0", counter)
    linker.define(
        store, "i0", "memory", wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(1, None)))
    )
    [handle] = linked_globals(linker, store, [("i0", "__g0")])
    reader = GlobalReader(store, [(handle, "i64")])
    counter.set_value(store, 42)
    assert reader.read() == [42]
    for missing in [("i0", "memory"), ("i0", "__g1"), ("i1", "__g0")]:
        with pytest.raises(LookupError, match="no global"):
            linked_globals(linker, store, [missing])
