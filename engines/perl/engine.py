"""Perl 5.42 on zeroperl: a prebuilt core reactor module from the npm registry.

The module exports a small C API (`zeroperl_init`, `zeroperl_eval`, variables, values).
At init the guest driver (`driver.pl`) is evaluated once; each execution then puts the
serialized `ExecuteRequest` into `$SBW::request`, evaluates `SBW::run()` and reads the
serialized `ExecuteResponse` from `$SBW::response`. The protobuf codec, env, cwd and the
value/error mapping (spec 3.2, 3.3, 7.8, 9.4) all live in the driver.

Snapshots: the prepared module exports every global (`engines.snapshot.export_globals`),
so memory + globals of a live instance can be copied into a fresh, uninitialised one.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import wasmtime

from engines.module import ModuleGuest, SnapshotModuleEngine, preview1_host
from engines.perl.pins import PERL_VERSION, ZEROPERL

_REQUEST_VAR = b"SBW::request"
_RESPONSE_VAR = b"SBW::response"
_VERSION_VAR = b"SBW::version"
_RUN = b"SBW::run()"
_SCALAR_CONTEXT = 1


class PerlGuestError(RuntimeError):
    """The zeroperl C API reported a failure (the interpreter or driver is broken)."""


def driver_source() -> str:
    """The Perl guest driver (installed as package data)."""
    return resources.files("engines.perl").joinpath("driver.pl").read_text(encoding="utf-8")


_WASI = "wasi_snapshot_preview1"
_ENOSYS = 52


def _no_poll(*_args: int) -> int:
    """`poll_oneoff` (Perl's sleep and select) would block the host thread where neither
    fuel nor epochs can stop it: ENOSYS (spec 9.3)."""
    return _ENOSYS


def _link(
    engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
) -> wasmtime.Instance:
    """Instantiate with wasmtime's WASI for what touches no file, our preview 1 host for
    descriptors and paths, no `poll_oneoff`, and a stub for the JS host bridge."""
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    preview1_host(store).define(linker, module, store)
    for item in module.imports:
        if item.module == _WASI and item.name == "poll_oneoff":
            func_type = item.type
            assert isinstance(func_type, wasmtime.FuncType)
            linker.define_func(_WASI, "poll_oneoff", func_type, _no_poll)
    # zeroperl calls env.call_host_function only for functions registered with
    # zeroperl_register_function, which the driver never does; 0 means "no value".
    i32 = wasmtime.ValType.i32()
    linker.define_func(
        "env", "call_host_function", wasmtime.FuncType([i32] * 3, [i32]), _no_host_function
    )
    return linker.instantiate(store, module)


def _no_host_function(_func_id: int, _argc: int, _argv: int) -> int:
    return 0


class PerlGuest(ModuleGuest):
    """A zeroperl instance: linked, then booted (driver loaded) or restored."""

    def __init__(
        self, engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
    ) -> None:
        instance = _link(engine, module, store)
        # Looking exports up builds a dict of all ~200 of them: do it once.
        exports = instance.exports(store)
        super().__init__(store, instance, exports["memory"])
        self._funcs = {
            name: item for name, item in exports.items() if isinstance(item, wasmtime.Func)
        }
        self.names: dict[str, int] = {}
        """Guest addresses of NUL-terminated names allocated once at boot (in linear
        memory, so they survive snapshot/restore unchanged)."""
        self.perl_version = ""

    def _export(self, name: str) -> wasmtime.Func:
        return self._funcs[name]

    def _alloc(self, data: bytes) -> int:
        pointer = int(self._export("malloc")(self.store, max(len(data), 1)))
        if pointer == 0:
            raise PerlGuestError("zeroperl malloc failed")
        self.memory.write(self.store, data, pointer)
        return pointer

    def _free(self, pointer: int) -> None:
        self._export("free")(self.store, pointer)

    def eval(self, pointer: int) -> None:
        """Evaluate the NUL-terminated Perl source at `pointer` (scalar context)."""
        status = self._export("zeroperl_eval")(self.store, pointer, _SCALAR_CONTEXT, 0, 0)
        if status != 0:
            raise PerlGuestError(f"zeroperl_eval failed ({status}): {self.last_error()}")

    def last_error(self) -> str:
        pointer = int(self._export("zeroperl_last_error")(self.store))
        if pointer == 0:
            return ""
        data = self.memory.read(self.store, pointer, pointer + 4096)
        return data.split(b"\0", 1)[0].decode("utf-8", "replace")

    def set_bytes(self, name: int, data: bytes) -> None:
        """Set the scalar named at guest address `name` to a byte string."""
        buffer = self._alloc(data)
        try:
            value = int(self._export("zeroperl_new_string")(self.store, buffer, len(data)))
        finally:
            self._free(buffer)
        if value == 0:
            raise PerlGuestError("zeroperl_new_string failed")
        try:
            if not self._export("zeroperl_set_var")(self.store, name, value):
                raise PerlGuestError("zeroperl_set_var failed")
        finally:
            self._export("zeroperl_value_free")(self.store, value)

    def get_bytes(self, name: int) -> bytes:
        """The bytes of the scalar named at guest address `name` (UTF-8 if it is text)."""
        value = int(self._export("zeroperl_get_var")(self.store, name))
        if value == 0:
            raise PerlGuestError("zeroperl_get_var failed")
        length_pointer = self._alloc(b"\0\0\0\0")
        try:
            pointer = int(self._export("zeroperl_to_string")(self.store, value, length_pointer))
            length = int.from_bytes(
                self.memory.read(self.store, length_pointer, length_pointer + 4), "little"
            )
            return (
                bytes(self.memory.read(self.store, pointer, pointer + length)) if pointer else b""
            )
        finally:
            self._free(length_pointer)
            self._export("zeroperl_value_free")(self.store, value)

    def boot(self) -> None:
        """`_initialize`, `zeroperl_init`, the names, then the driver."""
        self._export("_initialize")(self.store)
        status = self._export("zeroperl_init")(self.store)
        if status != 0:
            raise PerlGuestError(f"zeroperl_init failed ({status}): {self.last_error()}")
        self.names = {
            "request": self._alloc(_REQUEST_VAR + b"\0"),
            "response": self._alloc(_RESPONSE_VAR + b"\0"),
            "version": self._alloc(_VERSION_VAR + b"\0"),
            "run": self._alloc(_RUN + b"\0"),
        }
        source = self._alloc(driver_source().encode() + b"\0")
        try:
            self.eval(source)
        finally:
            self._free(source)
        self.perl_version = self.get_bytes(self.names["version"]).decode()

    def call(self, request: bytes) -> bytes:
        """Run one serialized `ExecuteRequest`; return the serialized `ExecuteResponse`."""
        self.set_bytes(self.names["request"], request)
        self.eval(self.names["run"])
        self._export("zeroperl_flush")(self.store)
        # zeroperl_to_string upgrades the byte string to UTF-8 (each byte as a Latin-1
        # character); undo that to recover the protobuf bytes.
        return self.get_bytes(self.names["response"]).decode("utf-8").encode("latin-1")

    def host_state(self) -> dict[str, Any]:
        return {"names": dict(self.names), "perl_version": self.perl_version}

    def load_host_state(self, state: dict[str, Any]) -> None:
        self.names = dict(state["names"])
        self.perl_version = str(state["perl_version"])


class PerlEngine(SnapshotModuleEngine):
    language = "perl"
    version = PERL_VERSION
    engine = f"Perl {PERL_VERSION} / zeroperl {ZEROPERL.version}"
    artifact = ZEROPERL
    build_inputs = ("pins.py", "driver.pl")
    """What the prepared module and its snapshots depend on (not this host adapter)."""
    fuel = 10_000_000
    """Spec 9.1, in the reference's units (`engines.metering`)."""
    memory_bytes = 64 << 20
    contexts = True
    devices = True

    def link(
        self, engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
    ) -> PerlGuest:
        return PerlGuest(engine, module, store)


ENGINE = PerlEngine()
