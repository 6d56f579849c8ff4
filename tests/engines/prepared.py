"""Engines for the per-language guest tests, through the framework's cache (prepared and
compiled once per machine, deserialized per test session)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import wasmtime
import wasmtime.component

from engines.cache import EngineCache
from engines.host import IDLE_EPOCH_DEADLINE, OutputCapture, make_engine
from engines.language import GuestInstance, LanguageEngine
from engines.proto import envelope_pb2

INIT_FUEL = 10**11


@dataclass
class Prepared:
    engine: wasmtime.Engine
    component: wasmtime.component.Component
    wasm: Path
    timings: dict[str, float] = field(default_factory=dict)


def prepare_component(spec: LanguageEngine) -> Prepared:
    """A component engine (Python, JavaScript) and its loaded component."""
    cache = EngineCache(spec)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    cache.prepare()
    timings["prepare_s"] = time.perf_counter() - started
    engine = make_engine(component=True)
    started = time.perf_counter()
    component = cache.load(engine)
    timings["deserialize_ms"] = (time.perf_counter() - started) * 1000
    assert isinstance(component, wasmtime.component.Component)
    return Prepared(engine, component, cache.wasm_path, timings)


@dataclass
class Timings:
    prepare_s: float = 0.0
    compile_s: float = 0.0
    deserialize_s: float = 0.0


def load_module(spec: LanguageEngine, engine: wasmtime.Engine, timings: Timings) -> wasmtime.Module:
    """A core-module engine's (Perl, Ruby) module, loaded into `engine`."""
    cache = EngineCache(spec)
    start = time.perf_counter()
    cache.prepare()
    timings.prepare_s = time.perf_counter() - start
    start = time.perf_counter()
    module = cache.load(engine)
    timings.deserialize_s = time.perf_counter() - start
    assert isinstance(module, wasmtime.Module)
    return module


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
    store.set_fuel(fuel)
    store.set_epoch_deadline(1)
    try:
        raw = instance.call(request.SerializeToString())
    finally:
        store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
    return GuestCall(
        envelope_pb2.ExecuteResponse.FromString(raw),
        output.stdout.decode("utf-8", "replace"),
        output.stderr.decode("utf-8", "replace"),
        fuel - store.get_fuel(),
    )
