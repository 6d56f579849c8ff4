"""The contract between the shared host (sessions, cache, limits) and one language's engine.

Each language package (`engines/<language>/`) has the same files: `__init__.py` exports
`ENGINE`, the instance of the `LanguageEngine` subclass in `engine.py` (with its host
adapter), `pins.py` what it is prepared from, and next to them the guest driver it runs
(`driver.pl`, `driver.rb`, `guest/`). Core modules build on `engines.module`, components
on `engines.decomposed` (run as core modules with our own WASI 0.2 host). The shared host
creates the wasmtime `Engine`, asks the language for a `Store` (fuel, epoch interruption,
memory cap, WASI with an empty environment, the preopens, and stdout/stderr capture),
then asks it to instantiate its guest. One execution is one
`GuestInstance.call(request) -> response` with protobuf envelopes (proto/envelope.proto).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import wasmtime

from engines.decomposed.plan import DecomposedArtifact
from engines.host import WORKSPACE, OutputCapture, make_engine, make_store
from engines.snapshot import MemorySnapshot

Progress = Callable[[str, float], None]
"""Reports a preparation step: a short label and the fraction done (0.0 to 1.0)."""

Artifact = wasmtime.Module | DecomposedArtifact
"""A prepared engine loaded into a wasmtime `Engine`: a core module, or a component's
core modules with their wiring plan."""


class GuestInstance(Protocol):
    """One live guest interpreter inside one store."""

    def call(self, request: bytes) -> bytes:
        """Run one serialized `ExecuteRequest`; return a serialized `ExecuteResponse`.

        Traps (fuel, epoch interrupt, guest exit) propagate as wasmtime exceptions.
        Adapters may also offer `memory_size() -> int` (linear memory bytes, for
        `usage.memoryBytes`).
        """
        ...


@dataclass(frozen=True)
class Preopen:
    """An extra directory the guest sees besides `/workspace` (e.g. Perl's `/dev`)."""

    guest_path: str
    make_host_dir: Callable[[Path], Path]
    """Creates (idempotently) the host directory under the given private scratch dir."""
    writable: bool = False


class PrepareError(Exception):
    """An engine cannot be prepared; the message says why and how to fix it."""


class LanguageEngine(ABC):
    """Static description and host adapter of one language's engine."""

    language: str
    """Language id as on the wire: javascript, python, perl, ruby."""
    engine: str
    """The engine string reported in `ExecutionResult.engine`."""
    version: str
    """Interpreter version, e.g. 3.14.0."""
    kind: Literal["component", "module"]
    """What `prepare` produces: a core module or a component."""
    compiled_format: str = ""
    """Part of the compiled entry's cache key besides the Wasm, wasmtime and the engine
    configuration: bump it when `compile` changes what it writes."""
    compiled_suffix: str = ".cwasm"
    """The compiled entry's suffix: "" when `compile` writes a directory."""
    fuel: int
    """Default fuel budget per execution."""
    memory_bytes: int
    """Linear memory cap."""
    contexts: bool = True
    """Supports stateful sessions (REPL contexts)."""
    snapshots: bool = False
    """Supports memory snapshots."""
    requirements: tuple[str, ...] = ()
    """Host programs needed to prepare the engine (e.g. "npm")."""
    argv: tuple[str, ...] = ()
    preopens: tuple[Preopen, ...] = ()
    build_inputs: tuple[str, ...]
    """Glob patterns (relative to the language package) of the files that shape the
    prepared engine and its snapshots (guest driver, WIT, lockfiles, the pin of a
    downloaded module), never the host adapter; see `inputs_digest`."""
    console_in_envelope: bool = False
    """The guest reports its logs in `ExecuteResponse.console` (JavaScript's console.*)
    instead of writing stdout/stderr through WASI."""

    def new_engine(self) -> wasmtime.Engine:
        """The wasmtime engine this guest is compiled for and runs in."""
        return make_engine()

    def mounts(
        self, workspace: Path | None, scratch: Path | None
    ) -> tuple[tuple[Path, str, bool], ...]:
        """The guest's preopens as (host_dir, guest_path, writable): `/workspace` when
        given, plus the language's own, whose host dirs are made under `scratch`."""
        mounts = [] if workspace is None else [(workspace, WORKSPACE, True)]
        if self.preopens and scratch is None:
            raise ValueError(f"{self.language} needs a scratch dir for its preopens")
        for preopen in self.preopens:
            assert scratch is not None
            host_dir = preopen.make_host_dir(scratch / preopen.guest_path.strip("/"))
            mounts.append((host_dir, preopen.guest_path, preopen.writable))
        return tuple(mounts)

    def new_store(
        self,
        engine: wasmtime.Engine,
        output: OutputCapture,
        *,
        workspace: Path | None,
        scratch: Path | None = None,
        memory_bytes: int | None = None,
        wake: threading.Event | None = None,
        write_gate: Callable[[], bool] | None = None,
    ) -> wasmtime.Store:
        """A store for this guest: its memory cap, argv and `mounts`. `wake` is set when
        the running execution is interrupted (a host that blocks in its own waits ends
        them then; wasmtime's WASI cannot, its waits are left to the engine process).
        `write_gate` is asked before each change to the file system by a host of our own
        (wasmtime's WASI has no such hook: the write guard's own thread covers it)."""
        return make_store(
            engine,
            output,
            memory_bytes=memory_bytes or self.memory_bytes,
            argv=self.argv,
            preopens=self.mounts(workspace, scratch),
        )

    def compile(
        self, engine: wasmtime.Engine, wasm: Path, target: Path, progress: Progress
    ) -> None:
        """Compile the prepared Wasm for `engine` into the new file (or, for engines with
        `compiled_suffix = ""`, directory) `target`."""
        progress("compiling", 0.0)
        target.write_bytes(wasmtime.Module.from_file(engine, str(wasm)).serialize())

    def load_compiled(self, engine: wasmtime.Engine, compiled: Path) -> Artifact:
        """Load what `compile` wrote into `engine` (memory-mapped, fast)."""
        return wasmtime.Module.deserialize_file(engine, str(compiled))

    def inputs_digest(self) -> str:
        """Identity of everything that shapes the prepared engine: the engine string and
        the files matching `build_inputs`. A prepared engine whose digest differs is
        prepared again, and its snapshots are dropped."""
        cached: str | None = getattr(self, "_inputs_digest", None)
        if cached is not None:
            return cached
        import hashlib
        import inspect

        digest = hashlib.sha256(f"{self.engine}|{self.version}|{self.kind}".encode())
        package_dir = Path(inspect.getfile(type(self))).parent
        paths = {path for pattern in self.build_inputs for path in package_dir.glob(pattern)}
        for path in sorted(paths):
            skipped = {"__pycache__", "node_modules"} & set(path.parts)
            if path.is_file() and not skipped and path.suffix not in {".pyc", ".wasm"}:
                digest.update(str(path.relative_to(package_dir)).encode())
                digest.update(path.read_bytes())
        self._inputs_digest = digest.hexdigest()
        return self._inputs_digest

    @abstractmethod
    def prepare(self, work_dir: Path, progress: Progress) -> Path:
        """Fetch (and verify) or build the engine's Wasm inside `work_dir`; return its path.

        Raises `PrepareError` with an actionable message on failure.
        """

    @abstractmethod
    def instantiate(
        self, engine: wasmtime.Engine, artifact: Artifact, store: wasmtime.Store
    ) -> GuestInstance:
        """Link and instantiate the guest in `store`, run its initialisation, return it."""

    def take_snapshot(
        self,
        store: wasmtime.Store,
        instance: GuestInstance,
        into: MemorySnapshot | None = None,
    ) -> MemorySnapshot:
        """Capture the instance's state, updating `into` (its previous snapshot) in place
        when given (engines with `snapshots = True` override this)."""
        raise NotImplementedError(f"{self.language} has no memory snapshots")

    def restore(
        self,
        engine: wasmtime.Engine,
        artifact: Artifact,
        store: wasmtime.Store,
        snapshot: MemorySnapshot,
    ) -> GuestInstance:
        """Instantiate without running initialisers and load `snapshot` into it."""
        raise NotImplementedError(f"{self.language} has no memory snapshots")
