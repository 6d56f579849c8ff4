"""Core-module engines with memory snapshots (Perl, Ruby).

Each is a prebuilt reactor module from the npm registry, pinned by sha256 in the
language's `pins.py` and rewritten at prepare time to export its globals
(`engines.snapshot.export_globals`). The language supplies only its guest adapter (a
`ModuleGuest`): how to link the module, boot the interpreter and call it, and what host
state a snapshot must carry besides memory and globals.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Literal

import wasmtime

from engines import snapshot as snapshots
from engines.fetch import NpmArtifact, fetch_pinned
from engines.language import Artifact, GuestInstance, LanguageEngine, PrepareError, Progress
from engines.metering import METER_EXPORT, UNMETERED, Meter
from engines.preview1 import Preview1Host
from engines.snapshot import MemorySnapshot


class ModuleGuest(ABC):
    """One live interpreter instance of a core module in one store (a `GuestInstance`)."""

    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance, memory: Any) -> None:
        """`memory`: the instance's `memory` export."""
        assert isinstance(memory, wasmtime.Memory)
        self.store = store
        self.instance = instance
        self.memory = memory
        self.wasi = preview1_host(store)
        self.wasi.attach(store, memory)
        self.meter = Meter(store, instance.exports(store).get(METER_EXPORT))
        self.meter.remaining = UNMETERED  # booting is the interpreter's own start-up

    def memory_size(self) -> int:
        """Current linear memory size in bytes (`usage.memoryBytes`)."""
        return int(self.memory.data_len(self.store))

    @abstractmethod
    def boot(self) -> None:
        """Run the module's initialisers, start the interpreter and load the guest driver."""

    @abstractmethod
    def call(self, request: bytes) -> bytes:
        """Run one serialized `ExecuteRequest`; return the serialized `ExecuteResponse`."""

    @abstractmethod
    def host_state(self) -> dict[str, Any]:
        """Everything the host holds besides memory and globals (a snapshot's `extra`)."""

    @abstractmethod
    def load_host_state(self, state: dict[str, Any]) -> None:
        """Take back what `host_state` returned (after JSON, whose object keys are strings)."""


def preview1_host(store: wasmtime.Store) -> Preview1Host:
    """The preview 1 host a store made by `LanguageEngine.new_store` carries."""
    host = store.data()
    if not isinstance(host, Preview1Host):
        raise TypeError("the store was not made by its engine")
    return host


class SnapshotModuleEngine(LanguageEngine):
    """A pinned prebuilt core module whose live state can be snapshotted and restored."""

    kind: Literal["component", "module"] = "module"
    snapshots = True
    artifact: NpmArtifact
    """The pinned module (from the language's `pins.py`)."""

    @abstractmethod
    def link(
        self, engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
    ) -> ModuleGuest:
        """Instantiate `module` in `store` without running any of its initialisers."""

    def prepare(self, work_dir: Path, progress: Progress) -> Path:
        """Download the pinned module, verify its sha256, export its globals."""
        original = fetch_pinned(self.artifact, work_dir, progress)
        progress("exporting globals for snapshots", 0.8)
        try:
            rewritten = snapshots.export_globals(original.read_bytes())
        except (ValueError, IndexError) as error:
            raise PrepareError(f"cannot rewrite {original.name}: {error}") from error
        prepared = original.with_name(f"{original.stem}.globals.wasm")
        prepared.write_bytes(rewritten)
        original.unlink()
        progress("ready", 1.0)
        return prepared

    def instantiate(
        self, engine: wasmtime.Engine, artifact: Artifact, store: wasmtime.Store
    ) -> ModuleGuest:
        guest = self.link(engine, self._module(artifact), store)
        guest.boot()
        return guest

    # take_snapshot and restore repeat the signatures of LanguageEngine's, which they implement.
    def take_snapshot(
        self,
        store: wasmtime.Store,
        instance: GuestInstance,
        into: MemorySnapshot | None = None,
    ) -> MemorySnapshot:
        """Memory + exported globals + the adapter's host state + the descriptor table.

        Restore into a store with the same mounts: wasi-libc keeps its preopen table in
        linear memory.
        """
        if not isinstance(instance, ModuleGuest):
            raise TypeError(f"not a {self.language} guest")
        taken = snapshots.take(store, instance.instance, into)
        taken.extra = {**instance.host_state(), "wasi": instance.wasi.state()}
        return taken

    def restore(
        self,
        engine: wasmtime.Engine,
        artifact: Artifact,
        store: wasmtime.Store,
        snapshot: MemorySnapshot,
    ) -> ModuleGuest:
        guest = self.link(engine, self._module(artifact), store)  # no initialiser runs
        snapshots.restore(store, guest.instance, snapshot)
        guest.load_host_state(snapshot.extra)
        guest.wasi.load(snapshot.extra.get("wasi"))
        return guest

    def _module(self, artifact: Artifact) -> wasmtime.Module:
        if not isinstance(artifact, wasmtime.Module):
            raise TypeError(f"the {self.language} engine is a core module")
        return artifact
