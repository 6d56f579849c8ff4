"""`engines.host.GlobalReader`: snapshots read hundreds of globals through it."""

from __future__ import annotations

import pytest
import wasmtime

from engines.host import GlobalReader, make_engine, new_store


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
    reader = GlobalReader(store, items)
    assert reader.read() == [value for _, value in values]
    items[1][0].set_value(store, 5)
    assert (
        reader.read() == [item.value(store) for item, _ in items] == [-7, 5, 1.5, -2.25, 2**31 - 1]
    )


def test_a_global_of_another_type_is_refused() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    item = wasmtime.Global(store, wasmtime.GlobalType(wasmtime.ValType.i64(), True), 3)
    with pytest.raises(TypeError, match="not of the type"):
        GlobalReader(store, [(item, "i32")]).read()
