"""Runs the real perl engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

from engines.host import OutputCapture, make_engine
from engines.perl import ENGINE, PerlGuest
from engines.proto import envelope_pb2 as pb
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


@dataclass
class Guest:
    """One store + instance, as created by the framework (session or stateless)."""

    engine: wasmtime.Engine
    module: wasmtime.Module
    scratch: Path
    workspace: Path | None = None
    snapshot: MemorySnapshot | None = None
    output: OutputCapture = field(default_factory=OutputCapture)

    def __post_init__(self) -> None:
        self.store = ENGINE.new_store(
            self.engine, self.output, workspace=self.workspace, scratch=self.scratch
        )
        self.store.set_fuel(INIT_FUEL)
        if self.snapshot is None:
            self.instance: PerlGuest = ENGINE.instantiate(self.engine, self.module, self.store)
        else:
            self.instance = ENGINE.restore(self.engine, self.module, self.store, self.snapshot)

    def run(
        self,
        code: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str = "/workspace",
        fuel: int | None = None,
    ) -> Run:
        session = self.workspace is not None
        request = pb.ExecuteRequest(
            code=code, env=env or {}, session=session, cwd=cwd if session else ""
        )
        budget = ENGINE.fuel if fuel is None else fuel
        done = call_guest(self.store, self.output, self.instance, request, budget)
        return Run(done.response, done.stdout, done.stderr, done.fuel_used)

    def take_snapshot(self) -> MemorySnapshot:
        return ENGINE.take_snapshot(self.store, self.instance)

    @property
    def memory_bytes(self) -> int:
        return int(self.instance.memory.data_len(self.store))

    def close(self) -> None:
        self.store.close()


@contextmanager
def guest(
    engine: wasmtime.Engine,
    module: wasmtime.Module,
    scratch: Path,
    workspace: Path | None = None,
    snapshot: MemorySnapshot | None = None,
) -> Iterator[Guest]:
    instance = Guest(engine, module, scratch, workspace, snapshot)
    try:
        yield instance
    finally:
        instance.close()
