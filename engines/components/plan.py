"""Decomposing a component into core modules and a wiring plan, once, at prepare time.

Every core instantiation of the component gets its own rewritten module whose imports
name their real sources directly: `i<N>`/<export> (core instance N) or `host`/`f<N>`
(core func N: a lowered WASI import or a resource drop), and which exports its defined
state (`__g`/`__m`/`__t`: globals, memories, tables) for snapshots, and which counts
fuel (`engines.metering`). Instantiating is
then a walk of `wasmtime.Linker` over the steps, with no parsing at load time.

On disk (a directory of the engine cache): one `<sha256 of the rewritten wasm>.cwasm`
per distinct module and `plan.json`. The plan's id digests all of it: a snapshot records
the id it was taken with and is only restored into the same decomposition.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import wasmtime

from engines import metering, wasm_binary
from engines.components import component as parsed
from engines.components.component import UnsupportedComponent
from engines.components.wasi import UnsupportedImport, lookup
from engines.components.wasi.abi import core_signature, functype
from engines.metering import METER_EXPORT

PLAN_FILE = "plan.json"
FORMAT = 4
"""Version of what `decompose` writes (part of the compiled entry's cache key)."""
EXPORT = "run"
"""The component's one export: `run: func(request: list<u8>) -> list<u8>`."""
HOST_NAMESPACE = "host"
_MODULE_FILE = re.compile(r"^[0-9a-f]{32}\.cwasm$")

Source = tuple[str, str]
"""(linker namespace, name) of a core item: ("i3", "memory") or ("host", "f12")."""


@dataclass(frozen=True)
class HostFunc:
    """One core func the host provides: a lowered import or a resource drop."""

    index: int
    interface: str
    """The imported instance, with its version: "wasi:io/streams@0.2.9"."""
    name: str
    """The function ("[method]output-stream.write"), or the dropped resource's type."""
    drop: bool
    params: str
    results: str
    realloc: Source | None


@dataclass(frozen=True)
class Step:
    """Instantiate `module` as core instance `instance`; its snapshot state exports."""

    instance: int
    module: str
    memories: tuple[str, ...]
    tables: tuple[str, ...]
    globals: tuple[tuple[str, str], ...]
    """Mutable globals as (export, value type): numeric (the only kind a snapshot can
    carry)."""


@dataclass(frozen=True)
class Entry:
    """How to call the export through the canonical ABI."""

    call: Source
    realloc: Source
    post_return: Source | None
    memory: Source


@dataclass(frozen=True)
class Plan:
    id: str
    steps: tuple[Step, ...]
    host: tuple[HostFunc, ...]
    entry: Entry
    initial_globals: dict[str, int | float] = field(default_factory=dict)
    """The mutable globals' values in a fresh instance, by snapshot key
    ("<instance>/<export>"): a snapshot carries only the globals that differ."""

    @property
    def interfaces(self) -> list[str]:
        """The WASI interfaces the guest imports (without versions)."""
        return sorted({func.interface.partition("@")[0] for func in self.host})

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any) -> Plan:
        """Read a plan back (raises ValueError for anything malformed)."""
        try:
            if data["format"] != FORMAT:
                raise ValueError(f"plan format {data['format']!r} is not {FORMAT}")
            steps = tuple(
                Step(
                    int(step["instance"]),
                    str(step["module"]),
                    tuple(str(name) for name in step["memories"]),
                    tuple(str(name) for name in step["tables"]),
                    tuple((str(name), str(kind)) for name, kind in step["globals"]),
                )
                for step in data["steps"]
            )
            host = tuple(
                HostFunc(
                    int(func["index"]),
                    str(func["interface"]),
                    str(func["name"]),
                    bool(func["drop"]),
                    str(func["params"]),
                    str(func["results"]),
                    _source(func["realloc"]) if func["realloc"] is not None else None,
                )
                for func in data["host"]
            )
            entry = data["entry"]
            initial = data["initial_globals"]
            if not isinstance(initial, dict) or not all(
                isinstance(value, int | float) and not isinstance(value, bool)
                for value in initial.values()
            ):
                raise ValueError("malformed plan: initial globals")
            plan = cls(
                str(data["id"]),
                steps,
                host,
                Entry(
                    _source(entry["call"]),
                    _source(entry["realloc"]),
                    _source(entry["post_return"]) if entry["post_return"] is not None else None,
                    _source(entry["memory"]),
                ),
                {str(key): value for key, value in initial.items()},
            )
        except (KeyError, TypeError, IndexError) as error:
            raise ValueError(f"malformed plan: {error!r}") from None
        if any(not _MODULE_FILE.match(step.module) for step in plan.steps):
            raise ValueError("malformed plan: a module file name")
        return plan


def _source(raw: Any) -> Source:
    namespace, name = raw
    return str(namespace), str(name)


def _digest(plan: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()


class _Wiring:
    """Resolves where each core item of the component really comes from."""

    def __init__(self, component: parsed.Component) -> None:
        self.component = component
        self.used: dict[str, set[str]] = {}
        """Linker namespace -> the exports of that instance something uses."""

    def export_of(self, instance: int, name: str) -> Source:
        entry = self.component.core_instances[instance]
        if isinstance(entry, parsed.Bag):
            if name not in entry.items:
                raise UnsupportedComponent(f"core instance {instance} has no export {name!r}")
            sort, index = entry.items[name]
            return self.item(sort, index)
        namespace = f"i{instance}"
        self.used.setdefault(namespace, set()).add(name)
        return namespace, name

    def item(self, sort: str, index: int) -> Source:
        if sort == "func":
            func = self.component.core_funcs[index]
            if isinstance(func, parsed.Lower | parsed.ResourceDrop):
                return HOST_NAMESPACE, f"f{index}"
            entry: parsed.Alias | parsed.Other | parsed.Lower | parsed.ResourceDrop = func
        elif sort in self.component.core_items:
            entry = self.component.core_items[sort][index]
        else:
            raise UnsupportedComponent(f"core {sort} items cannot be wired")
        if not isinstance(entry, parsed.Alias):
            raise UnsupportedComponent(f"core {sort} {index} is not an instance export")
        return self.export_of(entry.instance, entry.name)


Progress = Callable[[str, float], None]


def decompose(
    data: bytes,
    engine: wasmtime.Engine,
    directory: Path,
    progress: Progress,
    reusable: Mapping[str, Path],
) -> Plan:
    """Write the component's rewritten, compiled core modules and `plan.json` into
    `directory` (raises `UnsupportedComponent`/`UnsupportedImport`, both ValueErrors).
    A module whose file is in `reusable` (named for its rewritten bytes, compiled for
    this engine's configuration: see `EngineCache`) is copied rather than compiled again."""
    component = parsed.parse(data)
    wiring = _Wiring(component)
    instantiations = [
        (index, entry)
        for index, entry in enumerate(component.core_instances)
        if isinstance(entry, parsed.Instantiate)
    ]
    # Pass 1: point every import at its source, noting which exports anything uses.
    renamed: list[tuple[int, int, bytes]] = []
    for index, instantiation in instantiations:

        def rename(module: str, name: str, args: dict[str, int] = instantiation.args) -> Source:
            if module not in args:
                raise UnsupportedComponent(f"core import module {module!r} is not wired")
            return wiring.export_of(args[module], name)

        module_bytes = component.modules[instantiation.module]
        renamed.append(
            (index, instantiation.module, wasm_binary.rename_imports(module_bytes, rename))
        )
    for func in component.core_funcs:  # what the lowerings use
        if isinstance(func, parsed.Lower) and func.options.realloc is not None:
            wiring.item("func", func.options.realloc)
        if isinstance(func, parsed.Lower) and func.options.memory is not None:
            wiring.item("memory", func.options.memory)
    lift = component.lifted(EXPORT)
    options = lift.options
    if options.memory is None or options.realloc is None:
        raise UnsupportedComponent(f"export {EXPORT!r} is lifted without memory or realloc")
    memory = wiring.item("memory", options.memory)
    entry = Entry(
        wiring.item("func", lift.core_func),
        wiring.item("func", options.realloc),
        wiring.item("func", options.post_return) if options.post_return is not None else None,
        memory,
    )
    # Pass 2: keep only the exports in use, export the state, meter, compile. The module
    # that defines the memory defines the fuel counter; the modules instantiated after it
    # (the interpreter's libraries) tick on that counter; those before it are the
    # component's own trampolines, which the reference's engines do not have.
    counter_owner = next(
        (index for index, _, module_bytes in renamed if wasm_binary.defines_memory(module_bytes)),
        None,
    )
    if counter_owner is None:
        raise UnsupportedComponent("no core module defines a memory")
    metered = False
    steps: list[Step] = []
    host_types: dict[int, tuple[str, str]] = {}
    compiled: dict[str, wasmtime.Module] = {}
    for position, (index, module_index, module_bytes) in enumerate(renamed):
        rewritten = wasm_binary.export_definitions(
            module_bytes, memories=True, tables=True, keep=wiring.used.get(f"i{index}", set())
        )
        if index == counter_owner:
            rewritten = metering.instrument(rewritten)
            metered = True
        elif metered and wasm_binary.has_code(rewritten):
            rewritten = metering.instrument(rewritten, (f"i{counter_owner}", METER_EXPORT))
        file_name = hashlib.sha256(rewritten).hexdigest()[:32] + ".cwasm"
        module = compiled.get(file_name) or _reused(engine, reusable.get(file_name), directory)
        if module is None:
            progress(
                f"compiling core module {module_index} ({len(rewritten) >> 10} KiB)",
                position / len(renamed),
            )
            module = wasmtime.Module(engine, rewritten)
            (directory / file_name).write_bytes(module.serialize())
        compiled[file_name] = module
        for item in module.imports:
            if item.module == HOST_NAMESPACE:
                assert isinstance(item.type, wasmtime.FuncType)
                host_types[int(str(item.name)[1:])] = core_signature(item.type)
        steps.append(_step(index, file_name, module))
    host = tuple(
        _host_func(component, wiring, index, signature, memory)
        for index, signature in sorted(host_types.items())
    )
    if sum(len(step.memories) for step in steps) != 1:
        raise UnsupportedComponent("only components with exactly one linear memory are supported")
    body = {"steps": steps, "host": host, "entry": entry}
    plan_id = _digest(json.loads(json.dumps(body, default=asdict)))
    plan = Plan(plan_id, tuple(steps), host, entry)
    save(directory, plan)
    return plan


def _reused(
    engine: wasmtime.Engine, source: Path | None, directory: Path
) -> wasmtime.Module | None:
    """The compiled module at `source`, copied into `directory`; None if there is none or
    wasmtime refuses it (then it is compiled again)."""
    if source is None:
        return None
    target = directory / source.name
    shutil.copyfile(source, target)
    try:
        return wasmtime.Module.deserialize_file(engine, str(target))
    except wasmtime.WasmtimeError:
        target.unlink()
        return None


def save(directory: Path, plan: Plan) -> None:
    (directory / PLAN_FILE).write_text(json.dumps(plan.to_json(), indent=1))


def _step(instance: int, file_name: str, module: wasmtime.Module) -> Step:
    memories: list[str] = []
    tables: list[str] = []
    globals_: list[tuple[str, str]] = []
    for export in module.exports:  # the order of the definitions: stable
        kind = wasm_binary.state_export(export.name)
        if kind == "memory":
            memories.append(export.name)
        elif kind == "table":
            tables.append(export.name)
        elif kind == "global":
            global_type = export.type
            assert isinstance(global_type, wasmtime.GlobalType)
            if not global_type.mutable:
                continue
            content = str(global_type.content)
            if content not in ("i32", "i64", "f32", "f64"):
                raise UnsupportedComponent(f"mutable {content} globals cannot be snapshotted")
            globals_.append((export.name, content))
    return Step(instance, file_name, tuple(memories), tuple(tables), tuple(globals_))


def _host_func(
    component: parsed.Component,
    wiring: _Wiring,
    index: int,
    signature: tuple[str, str],
    memory: Source,
) -> HostFunc:
    func = component.core_funcs[index]
    if isinstance(func, parsed.ResourceDrop):
        interface, resource = component.imported_resource(func.type_index)
        if signature != ("i", ""):
            raise UnsupportedComponent(f"resource drop of {resource} has signature {signature}")
        return HostFunc(index, interface, resource, True, *signature, None)
    assert isinstance(func, parsed.Lower)
    interface, name = component.lowered_import(func.func)
    options = func.options
    if not options.utf8:
        raise UnsupportedComponent(f"{interface}#{name} is lowered with a non-UTF-8 encoding")
    if options.memory is not None and wiring.item("memory", options.memory) != memory:
        raise UnsupportedComponent(f"{interface}#{name} is lowered with another memory")
    implementation = lookup(interface, name)
    if implementation is not None and signature != (
        implementation.params,
        implementation.results,
    ):
        raise UnsupportedImport(
            f"{interface}#{name} is imported with core signature {signature}, the WASI host "
            f"implements {(implementation.params, implementation.results)}"
        )
    realloc = wiring.item("func", options.realloc) if options.realloc is not None else None
    return HostFunc(index, interface, name, False, *signature, realloc)


@dataclass(frozen=True)
class ComponentArtifact:
    """A decomposed component loaded into a wasmtime engine: its plan, one compiled
    module per step, the core type of each host function and the mutable globals by
    snapshot key (as linker source and value type)."""

    plan: Plan
    modules: tuple[wasmtime.Module, ...]
    host_types: tuple[wasmtime.FuncType, ...]
    globals: dict[str, tuple[Source, str]]


def load(engine: wasmtime.Engine, directory: Path) -> ComponentArtifact:
    """Load a decomposition: read the plan, deserialize (memory-map) its modules."""
    plan = Plan.from_json(json.loads((directory / PLAN_FILE).read_text()))
    loaded: dict[str, wasmtime.Module] = {}
    for step in plan.steps:
        if step.module not in loaded:
            path = directory / step.module
            loaded[step.module] = wasmtime.Module.deserialize_file(engine, str(path))
    modules = tuple(loaded[step.module] for step in plan.steps)
    host_types = tuple(functype(func.params, func.results) for func in plan.host)
    globals_ = {
        f"{step.instance}/{name}": ((f"i{step.instance}", name), kind)
        for step in plan.steps
        for name, kind in step.globals
    }
    return ComponentArtifact(plan, modules, host_types, globals_)
