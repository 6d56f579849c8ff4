"""Prepared engines on disk: the verified Wasm and its compiled, serialized module.

Layout under the cache root (`SANDBOX_WORKBENCH_CACHE_DIR`, else the user cache dir):

    engines/<language>/build/          scratch space for `LanguageEngine.prepare`
    engines/<language>/engine.wasm     the prepared Wasm (fetched and verified, or built)
    engines/<language>/engine.json     its sha256, engine string and version
    engines/<language>/<key>.cwasm     compiled module; key = (Wasm sha256, wasmtime
                                       version, engine config)
    engines/<language>/<key>.json      size and sha256 of the .cwasm (integrity check)

Compiling takes 10-50 s per engine on two cores; loading a serialized module takes a few
milliseconds (it is memory-mapped). Files are written atomically (temp file + rename) and
preparation holds a per-language file lock, so concurrent processes never see a partial
entry. A cache entry that is truncated or rewritten (size or mtime differ from the record),
foreign (wasmtime refuses another version or config) or unreadable is detected and
rebuilt, never loaded blindly; `engines verify` also checks full sha256 digests.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import wasmtime
import wasmtime.component

from engines.fetch import sha256_file
from engines.host import ENGINE_CONFIG_KEY, make_engine
from engines.language import LanguageEngine, PrepareError, Progress
from engines.locations import PRIVATE_FILE_MODE, cache_root, private_directory, private_file

WASMTIME_VERSION = version("wasmtime")

Artifact = wasmtime.Module | wasmtime.component.Component


def _no_progress(label: str, fraction: float) -> None:
    del label, fraction


def _write_atomically(path: Path, data: bytes | bytearray) -> None:
    private_directory(path.parent)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, PRIVATE_FILE_MODE)  # mkstemp's 0600 less the umask
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class EngineBuild:
    """What `engine.json` records about a prepared engine."""

    sha256: str
    engine: str
    version: str
    inputs: str
    """`LanguageEngine.inputs_digest()` when it was prepared."""

    @property
    def identity(self) -> str:
        """What snapshots are valid for: the Wasm and the sources that drive it."""
        return hashlib.sha256(f"{self.sha256}|{self.inputs}".encode()).hexdigest()


class EngineCache:
    """The on-disk state of one language's engine."""

    def __init__(self, language_engine: LanguageEngine, root: Path | None = None):
        self.language_engine = language_engine
        self.directory = (root or cache_root()) / "engines" / language_engine.language

    @property
    def wasm_path(self) -> Path:
        return self.directory / "engine.wasm"

    @property
    def build_record_path(self) -> Path:
        return self.directory / "engine.json"

    def build(self) -> EngineBuild | None:
        """The recorded build, or None when the engine was never prepared."""
        try:
            record = json.loads(self.build_record_path.read_text())
            return EngineBuild(
                str(record["sha256"]),
                str(record["engine"]),
                str(record["version"]),
                str(record["inputs"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def compiled_key(self, build: EngineBuild) -> str:
        material = f"{build.sha256}|wasmtime {WASMTIME_VERSION}|{ENGINE_CONFIG_KEY}"
        return hashlib.sha256(material.encode()).hexdigest()[:32]

    def compiled_path(self, build: EngineBuild) -> Path:
        return self.directory / f"{self.compiled_key(build)}.cwasm"

    def is_ready(self) -> bool:
        """Prepared and compiled for this wasmtime (cheap: no hashing of large files)."""
        build = self.build()
        return (
            build is not None
            and build.inputs == self.language_engine.inputs_digest()
            and self.wasm_path.is_file()
            and self._compiled_entry_intact(self.compiled_path(build), thorough=False)
        )

    @contextmanager
    def _lock(self) -> Iterator[None]:
        private_directory(self.directory, tighten=True)
        lock_path = private_file(self.directory / ".lock")
        with lock_path.open("w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def prepare(self, progress: Progress = _no_progress, *, force: bool = False) -> EngineBuild:
        """Fetch or build the Wasm (unless already there) and compile it (unless cached)."""
        with self._lock():
            build = None if force else self._verified_build()
            if build is None:
                build = self._prepare_wasm(progress)
            compiled = self.compiled_path(build)
            if force or not self._compiled_entry_intact(compiled, thorough=False):
                progress("compiling", 0.7)
                self._compile(build, compiled)
            progress("ready", 1.0)
            return build

    def _verified_build(self) -> EngineBuild | None:
        build = self.build()
        if build is None or not self.wasm_path.is_file():
            return None
        if build.inputs != self.language_engine.inputs_digest():
            return None
        if sha256_file(self.wasm_path) != build.sha256:
            return None
        return build

    def _prepare_wasm(self, progress: Progress) -> EngineBuild:
        work_dir = self.directory / "build"
        shutil.rmtree(work_dir, ignore_errors=True)
        private_directory(work_dir)
        started = time.monotonic()
        produced = self.language_engine.prepare(work_dir, progress)
        if not produced.is_file():
            raise PrepareError(f"{self.language_engine.language}: prepare produced no Wasm file")
        digest = sha256_file(produced)
        temporary = private_file(self.wasm_path.with_suffix(".wasm.partial"))
        shutil.copyfile(produced, temporary)
        os.replace(temporary, self.wasm_path)
        spec = self.language_engine
        build = EngineBuild(digest, spec.engine, spec.version, spec.inputs_digest())
        record = {
            "sha256": build.sha256,
            "engine": build.engine,
            "version": build.version,
            "inputs": build.inputs,
            "preparedSeconds": round(time.monotonic() - started, 1),
        }
        _write_atomically(self.build_record_path, json.dumps(record, indent=2).encode())
        shutil.rmtree(work_dir, ignore_errors=True)
        return build

    def _compile(self, build: EngineBuild, compiled: Path) -> None:
        engine = make_engine(component=self.language_engine.kind == "component")
        artifact: Artifact
        if self.language_engine.kind == "component":
            artifact = wasmtime.component.Component.from_file(engine, str(self.wasm_path))
        else:
            artifact = wasmtime.Module.from_file(engine, str(self.wasm_path))
        data = artifact.serialize()
        _write_atomically(compiled, data)
        integrity = {
            "size": len(data),
            "mtimeNs": compiled.stat().st_mtime_ns,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        _write_atomically(compiled.with_suffix(".json"), json.dumps(integrity).encode())
        for stale in self.directory.glob("*.cwasm"):
            if stale != compiled:
                stale.unlink(missing_ok=True)
                stale.with_suffix(".json").unlink(missing_ok=True)

    @staticmethod
    def _compiled_entry_intact(compiled: Path, *, thorough: bool) -> bool:
        try:
            integrity = json.loads(compiled.with_suffix(".json").read_text())
            status = compiled.stat()
            # Size and mtime catch truncation and any rewrite at load time for free;
            # the full sha256 (tens of ms) is for `engines verify`.
            if (status.st_size, status.st_mtime_ns) != (
                integrity["size"],
                integrity["mtimeNs"],
            ):
                return False
            return not thorough or sha256_file(compiled) == integrity["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def load(self, engine: wasmtime.Engine) -> Artifact:
        """Load the compiled module into `engine`, preparing or rebuilding it if needed."""
        build = self.build()
        if (
            build is None
            or build.inputs != self.language_engine.inputs_digest()
            or not self._compiled_entry_intact(self.compiled_path(build), thorough=False)
        ):
            build = self.prepare()
        compiled = str(self.compiled_path(build))
        try:
            return self._deserialize(engine, compiled)
        except wasmtime.WasmtimeError:
            # Foreign or damaged entry (wasmtime checks version and config): rebuild once.
            with self._lock():
                self._compile(build, self.compiled_path(build))
            return self._deserialize(engine, compiled)

    def _deserialize(self, engine: wasmtime.Engine, compiled: str) -> Artifact:
        return load_compiled(self.language_engine, engine, Path(compiled))

    def ready_compiled_path(self, progress: Progress = _no_progress) -> Path:
        """The compiled module to load, prepared first if needed (for engine processes,
        which load a path they are given and never prepare or compile themselves)."""
        if not self.is_ready():
            self.prepare(progress)
        build = self.build()
        if build is None:
            raise PrepareError(f"{self.language_engine.language}: preparation left no build")
        return self.compiled_path(build)

    def recompile(self) -> None:
        """Compile the prepared Wasm again (a compiled entry that wasmtime refused)."""
        build = self.build()
        if build is None:
            raise PrepareError(f"{self.language_engine.language}: not prepared")
        with self._lock():
            self._compile(build, self.compiled_path(build))

    def verify(self) -> list[str]:
        """Problems found by a thorough check (empty when the engine is intact)."""
        build = self.build()
        if build is None or not self.wasm_path.is_file():
            return ["not prepared"]
        problems = []
        if sha256_file(self.wasm_path) != build.sha256:
            problems.append("engine.wasm does not match its recorded sha256")
        if not self._compiled_entry_intact(self.compiled_path(build), thorough=True):
            problems.append("compiled module missing or corrupt (it will be rebuilt on next use)")
        return problems


def load_compiled(spec: LanguageEngine, engine: wasmtime.Engine, compiled: Path) -> Artifact:
    """Deserialize a compiled module or component of `spec` (memory-mapped, fast)."""
    if spec.kind == "component":
        return wasmtime.component.Component.deserialize_file(engine, str(compiled))
    return wasmtime.Module.deserialize_file(engine, str(compiled))
