from __future__ import annotations

import ctypes
from collections.abc import Mapping
from pathlib import Path

import wasmtime

from engines import snapshot
from engines.components.guest import ComponentGuest
from engines.language import Artifact, GuestInstance, LanguageEngine, Progress
from engines.result import ExecutionResult, Limits
from engines.session import Session


def run(
    language: str,
    code: str,
    env_vars: Mapping[str, str] | None = None,
    *,
    limits: Limits | None = None,
) -> ExecutionResult:
    """A stateless execution (spec 9.4) on an in-process `Session`: a fresh instance, no
    /workspace, nothing persists (the workbench's runs go through an engine process,
    `engines.process.run_stateless`)."""
    with Session(language, limits=limits) as session:
        return session.execute(code, env_vars, session=False).result


def _live_memory(live: Session) -> tuple[wasmtime.Store, wasmtime.Memory]:
    store, instance = live._store, live._instance
    assert store is not None and instance is not None
    memory = (
        instance.memory
        if isinstance(instance, ComponentGuest)
        else instance.instance.exports(store)["memory"]  # type: ignore[attr-defined]
    )
    assert isinstance(memory, wasmtime.Memory)
    return store, memory


def whole_memory(live: Session) -> bytes:
    """Every byte of a live session's linear memory (a snapshot keeps only the blocks the
    guest wrote)."""
    store, memory = _live_memory(live)
    return bytes(memory.read(store, 0, memory.data_len(store)))


def blocks_counted_as_written(live: Session) -> int:
    """How many 4 KiB blocks of a live session's memory the kernel counts as written
    (`engines.snapshot.written_blocks`; the test needs a kernel that can tell)."""
    store, memory = _live_memory(live)
    address = ctypes.addressof(memory.data_ptr(store).contents)
    written = snapshot.written_blocks(address, memory.data_len(store))
    assert written is not None
    return sum(written)


class TinyEngine(LanguageEngine):
    """An engine of one small function, prepared and compiled through the real cache:
    what the cache does with a module entry (its files, damage, compiling again) without
    compiling an interpreter (Perl's takes twenty seconds)."""

    language = engine = "tiny"
    version = "1"
    kind = "module"
    fuel = 1000
    memory_bytes = 1 << 16
    build_inputs = ()

    def prepare(self, work_dir: Path, progress: Progress) -> Path:
        wasm = work_dir / "tiny.wasm"
        wasm.write_bytes(
            wasmtime.wat2wasm('(module (func (export "run") (result i32) i32.const 42))')
        )
        return wasm

    def instantiate(
        self, engine: wasmtime.Engine, artifact: Artifact, store: wasmtime.Store
    ) -> GuestInstance:
        raise NotImplementedError("the cache tests only compile and load it")
