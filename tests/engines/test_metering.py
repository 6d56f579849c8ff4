"""Fuel in the reference's units (`engines.metering`): a tick at every function entry and
every loop header, counted inside the module."""

from __future__ import annotations

import pytest
import wasmtime

from engines import metering
from engines.host import make_engine, new_store
from engines.wasm_binary import MEMORY, read_imports, sections, uleb
from tests.engines import run

COUNTED = """(module
  (memory (export "memory") 1)
  (func $id (param i32) (result i32) local.get 0)
  (func (export "run") (param $n i32) (result i32) (local $i i32)
    (loop $again
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (drop (call $id (local.get $i)))
      (br_if $again (i32.lt_u (local.get $i) (local.get $n))))
    local.get $i))"""
"""`run(n)`: 1 entry + n loop headers + n calls of `$id` = 2n + 1 ticks."""

LOOKALIKES = """(module
  (memory 1)
  (func (export "run") (result i32) (local $three i32)
    ;; immediates holding 0x03 (the `loop` opcode): none of them is a loop
    (local.set $three (i32.const 3))
    (drop (f32.const 0x1.06p-125))
    (drop (i64.const 3))
    (i32.store offset=3 align=1 (i32.const 0) (i32.const 3))
    (block $a (block $b (block $c
      (br_table $a $b $c (i32.load offset=3 align=1 (i32.const 0))))))
    (drop (i8x16.extract_lane_u 3 (v128.const i8x16 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3)))
    (memory.fill (i32.const 3) (i32.const 3) (i32.const 3))
    (i32.add (local.get $three) (i32.load8_u offset=3 (i32.const 0)))))"""


def instantiate(
    wat: str, store: wasmtime.Store
) -> tuple[wasmtime.Instance, metering.Meter, wasmtime.Func]:
    module = wasmtime.Module(store.engine, metering.instrument(wasmtime.wat2wasm(wat)))
    instance = wasmtime.Instance(store, module, [])
    exports = instance.exports(store)
    run_export = exports["run"]
    assert isinstance(run_export, wasmtime.Func)
    return instance, metering.Meter(store, exports[metering.METER_EXPORT]), run_export


def test_one_tick_at_each_function_entry_and_loop_header() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    _, meter, run_export = instantiate(COUNTED, store)
    for n in (1, 10, 1000):
        meter.remaining = 10**6
        assert run_export(store, n) == n
        assert 10**6 - meter.remaining == 2 * n + 1


def test_a_budget_of_n_allows_exactly_n_ticks() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    _, meter, run_export = instantiate(COUNTED, store)
    meter.remaining = 21
    assert run_export(store, 10) == 10
    assert meter.remaining == 0
    _, meter, run_export = instantiate(COUNTED, store)
    meter.remaining = 20
    with pytest.raises(wasmtime.Trap) as trapped:
        run_export(store, 10)
    assert trapped.value.trap_code == wasmtime.TrapCode.UNREACHABLE
    assert meter.remaining == 0


def test_a_fresh_counter_allows_nothing_until_a_budget_is_set() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    _, meter, run_export = instantiate(COUNTED, store)
    with pytest.raises(wasmtime.Trap):
        run_export(store, 1)
    meter.remaining = metering.UNMETERED
    assert run_export(store, 1) == 1


def test_immediates_that_look_like_a_loop_are_not_one() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    plain = wasmtime.Instance(
        store, wasmtime.Module(store.engine, wasmtime.wat2wasm(LOOKALIKES)), []
    )
    expected = plain.exports(store)["run"]
    assert isinstance(expected, wasmtime.Func)
    _, meter, run_export = instantiate(LOOKALIKES, store)
    meter.remaining = 100
    assert run_export(store) == expected(store) == 6
    assert meter.remaining == 99  # the function's entry, nothing else


def test_linked_modules_share_one_budget() -> None:
    """The modules of a component tick on the counter of the one that owns it."""
    store = new_store(make_engine(), memory_bytes=1 << 20)
    owner, meter, run_export = instantiate(COUNTED, store)
    library = """(module
      (import "env" "memory" (memory 1))
      (func (export "spin") (param $n i32) (loop $l
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br_if $l (local.get $n)))))"""
    metered = metering.instrument(wasmtime.wat2wasm(library), ("owner", metering.METER_EXPORT))
    linker = wasmtime.Linker(store.engine)
    linker.define_instance(store, "owner", owner)
    linker.define(store, "env", "memory", owner.exports(store)["memory"])
    spin = linker.instantiate(store, wasmtime.Module(store.engine, metered)).exports(store)["spin"]
    assert isinstance(spin, wasmtime.Func)
    meter.remaining = 1000
    spin(store, 5)  # 1 entry + 5 loop headers
    run_export(store, 3)  # 7
    assert meter.remaining == 1000 - 6 - 7


def one_function(body: bytes) -> bytes:
    """A module of one `[] -> []` function with `body` (no locals, then the code)."""
    code = b"\x00" + body + b"\x0b"
    return (
        b"\0asm\x01\0\0\0"
        + b"\x01\x04\x01\x60\x00\x00"  # type 0: [] -> []
        + b"\x03\x02\x01\x00"  # one function of type 0
        + b"\x0a"
        + uleb(len(code) + 2)
        + b"\x01"
        + uleb(len(code))
        + code
    )


@pytest.mark.parametrize(
    ("body", "instruction"),
    [
        (b"\xfb\x01\x00", "0xfb"),  # struct.new 0 (GC)
        # v128.const 0, then FP16's f16x8.extract_lane 3: its lane byte is a `loop` opcode
        (b"\xfd\x0c" + bytes(16) + b"\xfd\xa1\x02\x03\x1a", "0xfd 289"),
        (b"\x41\x00\xfe\x4f\x02\x00\x1a", "0xfe 79"),  # beyond the atomics
        (b"\xfc\x17", "0xfc 23"),
    ],
)
def test_an_unknown_instruction_refuses_the_module(body: bytes, instruction: str) -> None:
    """An instruction whose immediates are not known cannot be skipped safely: no guess."""
    with pytest.raises(ValueError, match=f"unknown instruction {instruction}"):
        metering.instrument(one_function(body))


def test_what_cannot_be_metered_is_refused() -> None:
    owner_with_start = wasmtime.wat2wasm("(module (func $s) (start $s))")
    with pytest.raises(ValueError, match="start function"):  # it would run before a budget
        metering.instrument(owner_with_start)
    metered = metering.instrument(wasmtime.wat2wasm(COUNTED))
    with pytest.raises(ValueError, match="metered already"):
        metering.instrument(metered)


def test_an_imported_memory_with_its_own_page_size_is_counted() -> None:
    """Miscounted, the counter would be a guest's memory."""
    two = wasmtime.wat2wasm(
        '(module (import "e" "m" (memory 1 (pagesize 1))) (import "e" "n" (memory 1)))'
    )
    assert [item.kind for item in read_imports(dict(sections(two))[2])] == [MEMORY, MEMORY]


LOOPS = {
    "python": "s = 0\nfor i in range({n}):\n    s += i\ns",
    "javascript": "let s = 0; for (let i = 0; i < {n}; i++) s += i; s",
    "perl": "my $s = 0; $s += $_ for 1..{n}; $s",
    "ruby": "s = 0; {n}.times {{ |i| s += i }}; s",
}


@pytest.mark.parametrize("language", sorted(LOOPS))
def test_every_engine_counts_ticks_deterministically_and_in_proportion(language: str) -> None:
    """The same code costs about the same ticks each time (hash seeds are random, so not
    exactly), and twice the loop costs twice the loop's part: fuel is the reference's
    count of events, not time."""

    def used(n: int) -> int:
        result = run(language, LOOPS[language].format(n=n))
        assert result.error is None and result.usage is not None
        return result.usage.fuel_consumed

    def least(n: int) -> int:
        """The fewest ticks of three runs: a hash seed that happens to cost more (Perl's
        moved one difference by 1.3% in a CI run) counts once, not as the loop's part."""
        return min(used(n) for _ in range(3))

    one, again = used(1000), used(1000)
    assert abs(one - again) <= one // 100
    one, two, three = least(1000), least(2000), least(3000)
    assert abs((three - two) - (two - one)) <= (two - one) // 100
    assert two - one > 1000
