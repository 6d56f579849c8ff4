"""Runs the real ruby engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import wasmtime

from engines.host import OutputCapture
from engines.ruby.engine import ENGINE
from engines.snapshot import MemorySnapshot
from engines.vfs import VirtualFS
from tests.engines.prepared import ModuleHarness


@dataclass
class Guest(ModuleHarness):
    """One store + instance, created by the framework's recipe (session or stateless)."""

    engine: wasmtime.Engine
    module: wasmtime.Module
    workspace: VirtualFS | None = None
    snapshot: MemorySnapshot | None = None
    memory_bytes: int = ENGINE.memory_bytes
    output: OutputCapture = field(default_factory=OutputCapture)

    language_engine = ENGINE

    def __post_init__(self) -> None:
        self.store = ENGINE.new_store(
            self.engine, self.output, workspace=self.workspace, memory_bytes=self.memory_bytes
        )
        self.start(self.engine, self.module, self.snapshot)

    def memory_size(self) -> int:
        return self.instance.memory_size()
