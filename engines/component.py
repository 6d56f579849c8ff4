"""Host side shared by the component guests (Python, JavaScript): WASI p2 linking and the
one `run: func(request: list<u8>) -> list<u8>` export that carries the envelopes."""

from __future__ import annotations

import wasmtime
import wasmtime.component

from engines.language import PrepareError

EXPORT = "run"


class ComponentGuest:
    """A live component instance with its `run` export (a `GuestInstance`)."""

    def __init__(self, store: wasmtime.Store, run: wasmtime.component.Func, language: str) -> None:
        self._store = store
        self._run = run
        self._language = language

    def call(self, request: bytes) -> bytes:
        response = self._run(self._store, request)
        if isinstance(response, list):  # some bindings hand list<u8> back as a list
            response = bytes(response)
        if not isinstance(response, bytes):
            kind = type(response).__name__
            raise TypeError(f"{self._language} guest returned {kind}, not bytes")
        return response


def instantiate_component(
    engine: wasmtime.Engine,
    artifact: wasmtime.Module | wasmtime.component.Component,
    store: wasmtime.Store,
    language: str,
) -> ComponentGuest:
    """Link WASI p2 only (no wasi:http; sockets are linked but denied by the store's WASI
    configuration) and instantiate; the guest's start-up ran at build time (Wizer)."""
    if not isinstance(artifact, wasmtime.component.Component):
        raise TypeError(f"the {language} engine needs a component artifact")
    linker = wasmtime.component.Linker(engine)
    linker.add_wasip2()
    instance = linker.instantiate(store, artifact)
    run = instance.get_func(store, EXPORT)
    if run is None:
        raise PrepareError(f"the {language} component has no `{EXPORT}` export; prepare it again")
    return ComponentGuest(store, run, language)
