"""Runs the real perl engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import wasmtime

from engines.host import OutputCapture
from engines.perl.engine import ENGINE
from engines.snapshot import MemorySnapshot
from engines.vfs import VirtualFS
from tests.engines.prepared import ModuleHarness


@dataclass
class Guest(ModuleHarness):
    """One store + instance, as created by the framework (session or stateless)."""

    engine: wasmtime.Engine
    module: wasmtime.Module
    workspace: VirtualFS | None = None
    snapshot: MemorySnapshot | None = None
    output: OutputCapture = field(default_factory=OutputCapture)

    language_engine = ENGINE

    def __post_init__(self) -> None:
        self.store = ENGINE.new_store(self.engine, self.output, workspace=self.workspace)
        self.start(self.engine, self.module, self.snapshot)

    @property
    def memory_bytes(self) -> int:
        return self.instance.memory_size()


@contextmanager
def guest(
    engine: wasmtime.Engine,
    module: wasmtime.Module,
    workspace: VirtualFS | None = None,
    snapshot: MemorySnapshot | None = None,
) -> Iterator[Guest]:
    instance = Guest(engine, module, workspace, snapshot)
    try:
        yield instance
    finally:
        instance.close()
