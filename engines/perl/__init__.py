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

import contextlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import wasmtime
import wasmtime.component

from engines import snapshot as wasm_snapshot
from engines.fetch import extract_member, npm_pack, verify_sha256
from engines.language import GuestInstance, LanguageEngine, Preopen, PrepareError, Progress
from engines.snapshot import MemorySnapshot

PACKAGE = "@6over3/zeroperl-ts"
PACKAGE_VERSION = "1.0.10"
WASM_MEMBER = "package/dist/esm/zeroperl.wasm"
WASM_SHA256 = "a6ae97f184fabc444b0b70d77c3d16475bfb3de16ebfb58ab8b2fbf98a53835e"
"""sha256 of `dist/esm/zeroperl.wasm` in @6over3/zeroperl-ts 1.0.10 (25,358,252 bytes)."""
PERL_VERSION = "5.42.0"
PREPARED_NAME = "zeroperl-1.0.10-globals.wasm"

_REQUEST_VAR = b"SBW::request"
_RESPONSE_VAR = b"SBW::response"
_VERSION_VAR = b"SBW::version"
_RUN = b"SBW::run()"
_SCALAR_CONTEXT = 1


class PerlGuestError(RuntimeError):
    """The zeroperl C API reported a failure (the interpreter or driver is broken)."""


def driver_source() -> str:
    """The Perl guest driver (installed as package data)."""
    return resources.files(__package__).joinpath("driver.pl").read_text(encoding="utf-8")


def make_dev_dir(scratch: Path) -> Path:
    """`/dev` for the guest: Perl opens `/dev/null` while parsing; WASI has no `/dev`."""
    dev = scratch / "perl-dev"
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "null").touch(exist_ok=True)
    return dev


_WASI = "wasi_snapshot_preview1"
_DENIED = {"poll_oneoff": 52, "path_symlink": 63, "path_link": 63}
"""WASI imports replaced by a constant errno (52 ENOSYS, 63 EPERM), spec 9.3.

poll_oneoff (Perl's sleep/select) would block the host thread where neither fuel nor
epochs can stop it; symlinks and hard links are never allowed (a guest-made link in the
host's workspace directory could point the host at its own files)."""


def _link(
    engine: wasmtime.Engine, module: wasmtime.Module, store: wasmtime.Store
) -> wasmtime.Instance:
    """Instantiate with WASI minus `_DENIED`, plus a stub for the JS host bridge."""
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    linker.allow_shadowing = True
    for item in module.imports:
        if item.module == _WASI and item.name in _DENIED:
            errno = _DENIED[item.name]
            func_type = item.type
            assert isinstance(func_type, wasmtime.FuncType)
            linker.define_func(_WASI, item.name or "", func_type, lambda *_args, e=errno: e)
    # zeroperl calls env.call_host_function only for functions registered with
    # zeroperl_register_function, which the driver never does; 0 means "no value".
    i32 = wasmtime.ValType.i32()
    linker.define_func(
        "env", "call_host_function", wasmtime.FuncType([i32] * 3, [i32]), _no_host_function
    )
    return linker.instantiate(store, module)


def _no_host_function(_func_id: int, _argc: int, _argv: int) -> int:
    return 0


@dataclass
class PerlGuest:
    """A live zeroperl instance whose driver has been loaded (a `GuestInstance`)."""

    store: wasmtime.Store
    instance: wasmtime.Instance
    names: dict[str, int]
    """Guest addresses of NUL-terminated names allocated once at init (in linear memory,
    so they survive snapshot/restore unchanged)."""
    perl_version: str = ""

    def __post_init__(self) -> None:
        # Looking exports up builds a dict of all ~200 of them: do it once.
        exports = self.instance.exports(self.store)
        self._funcs = {
            name: item for name, item in exports.items() if isinstance(item, wasmtime.Func)
        }
        memory = exports["memory"]
        assert isinstance(memory, wasmtime.Memory)
        self.memory = memory

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

    def memory_size(self) -> int:
        """Current linear memory size in bytes (`usage.memoryBytes`)."""
        return int(self.memory.data_len(self.store))

    def call(self, request: bytes) -> bytes:
        """Run one serialized `ExecuteRequest`; return the serialized `ExecuteResponse`."""
        self.set_bytes(self.names["request"], request)
        self.eval(self.names["run"])
        self._export("zeroperl_flush")(self.store)
        # zeroperl_to_string upgrades the byte string to UTF-8 (each byte as a Latin-1
        # character); undo that to recover the protobuf bytes.
        return self.get_bytes(self.names["response"]).decode("utf-8").encode("latin-1")


class PerlEngine(LanguageEngine):
    language = "perl"
    version = PERL_VERSION
    engine = f"Perl {PERL_VERSION} / zeroperl {PACKAGE_VERSION}"
    kind: Literal["component", "module"] = "module"
    fuel = 6_000_000_000
    """About 1.5 s of `1 while 1` on the 2-core reference machine (test_fuel_exhaustion_traps).

    Not comparable with the spec's 10,000,000: wasmtime charges per instruction, the
    reference per function entry and loop iteration. Init costs about 0.16e9 (not counted)."""
    memory_bytes = 64 << 20
    contexts = True
    snapshots = True
    preopens = (Preopen("/dev", make_host_dir=make_dev_dir, writable=False),)

    def prepare(self, work_dir: Path, progress: Progress) -> Path:
        work_dir.mkdir(parents=True, exist_ok=True)
        progress(f"downloading {PACKAGE}@{PACKAGE_VERSION} from the npm registry", 0.0)
        tarball = npm_pack(f"{PACKAGE}@{PACKAGE_VERSION}", work_dir / "npm")
        progress("extracting zeroperl.wasm", 0.5)
        raw = extract_member(tarball, WASM_MEMBER, work_dir / "zeroperl.wasm")
        progress("verifying sha256", 0.6)
        verify_sha256(raw, WASM_SHA256)
        progress("exporting globals for snapshots", 0.8)
        try:
            rewritten = wasm_snapshot.export_globals(raw.read_bytes())
        except (ValueError, IndexError) as error:
            raise PrepareError(f"cannot rewrite zeroperl.wasm: {error}") from error
        prepared = work_dir / PREPARED_NAME
        prepared.write_bytes(rewritten)
        raw.unlink()
        tarball.unlink()
        with contextlib.suppress(OSError):
            tarball.parent.rmdir()
        progress("ready", 1.0)
        return prepared

    def instantiate(
        self,
        engine: wasmtime.Engine,
        artifact: wasmtime.Module | wasmtime.component.Component,
        store: wasmtime.Store,
    ) -> PerlGuest:
        assert isinstance(artifact, wasmtime.Module)
        instance = _link(engine, artifact, store)
        guest = PerlGuest(store, instance, names={})
        initialize = guest._export("_initialize")
        initialize(store)
        status = guest._export("zeroperl_init")(store)
        if status != 0:
            raise PerlGuestError(f"zeroperl_init failed ({status}): {guest.last_error()}")
        guest.names = {
            "request": guest._alloc(_REQUEST_VAR + b"\0"),
            "response": guest._alloc(_RESPONSE_VAR + b"\0"),
            "version": guest._alloc(_VERSION_VAR + b"\0"),
            "run": guest._alloc(_RUN + b"\0"),
        }
        source = guest._alloc(driver_source().encode() + b"\0")
        try:
            guest.eval(source)
        finally:
            guest._free(source)
        guest.perl_version = guest.get_bytes(guest.names["version"]).decode()
        return guest

    def take_snapshot(
        self,
        store: wasmtime.Store,
        instance: GuestInstance,
        into: MemorySnapshot | None = None,
    ) -> MemorySnapshot:
        assert isinstance(instance, PerlGuest)
        taken = wasm_snapshot.take(store, instance.instance, into)
        taken.extra = {"names": dict(instance.names), "perl_version": instance.perl_version}
        return taken

    def restore(
        self,
        engine: wasmtime.Engine,
        artifact: wasmtime.Module | wasmtime.component.Component,
        store: wasmtime.Store,
        snapshot: MemorySnapshot,
    ) -> PerlGuest:
        assert isinstance(artifact, wasmtime.Module)
        instance = _link(engine, artifact, store)  # no _initialize / zeroperl_init / driver
        wasm_snapshot.restore(store, instance, snapshot)
        extra = snapshot.extra
        return PerlGuest(
            store, instance, names=dict(extra["names"]), perl_version=str(extra["perl_version"])
        )


ENGINE = PerlEngine()
