"""Creating wasmtime engines and stores the way every guest expects them.

All guests run with fuel metering, epoch interruption, a linear-memory cap, an empty
WASI environment (the effective env travels in the request envelope), only the
preopens given here, and stdout/stderr captured into `OutputCapture`. Stores of guests
with their own WASI host (`engines.decomposed`) start from `new_store` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

WORKSPACE = "/workspace"
IDLE_EPOCH_DEADLINE = 1 << 62
"""Deadline between executions: effectively never (executions set their own)."""


def make_engine() -> wasmtime.Engine:
    """An engine with the one configuration our compiled modules are keyed by (core
    modules only: components are decomposed into core modules)."""
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    config.wasm_component_model = False
    return wasmtime.Engine(config)


ENGINE_CONFIG_KEY = "fuel+epoch/v1"
"""Part of the compiled-module cache key: bump when `make_engine` changes."""


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

    def _write(self, target: bytearray, data: bytes) -> None:
        # wasmtime requires the callback to return None (or the byte count).
        self.writes += 1
        self.total_bytes += len(data)
        room = self.byte_cap - len(self.stdout) - len(self.stderr)
        if len(data) > room:
            self.overflowed = True
            data = data[: max(room, 0)]
        target.extend(data)

    def on_stdout(self, data: bytes) -> None:
        self._write(self.stdout, data)

    def on_stderr(self, data: bytes) -> None:
        self._write(self.stderr, data)

    def reset(self) -> None:
        self.stdout.clear()
        self.stderr.clear()
        self.writes = self.total_bytes = 0
        self.overflowed = False


def make_store(
    engine: wasmtime.Engine,
    output: OutputCapture,
    *,
    memory_bytes: int,
    argv: tuple[str, ...] = (),
    preopens: tuple[tuple[Path, str, bool], ...] = (),
) -> wasmtime.Store:
    """A store with wasmtime's WASI (no env; `preopens` as (host_dir, guest_path,
    writable))."""
    wasi = wasmtime.WasiConfig()
    if argv:
        wasi.argv = list(argv)
    wasi.env = []
    for host_dir, guest_path, writable in preopens:
        wasi.preopen_dir(str(host_dir), guest_path, writable)
    wasi.stdout_custom = output.on_stdout
    wasi.stderr_custom = output.on_stderr
    store = new_store(engine, memory_bytes=memory_bytes)
    store.set_wasi(wasi)
    return store


def new_store(engine: wasmtime.Engine, *, memory_bytes: int, data: object = None) -> wasmtime.Store:
    """A store without WASI: the memory cap, no fuel, the idle epoch deadline; `data` is
    what `Store.data()` returns."""
    store = wasmtime.Store(engine, data)
    store.set_limits(memory_size=memory_bytes)
    store.set_fuel(0)
    store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
    return store
