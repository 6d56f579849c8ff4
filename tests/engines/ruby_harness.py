"""Runs the real ruby engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

from engines.host import OutputCapture, make_engine
from engines.proto import envelope_pb2 as pb
from engines.ruby import ENGINE, RubyGuest
from engines.snapshot import MemorySnapshot
from tests.engines.prepared import INIT_FUEL, Timings, call_guest
from tests.engines.prepared import load_module as load_shared


def new_engine() -> wasmtime.Engine:
    return make_engine(component=False)


def load_module(engine: wasmtime.Engine, timings: Timings) -> wasmtime.Module:
    return load_shared(ENGINE, engine, timings)


@dataclass
class Run:
    """One execution's outcome as the framework sees it."""

    response: pb.ExecuteResponse
    stdout: str
    stderr: str
    fuel_used: int

    @property
    def result(self) -> tuple[str, str] | None:
        if not self.response.HasField("result"):
            return None
        kind = self.response.result.WhichOneof("value")
        assert kind is not None
        return kind, getattr(self.response.result, kind)

    @property
    def error(self) -> tuple[str, str] | None:
        if not self.response.HasField("error"):
            return None
        return self.response.error.name, self.response.error.message

    @property
    def traceback(self) -> list[str]:
        return list(self.response.error.traceback)


@dataclass
class Guest:
    """One store + instance, created by the framework's recipe (session or stateless)."""

    engine: wasmtime.Engine
    module: wasmtime.Module
    workspace: Path | None = None
    snapshot: MemorySnapshot | None = None
    memory_bytes: int = ENGINE.memory_bytes
    output: OutputCapture = field(default_factory=OutputCapture)

    def __post_init__(self) -> None:
        self.store = ENGINE.new_store(
            self.engine, self.output, workspace=self.workspace, memory_bytes=self.memory_bytes
        )
        self.store.set_fuel(INIT_FUEL)
        if self.snapshot is None:
            instance = ENGINE.instantiate(self.engine, self.module, self.store)
        else:
            instance = ENGINE.restore(self.engine, self.module, self.store, self.snapshot)
        assert isinstance(instance, RubyGuest)
        self.instance = instance

    def run(
        self,
        code: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str = "/workspace",
        fuel: int = ENGINE.fuel,
    ) -> Run:
        """One execution: session semantics iff the guest has a workspace."""
        session = self.workspace is not None
        request = pb.ExecuteRequest(
            code=code, env=env or {}, session=session, cwd=cwd if session else ""
        )
        done = call_guest(self.store, self.output, self.instance, request, fuel)
        return Run(done.response, done.stdout, done.stderr, done.fuel_used)

    def take_snapshot(self) -> MemorySnapshot:
        return ENGINE.take_snapshot(self.store, self.instance)

    def memory_size(self) -> int:
        return int(self.instance.memory.data_len(self.store))

    def close(self) -> None:
        self.store.close()
