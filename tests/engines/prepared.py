"""Engines for the per-language guest tests, through the framework's cache (prepared and
compiled once per machine, deserialized per test session)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

from engines.cache import EngineCache
from engines.components.plan import ComponentArtifact
from engines.host import IDLE_EPOCH_DEADLINE, OutputCapture, make_engine
from engines.language import GuestInstance, LanguageEngine
from engines.module import ModuleGuest
from engines.proto import envelope_pb2
from engines.snapshot import MemorySnapshot
from engines.vfs import PathState, TreeUpdate, VirtualFS


def put_files(fs: VirtualFS, files: Mapping[str, bytes | str]) -> None:
    """Put files into a tree as its owner does (parents are created; `str` as UTF-8)."""
    fs.update(
        TreeUpdate(
            tuple(
                PathState(path, "file", data.encode() if isinstance(data, str) else data)
                for path, data in files.items()
            )
        )
    )


def put_dirs(fs: VirtualFS, *paths: str) -> None:
    """Make directories in a tree as its owner does (parents are created)."""
    fs.update(TreeUpdate(tuple(PathState(path, "directory") for path in paths)))


def remove(fs: VirtualFS, *paths: str) -> None:
    """Remove entries (a directory with everything below it) as the tree's owner does."""
    fs.update(TreeUpdate(tuple(PathState(path, "absent") for path in paths)))


def entries(fs: VirtualFS) -> list[str]:
    """Every path in a tree (directories too), sorted."""
    return sorted(path for path, _ in fs.walk())


@dataclass
class Prepared:
    engine: wasmtime.Engine
    component: ComponentArtifact
    """The component's core modules and wiring plan, loaded."""
    wasm: Path
    timings: dict[str, float] = field(default_factory=dict)


def prepare_component(spec: LanguageEngine) -> Prepared:
    """A component engine (Python, JavaScript) and its loaded decomposition."""
    cache = EngineCache(spec)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    cache.prepare()
    timings["prepare_s"] = time.perf_counter() - started
    engine = spec.new_engine()
    started = time.perf_counter()
    component = cache.load(engine)
    timings["deserialize_ms"] = (time.perf_counter() - started) * 1000
    assert isinstance(component, ComponentArtifact)
    return Prepared(engine, component, cache.wasm_path, timings)


@dataclass
class Timings:
    prepare_s: float = 0.0
    compile_s: float = 0.0
    deserialize_s: float = 0.0


def load_module(spec: LanguageEngine, timings: Timings) -> tuple[wasmtime.Engine, wasmtime.Module]:
    """A core-module engine (Perl, Ruby): a wasmtime engine and the module loaded into it."""
    engine = make_engine()
    cache = EngineCache(spec)
    start = time.perf_counter()
    cache.prepare()
    timings.prepare_s = time.perf_counter() - start
    start = time.perf_counter()
    module = cache.load(engine)
    timings.deserialize_s = time.perf_counter() - start
    assert isinstance(module, wasmtime.Module)
    return engine, module


@dataclass(frozen=True)
class GuestCall:
    response: envelope_pb2.ExecuteResponse
    stdout: str
    stderr: str
    fuel_used: int


def call_guest(
    store: wasmtime.Store,
    output: OutputCapture,
    instance: GuestInstance,
    request: envelope_pb2.ExecuteRequest,
    fuel: int,
) -> GuestCall:
    """One execution the way the framework makes it: fresh output, a fuel budget and an
    epoch deadline (traps propagate)."""
    output.reset()
    instance.meter.remaining = fuel
    store.set_epoch_deadline(1)
    try:
        raw = instance.call(request.SerializeToString())
    finally:
        store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
    return GuestCall(
        envelope_pb2.ExecuteResponse.FromString(raw),
        output.stdout.decode("utf-8", "replace"),
        output.stderr.decode("utf-8", "replace"),
        fuel - instance.meter.remaining,
    )


@dataclass
class ModuleRun:
    """One execution's outcome on a core-module engine (Perl, Ruby) as the framework sees it."""

    response: envelope_pb2.ExecuteResponse
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
class ComponentRun:
    """One execution's outcome on a component engine (Python, JavaScript)."""

    response: envelope_pb2.ExecuteResponse
    fuel_used: int

    @property
    def text(self) -> str | None:
        has = self.response.HasField("result") and self.response.result.HasField("text")
        return self.response.result.text if has else None

    @property
    def json(self) -> object:
        has = self.response.HasField("result") and self.response.result.HasField("json")
        return json.loads(self.response.result.json) if has else None

    @property
    def has_result(self) -> bool:
        return self.response.HasField("result")

    @property
    def error(self) -> envelope_pb2.GuestError | None:
        return self.response.error if self.response.HasField("error") else None


class ComponentGuest:
    """One store + live instance of a component engine, created like the framework does."""

    def __init__(
        self, spec: LanguageEngine, prepared: Prepared, workspace: VirtualFS | None = None
    ) -> None:
        self.language_engine = spec
        self.workspace = workspace
        self.output = OutputCapture()
        self.store = spec.new_store(prepared.engine, self.output, workspace=workspace)
        self.instance: GuestInstance = spec.instantiate(
            prepared.engine, prepared.component, self.store
        )

    def call_guest(self, request: envelope_pb2.ExecuteRequest, fuel: int | None) -> GuestCall:
        return call_guest(
            self.store, self.output, self.instance, request, fuel or self.language_engine.fuel
        )

    def close(self) -> None:
        self.store.close()


class ModuleHarness:
    """Runs code on one live core-module guest (Perl, Ruby) the way the framework does;
    each language's `Guest` makes the store and calls `start`."""

    language_engine: LanguageEngine
    workspace: VirtualFS | None
    output: OutputCapture
    store: wasmtime.Store
    instance: ModuleGuest

    def start(
        self, engine: wasmtime.Engine, module: wasmtime.Module, snapshot: MemorySnapshot | None
    ) -> None:
        """Boot a fresh instance, or restore `snapshot` into one."""
        if snapshot is None:
            instance = self.language_engine.instantiate(engine, module, self.store)
        else:
            instance = self.language_engine.restore(engine, module, self.store, snapshot)
        assert isinstance(instance, ModuleGuest)
        self.instance = instance

    def run(
        self,
        code: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str = "/workspace",
        fuel: int | None = None,
    ) -> ModuleRun:
        """One execution: session semantics iff the guest has a workspace."""
        session = self.workspace is not None
        request = envelope_pb2.ExecuteRequest(
            code=code, env=env or {}, session=session, cwd=cwd if session else ""
        )
        budget = self.language_engine.fuel if fuel is None else fuel
        done = call_guest(self.store, self.output, self.instance, request, budget)
        return ModuleRun(done.response, done.stdout, done.stderr, done.fuel_used)

    def take_snapshot(self) -> MemorySnapshot:
        return self.language_engine.take_snapshot(self.store, self.instance)

    def close(self) -> None:
        self.store.close()
