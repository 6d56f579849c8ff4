"""CRuby 4.0 (ruby.wasm 2.10.1) as a core reactor module with the old wit-bindgen ABI.

The prebuilt `ruby+stdlib.wasm` exports `ruby-init`, `rb-eval-string-protect`,
`rb-funcallv-protect`, `rstring-ptr` … whose values are `rb-abi-value` resources: the
guest calls the host to turn a raw pointer into a handle and back, so the host keeps that
handle table. The JavaScript bridge imports (`rb-js-abi-host`) are stubs: the guest driver
disables the `JS` methods at Ruby level, and the stubs trap with the spec's message if
reached anyway. Everything else of the protocol lives in `driver.rb`.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from importlib import resources
from typing import Any

import wasmtime

from engines.module import ModuleGuest, SnapshotModuleEngine, preview1_host
from engines.proto import envelope_pb2 as pb
from engines.ruby.pins import RUBY_VERSION, RUBY_WASM

INIT_ARGS = ("ruby.wasm", "-EUTF-8", "-e_=0")
"""`-EUTF-8`: default external encoding; `-e_=0`: ruby-init needs a script, give it a no-op."""
JS_DISABLED = "JavaScript host access is disabled"
DRIVER_FILE = "<sandbox-workbench>"
"""File name of the driver's frames; the driver strips them from user backtraces."""

_I32 = wasmtime.ValType.i32()


def _driver_source() -> str:
    return resources.files("engines.ruby").joinpath("driver.rb").read_text(encoding="utf-8")


class RubyEngineError(RuntimeError):
    """The guest failed in a way that is a host/driver bug, not a user error."""


@dataclass
class _Buffer:
    """A guest allocation the host reuses across calls (the guest never frees ABI args)."""

    pointer: int = 0
    capacity: int = 0


class RubyGuest(ModuleGuest):
    """One live Ruby VM in one store: the host side of the wit-bindgen ABI."""

    def __init__(
        self, engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
    ) -> None:
        """Instantiate only (no `_initialize`); `boot` or `load_host_state` completes it."""
        self.handles: dict[int, int] = {}
        self.next_handle = 1
        self.driver = 0
        self.run_id = 0
        self.code_buffer = _Buffer()
        self.args_buffer = _Buffer()
        self.ruby_version = ""
        instance = _linker(engine, module, self, store).instantiate(store, module)
        exports = instance.exports(store)
        # Export names carry their WIT signature after ':' ("ruby-init: func(...)").
        self._exports: dict[str, Any] = {name.split(":", 1)[0]: exports[name] for name in exports}
        super().__init__(store, instance, self._exports["memory"])

    # -- resource table (imports `canonical_abi.resource_{new,get}_rb-abi-value`) --------
    def _resource_new(self, raw: int) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.handles[handle] = raw
        return handle

    def _resource_get(self, handle: int) -> int:
        return self.handles[handle]

    def _drop(self, handle: int) -> None:
        raw = self.handles.pop(handle, None)
        if raw is not None:
            self._exports["canonical_abi_drop_rb-abi-value"](self.store, raw)

    # -- low-level helpers ---------------------------------------------------------------
    def _func(self, name: str, *args: int) -> Any:
        return self._exports[name](self.store, *args)

    def _write(self, buffer: _Buffer, data: bytes) -> int:
        if len(data) > buffer.capacity:
            capacity = max(len(data), 2 * buffer.capacity, 4096)
            buffer.pointer = self._func(
                "cabi_realloc", buffer.pointer, buffer.capacity, 4, capacity
            )
            buffer.capacity = capacity
        self.memory.write(self.store, data, buffer.pointer)
        return buffer.pointer

    def _pair(self, pointer: int) -> tuple[int, int]:
        first, second = struct.unpack("<ii", self.memory.read(self.store, pointer, pointer + 8))
        return first, second

    def _eval(self, code: str) -> int:
        """`rb-eval-string-protect`; returns a handle, raises on a non-zero tag."""
        data = code.encode()
        pointer = self._write(self.code_buffer, data + b"\0")
        handle, state = self._pair(self._func("rb-eval-string-protect", pointer, len(data)))
        if state:
            self._drop(handle)
            raise RubyEngineError(f"Ruby evaluation failed (tag {state})")
        return handle

    def _string(self, handle: int) -> bytes:
        area = self._func("rstring-ptr", handle)
        pointer, length = self._pair(area)
        data = bytes(self.memory.read(self.store, pointer, pointer + length))
        self._func("cabi_post_rstring-ptr", area)
        return data

    # -- lifecycle -----------------------------------------------------------------------
    def boot(self) -> None:
        """Run the reactor initialisers, start the VM and load the driver."""
        self._func("_initialize")
        pointers = []
        for argument in INIT_ARGS:
            data = argument.encode() + b"\0"
            pointer = self._func("cabi_realloc", 0, 0, 1, len(data))
            self.memory.write(self.store, data, pointer)
            pointers.append((pointer, len(data)))
        vector = self._func("cabi_realloc", 0, 0, 4, 8 * len(pointers))
        self.memory.write(self.store, b"".join(struct.pack("<ii", *p) for p in pointers), vector)
        self._func("ruby-init", vector, len(pointers))
        self._func("ruby-init-loadpath")
        source = base64.b64encode(_driver_source().encode()).decode()
        self.driver = self._eval(
            f"eval('{source}'.unpack1('m0').force_encoding('UTF-8'), TOPLEVEL_BINDING,"
            f" '{DRIVER_FILE}', 1)"
        )
        name = b"run\0"
        self.run_id = self._func("rb-intern", self._write(self.code_buffer, name), len(name) - 1)
        version = self._eval("RUBY_VERSION")
        self.ruby_version = self._string(version).decode()
        self._drop(version)

    def call(self, request: bytes) -> bytes:
        """Run one ExecuteRequest through the driver's `run`; return its ExecuteResponse."""
        argument = self._eval(f"'{base64.b64encode(request).decode()}'")
        try:
            arguments = self._write(self.args_buffer, struct.pack("<i", argument))
            handle, state = self._pair(
                self._func("rb-funcallv-protect", self.driver, self.run_id, arguments, 1)
            )
        finally:
            self._drop(argument)
        try:
            if state:
                self._func("rb-clear-errinfo")
                error = pb.GuestError(
                    name="EngineError", message=f"Ruby driver failed (tag {state})"
                )
                return pb.ExecuteResponse(error=error).SerializeToString()
            return self._string(handle)
        finally:
            self._drop(handle)

    def host_state(self) -> dict[str, Any]:
        """The handle table, the driver's ids and the reused buffers."""
        return {
            "handles": dict(self.handles),
            "next_handle": self.next_handle,
            "driver": self.driver,
            "run_id": self.run_id,
            "code_buffer": (self.code_buffer.pointer, self.code_buffer.capacity),
            "args_buffer": (self.args_buffer.pointer, self.args_buffer.capacity),
            "ruby_version": self.ruby_version,
        }

    def load_host_state(self, state: dict[str, Any]) -> None:
        # JSON (the store, the engine-process channel) turns the int keys into strings.
        self.handles = {int(handle): int(raw) for handle, raw in state["handles"].items()}
        self.next_handle = int(state["next_handle"])
        self.driver = int(state["driver"])
        self.run_id = int(state["run_id"])
        self.code_buffer = _Buffer(*state["code_buffer"])
        self.args_buffer = _Buffer(*state["args_buffer"])
        self.ruby_version = str(state["ruby_version"])


def _trap(message: str) -> Any:
    def stub(*_args: Any) -> None:
        raise wasmtime.Trap(message)

    return stub


def _ignore(*_args: Any) -> None:
    return None


def _linker(
    engine: wasmtime.Engine, module: wasmtime.Module, guest: RubyGuest, store: wasmtime.Store
) -> wasmtime.Linker:
    """wasmtime's WASI for what touches no file, our preview 1 host for descriptors and
    paths, the ABI's resource table, and stubs for the JavaScript bridge."""
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    preview1_host(store).define(linker, module, store)
    handle_type = wasmtime.FuncType([_I32], [_I32])
    linker.define_func(
        "canonical_abi", "resource_new_rb-abi-value", handle_type, guest._resource_new
    )
    linker.define_func(
        "canonical_abi", "resource_get_rb-abi-value", handle_type, guest._resource_get
    )
    for item in module.imports:
        if item.module in ("wasi_snapshot_preview1", "canonical_abi") and not (
            item.name or ""
        ).endswith("js-abi-value"):
            continue
        kind = item.type
        if not isinstance(kind, wasmtime.FuncType):
            raise RubyEngineError(f"unexpected import {item.module}.{item.name}")
        if item.name == "resource_drop_js-abi-value":
            callback: Any = _ignore  # no JS values ever exist
        elif item.module == "rb-js-abi-host":
            callback = _trap(JS_DISABLED)
        else:
            callback = _trap(f"Unsupported host capability: {item.module}.{item.name}")
        linker.define_func(item.module, item.name or "", kind, callback)
    return linker


class RubyEngine(SnapshotModuleEngine):
    language = "ruby"
    engine = f"CRuby {RUBY_VERSION} / ruby.wasm {RUBY_WASM.version}"
    version = RUBY_VERSION
    artifact = RUBY_WASM
    build_inputs = ("pins.py", "driver.rb")
    """What the prepared module and its snapshots depend on (not this host adapter)."""
    fuel = 30_000_000
    """Spec 9.1, in the reference's units (`engines.metering`)."""
    memory_bytes = 96 * 1024 * 1024
    """The spec's cap (100,663,296); the VM needs ~63 MiB after init."""
    contexts = True
    devices = True
    result_limit_on_envelope = True

    def link(
        self, engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
    ) -> RubyGuest:
        return RubyGuest(engine, module, store)


ENGINE = RubyEngine()
