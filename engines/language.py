"""The contract between the shared host (sessions, cache, limits) and one language's engine.

Each language package (`engines/<language>/`) has the same files: `__init__.py` exports
`ENGINE`, the instance of the `LanguageEngine` subclass in `engine.py` (with its host
adapter), `pins.py` what it is prepared from, and next to them the guest driver it runs
(`driver.pl`, `driver.rb`, `guest/`). Core modules build on `engines.module`, components
on `engines.components` (run as core modules with our own WASI 0.2 host). The shared host
creates the wasmtime `Engine`, asks the language for a `Store` (epoch interruption,
memory cap, WASI with an empty environment, its mounts as `VirtualFS` trees, and
stdout/stderr capture), then asks it to instantiate its guest. One execution is one
`GuestInstance.call(request) -> response` with protobuf envelopes (proto/envelope.proto).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, Protocol

import wasmtime

from engines import metering
from engines.components.plan import ComponentArtifact
from engines.host import WORKSPACE, OutputCapture, make_engine, make_wasi_store
from engines.metering import Meter
from engines.preview1 import Preview1Host
from engines.snapshot import MemorySnapshot
from engines.vfs import Mount, VirtualFS

Progress = Callable[[str, float], None]
"""Reports a preparation step: a short label and the fraction done (0.0 to 1.0)."""

Artifact = wasmtime.Module | ComponentArtifact
"""A prepared engine loaded into a wasmtime `Engine`: a core module, or a component's
core modules with their wiring plan."""


class GuestInstance(Protocol):
    """One live guest interpreter inside one store."""

    meter: Meter
    """Its fuel counter (it starts unmetered; the session sets each call's budget)."""

    def call(self, request: bytes) -> bytes:
        """Run one serialized `ExecuteRequest`; return a serialized `ExecuteResponse`.

        Traps (fuel, epoch interrupt, guest exit) propagate as wasmtime exceptions; fuel
        exhaustion is an `unreachable` trap with `meter.remaining` at 0.
        Adapters may also offer `memory_size() -> int` (linear memory bytes, for
        `usage.memoryBytes`).
        """
        ...


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
    restores_into_fresh_instance: bool = False
    """A fresh instance is also what a restore loads a snapshot into (no initialiser runs
    at instantiation: they ran at build time), so one can be made before the restore point
    is there (`Session.prepare`), and `load_snapshot` loads it."""
    requirements: tuple[str, ...] = ()
    """Host programs needed to prepare the engine (e.g. "npm")."""
    argv: tuple[str, ...] = ()
    devices: bool = False
    """The guest sees a read-only `/dev` holding `null` (after `/workspace`)."""
    build_inputs: tuple[str, ...]
    """Glob patterns (relative to the language package) of the files that shape the
    prepared engine and its snapshots (guest driver, WIT, lockfiles, the pin of a
    downloaded module), never the host adapter; see `inputs_digest`."""
    result_limit_on_envelope: bool = False
    """The 64 KiB result limit measures the driver's whole answer (results and error, so a
    traceback too), not only the results (spec 3.2: Ruby)."""
    console_in_envelope: bool = False
    """The guest reports its logs in `ExecuteResponse.console` (JavaScript's console.*)
    instead of writing stdout/stderr through WASI."""

    def new_engine(self) -> wasmtime.Engine:
        """The wasmtime engine this guest is compiled for and runs in."""
        return make_engine()

    def mounts(self, workspace: VirtualFS | None) -> list[Mount]:
        """The guest's preopens, in the order its libc numbers them: `/workspace` when
        given, then `/dev` for a language with `devices`."""
        mounts = [] if workspace is None else [Mount(WORKSPACE, workspace)]
        if self.devices:
            mounts.append(Mount("/dev", VirtualFS.devices()))
        return mounts

    def new_store(
        self,
        engine: wasmtime.Engine,
        output: OutputCapture,
        *,
        workspace: VirtualFS | None,
        memory_bytes: int | None = None,
        wake: threading.Event | None = None,
    ) -> wasmtime.Store:
        """A store for this guest: its memory cap, argv and `mounts`, and a preview 1
        host as its data (`engines.preview1`). `wake` is set when the running execution
        is interrupted (a host that blocks in its own waits ends them then; wasmtime's
        WASI cannot, its waits are left to the engine process)."""
        host = Preview1Host(self.mounts(workspace), output.on_stdout, output.on_stderr)
        return make_wasi_store(
            engine,
            memory_bytes=self.memory_bytes if memory_bytes is None else memory_bytes,
            argv=self.argv,
            data=host,
        )

    def compile(
        self,
        engine: wasmtime.Engine,
        wasm: Path,
        target: Path,
        progress: Progress,
        reusable: Mapping[str, Path] | None = None,
    ) -> None:
        """Meter and compile the prepared Wasm for `engine` into the new file (or, for
        engines with `compiled_suffix = ""`, directory) `target`. `reusable`: files of a
        damaged entry of the same key that are still intact, by name (an engine of
        several modules copies those it would compile again; one module ignores them)."""
        progress("metering", 0.0)
        try:
            metered = metering.instrument(wasm.read_bytes())
        except (ValueError, IndexError) as error:
            raise PrepareError(f"cannot meter the {self.language} engine: {error}") from error
        progress("compiling", 0.1)
        target.write_bytes(wasmtime.Module(engine, metered).serialize())

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

    def load_snapshot(
        self, store: wasmtime.Store, instance: GuestInstance, snapshot: MemorySnapshot
    ) -> None:
        """Load `snapshot` into a fresh, never-called instance (engines with
        `restores_into_fresh_instance` override this)."""
        raise NotImplementedError(f"{self.language} cannot restore into a fresh instance")
