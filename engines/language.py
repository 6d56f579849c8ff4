"""The contract between the shared host (sessions, cache, limits) and one language's engine.

Each language package (`engines/<language>/`) exposes `ENGINE`, an instance of a
`LanguageEngine` subclass. The shared host creates the wasmtime `Engine` and `Store`
(fuel, epoch interruption, memory cap, WASI with an empty environment, the preopens, and
stdout/stderr capture), then asks the language to instantiate its guest. One execution is
one `GuestInstance.call(request) -> response` with protobuf envelopes (proto/envelope.proto).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import wasmtime
import wasmtime.component

from engines.host import WORKSPACE, OutputCapture, make_store
from engines.snapshot import MemorySnapshot

Progress = Callable[[str, float], None]
"""Reports a preparation step: a short label and the fraction done (0.0 to 1.0)."""


class GuestInstance(Protocol):
    """One live guest interpreter inside one store."""

    def call(self, request: bytes) -> bytes:
        """Run one serialized `ExecuteRequest`; return a serialized `ExecuteResponse`.

        Traps (fuel, epoch interrupt, guest exit) propagate as wasmtime exceptions.
        Adapters may also offer `memory_size() -> int` (linear memory bytes, for
        `usage.memoryBytes`); component guests cannot, and report 0.
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
    fuel: int
    """Default fuel budget per execution."""
    memory_bytes: int
    """Linear memory cap."""
    contexts: bool = True
    """Supports stateful sessions (REPL contexts)."""
    snapshots: bool = False
    """Supports memory snapshots (core modules only)."""
    requirements: tuple[str, ...] = ()
    """Host programs needed to prepare the engine (e.g. "npm")."""
    argv: tuple[str, ...] = ()
    preopens: tuple[Preopen, ...] = ()
    build_inputs: tuple[str, ...] = ("**/*",)
    """Glob patterns (relative to the language package) of the files that shape the
    prepared engine; see `inputs_digest`."""
    console_in_envelope: bool = False
    """The guest reports its logs in `ExecuteResponse.console` (JavaScript's console.*)
    instead of writing stdout/stderr through WASI."""

    def new_store(
        self,
        engine: wasmtime.Engine,
        output: OutputCapture,
        *,
        workspace: Path | None,
        scratch: Path | None = None,
        memory_bytes: int | None = None,
    ) -> wasmtime.Store:
        """A store for this guest: its memory cap, argv and preopens (`/workspace` when
        given, plus the language's own, whose host dirs are made under `scratch`)."""
        mounts = [] if workspace is None else [(workspace, WORKSPACE, True)]
        if self.preopens and scratch is None:
            raise ValueError(f"{self.language} needs a scratch dir for its preopens")
        for preopen in self.preopens:
            assert scratch is not None
            host_dir = preopen.make_host_dir(scratch / preopen.guest_path.strip("/"))
            mounts.append((host_dir, preopen.guest_path, preopen.writable))
        return make_store(
            engine,
            output,
            memory_bytes=memory_bytes or self.memory_bytes,
            argv=self.argv,
            preopens=tuple(mounts),
        )

    def inputs_digest(self) -> str:
        """Identity of everything that shapes the prepared engine: the engine string and
        the files matching `build_inputs` (guest drivers, WIT, lockfiles). A prepared
        engine whose digest differs is prepared again, and its snapshots are dropped."""
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
        self,
        engine: wasmtime.Engine,
        artifact: wasmtime.Module | wasmtime.component.Component,
        store: wasmtime.Store,
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
        artifact: wasmtime.Module | wasmtime.component.Component,
        store: wasmtime.Store,
        snapshot: MemorySnapshot,
    ) -> GuestInstance:
        """Instantiate without running initialisers and load `snapshot` into it."""
        raise NotImplementedError(f"{self.language} has no memory snapshots")
