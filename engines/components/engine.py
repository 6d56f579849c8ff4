"""Component engines run as their core modules, with our WASI 0.2 host (Python, JavaScript).

wasmtime-py's component API reaches neither the linear memory nor the globals of the
core instances inside a component, so a component instance cannot be snapshotted.
Decomposed, the same core modules run under wasmtime's core API, wired exactly as the
component wires them (`plan`), with the WASI imports answered by `wasi` in Python: the
memory, the mutable globals and the host's resource table are then ours to snapshot and
restore. The language supplies only `prepare` (building the component).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import wasmtime

from engines.components import plan as plans
from engines.components.guest import ComponentGuest, initial_global_values
from engines.components.plan import ComponentArtifact
from engines.components.wasi.host import WasiHost
from engines.host import OutputCapture, new_store
from engines.language import Artifact, GuestInstance, LanguageEngine, PrepareError, Progress
from engines.snapshot import MemorySnapshot
from engines.vfs import VirtualFS


class SnapshotComponentEngine(LanguageEngine):
    """A component (Wizer-pre-initialised at build time) run as core modules, with
    snapshots."""

    kind: Literal["component", "module"] = "component"
    snapshots = True
    restores_into_fresh_instance = True
    compiled_format = f"decomposed/{plans.FORMAT}"
    compiled_suffix = ""

    # Same signature as LanguageEngine.new_store, which it overrides.
    def new_store(
        self,
        engine: wasmtime.Engine,
        output: OutputCapture,
        *,
        workspace: VirtualFS | None,
        memory_bytes: int | None = None,
        wake: threading.Event | None = None,
    ) -> wasmtime.Store:
        """A store whose data is the guest's WASI host (see `LanguageEngine.new_store`);
        a blocking wait in the host ends when `wake` is set."""
        host = WasiHost(
            mounts=self.mounts(workspace),
            stdout=output.on_stdout,
            stderr=output.on_stderr,
            argv=self.argv,
            wake=wake,
        )
        return new_store(
            engine,
            memory_bytes=self.memory_bytes if memory_bytes is None else memory_bytes,
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
        """Decompose the component into `target` (a new directory): its rewritten core
        modules, compiled (or copied from `reusable`), and the wiring plan."""
        target.mkdir(mode=0o700)
        try:
            plan = plans.decompose(wasm.read_bytes(), engine, target, progress, reusable or {})
            progress("recording the initial state", 0.95)
            initial = initial_global_values(plans.load(engine, target), engine, self.memory_bytes)
            plans.save(target, dataclasses.replace(plan, initial_globals=initial))
        except (ValueError, wasmtime.WasmtimeError) as error:
            raise PrepareError(
                f"cannot decompose the {self.language} component: {error}"
            ) from error

    def load_compiled(self, engine: wasmtime.Engine, compiled: Path) -> Artifact:
        return plans.load(engine, compiled)

    def instantiate(
        self, engine: wasmtime.Engine, artifact: Artifact, store: wasmtime.Store
    ) -> ComponentGuest:
        """Wire and instantiate the core modules; the guest's start-up ran at build time."""
        return ComponentGuest(self._artifact(artifact), store, self._host(store))

    # take_snapshot and restore repeat the signatures of LanguageEngine's, which they implement.
    def take_snapshot(
        self,
        store: wasmtime.Store,
        instance: GuestInstance,
        into: MemorySnapshot | None = None,
    ) -> MemorySnapshot:
        """Memory + mutable globals + the WASI host's resources and clock (`extra`)."""
        if not isinstance(instance, ComponentGuest):
            raise TypeError(f"not a {self.language} guest")
        return instance.snapshot(into)

    def restore(
        self,
        engine: wasmtime.Engine,
        artifact: Artifact,
        store: wasmtime.Store,
        snapshot: MemorySnapshot,
    ) -> ComponentGuest:
        guest = ComponentGuest(self._artifact(artifact), store, self._host(store))
        self.load_snapshot(store, guest, snapshot)
        return guest

    def load_snapshot(
        self, store: wasmtime.Store, instance: GuestInstance, snapshot: MemorySnapshot
    ) -> None:
        if not isinstance(instance, ComponentGuest):
            raise TypeError(f"not a {self.language} guest")
        instance.restore(snapshot)

    def _artifact(self, artifact: Artifact) -> ComponentArtifact:
        if not isinstance(artifact, ComponentArtifact):
            raise TypeError(f"the {self.language} engine runs a decomposed component")
        return artifact

    def _host(self, store: wasmtime.Store) -> WasiHost:
        host = store.data()
        if not isinstance(host, WasiHost):
            raise TypeError(f"the {self.language} store was not made by its engine")
        return host
