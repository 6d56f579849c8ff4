"""Prepared engines on disk: the verified Wasm and its compiled, serialized form.

Layout under the cache root (`SANDBOX_WORKBENCH_CACHE_DIR`, else the user cache dir):

    engines/<language>/build/          scratch space for `LanguageEngine.prepare`
    engines/<language>/engine.wasm     the prepared Wasm (fetched and verified, or built)
    engines/<language>/engine.json     its sha256, engine string and version
    engines/<language>/<key>.cwasm     compiled module; key = (Wasm sha256, wasmtime
                                       version, engine config, the engine's compiled format)
    engines/<language>/<key>/          or, for a decomposed component, a directory of
                                       compiled core modules and their `plan.json`
    engines/<language>/<key>.json      size, mtime and sha256 of the entry's file(s)

Compiling takes 10-50 s per engine on two cores; loading a serialized module takes a few
milliseconds (it is memory-mapped). Entries are written atomically (built in a private
temporary directory, then renamed into place, the integrity record last) and preparation
holds a per-language file lock, so concurrent processes never see a partial entry. An
entry with a file that is missing, truncated or rewritten (size or mtime differ from the
record), foreign (wasmtime refuses another version or config) or unreadable is detected
and rebuilt, never loaded blindly; `engines verify` also checks full sha256 digests.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import wasmtime

from engines.fetch import sha256_file
from engines.host import ENGINE_CONFIG_KEY
from engines.language import Artifact, LanguageEngine, PrepareError, Progress
from engines.locations import (
    PRIVATE_DIRECTORY_MODE,
    PRIVATE_FILE_MODE,
    cache_root,
    private_directory,
    private_file,
)

WASMTIME_VERSION = version("wasmtime")
_ENTRY_NAME = re.compile(r"^\.?[0-9a-f]{32}(\.cwasm|\.json)?(\.[a-z0-9_]{8})?$")
"""Names of compiled entries, their records and their staging leftovers (what the
stale-entry cleanup may remove)."""
_FILE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


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
        compiled_format = self.language_engine.compiled_format
        if compiled_format:
            material += f"|{compiled_format}"
        return hashlib.sha256(material.encode()).hexdigest()[:32]

    def compiled_path(self, build: EngineBuild) -> Path:
        """The compiled entry: a file, or a directory for engines of several modules."""
        return self.directory / f"{self.compiled_key(build)}{self.language_engine.compiled_suffix}"

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
                self._compile(build, compiled, progress, reuse=not force)
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

    def _compile(
        self,
        build: EngineBuild,
        compiled: Path,
        progress: Progress = _no_progress,
        *,
        reuse: bool = False,
    ) -> None:
        """Compile into a private staging directory, then move the entry into place and
        write its integrity record (last: an entry without a valid record is rebuilt).
        `reuse`: the entry there is damaged, not refused by wasmtime, so its files that
        still match their recorded sha256 are reused (a JavaScript rebuild after a lost
        `plan.json` takes seconds instead of half a minute)."""
        spec = self.language_engine

        def compiling(label: str, fraction: float) -> None:
            progress(label, 0.7 + 0.25 * fraction)

        reusable = _intact_files(compiled) if reuse and compiled.is_dir() else {}
        staging = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".{compiled.name}."))
        try:
            built = staging / compiled.name
            spec.compile(spec.new_engine(), self.wasm_path, built, compiling, reusable)
            files = _entry_files(built)
            for path in files.values():
                os.chmod(path, PRIVATE_FILE_MODE)
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
            if built.is_dir():
                os.chmod(built, PRIVATE_DIRECTORY_MODE)
            compiled.with_suffix(".json").unlink(missing_ok=True)
            _remove_entry(compiled)
            os.replace(built, compiled)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        placed = _entry_files(compiled)
        if compiled.is_dir():
            record: dict[str, Any] = {
                "files": {name: _integrity(path) for name, path in placed.items()}
            }
        else:
            record = _integrity(compiled)
        _write_atomically(compiled.with_suffix(".json"), json.dumps(record).encode())
        current = {compiled.name, compiled.with_suffix(".json").name}
        for stale in self.directory.iterdir():
            if _ENTRY_NAME.match(stale.name) and stale.name not in current:
                _remove_entry(stale)

    @staticmethod
    def _compiled_entry_intact(compiled: Path, *, thorough: bool) -> bool:
        try:
            integrity = json.loads(compiled.with_suffix(".json").read_text())
            if "files" not in integrity:
                return _file_intact(compiled, integrity, thorough=thorough)
            files = integrity["files"]
            return bool(files) and all(
                _FILE_NAME.match(name) is not None
                and _file_intact(compiled / name, record, thorough=thorough)
                for name, record in files.items()
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
        compiled = self.compiled_path(build)
        try:
            return self.language_engine.load_compiled(engine, compiled)
        except (wasmtime.WasmtimeError, ValueError):
            # Foreign or damaged entry (wasmtime checks version and config): rebuild once.
            with self._lock():
                self._compile(build, compiled)
            return self.language_engine.load_compiled(engine, compiled)

    def ready_build(self, progress: Progress = _no_progress) -> EngineBuild:
        """The build to load, prepared first if needed: its compiled entry is
        `compiled_path(build)`, for engine processes, which load a path they are given and
        never prepare or compile themselves."""
        if not self.is_ready():
            self.prepare(progress)
        build = self.build()
        if build is None:
            raise PrepareError(f"{self.language_engine.language}: preparation left no build")
        return build

    def ready_compiled_path(self, progress: Progress = _no_progress) -> Path:
        """The compiled entry of `ready_build`."""
        return self.compiled_path(self.ready_build(progress))

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


def _entry_files(entry: Path) -> dict[str, Path]:
    """The files of a compiled entry by name: itself, or a directory's (flat) files."""
    if not entry.is_dir():
        return {entry.name: entry}
    files = {}
    for path in entry.iterdir():
        if path.is_symlink() or not path.is_file() or not _FILE_NAME.match(path.name):
            raise PrepareError(f"unexpected entry {path.name!r} in a compiled engine")
        files[path.name] = path
    return files


def _intact_files(entry: Path) -> dict[str, Path]:
    """The files of a directory entry that still match their record, sha256 included, by
    name (none without a readable record)."""
    try:
        files = dict(json.loads(entry.with_suffix(".json").read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    intact = {}
    for name, record in files.items():
        try:
            if _FILE_NAME.match(name) and _file_intact(entry / name, record, thorough=True):
                intact[name] = entry / name
        except (OSError, KeyError, TypeError):
            continue
    return intact


def _integrity(path: Path) -> dict[str, Any]:
    status = path.stat()
    return {"size": status.st_size, "mtimeNs": status.st_mtime_ns, "sha256": sha256_file(path)}


def _file_intact(path: Path, record: dict[str, Any], *, thorough: bool) -> bool:
    """Size and mtime catch truncation and any rewrite at load time for free (no symlink
    is followed); the full sha256 (tens of ms) is for `engines verify`."""
    status = path.lstat()
    if not stat.S_ISREG(status.st_mode):
        return False
    if (status.st_size, status.st_mtime_ns) != (record["size"], record["mtimeNs"]):
        return False
    return not thorough or sha256_file(path) == record["sha256"]


def _remove_entry(path: Path) -> None:
    """Remove a compiled entry of ours (a file or a directory), if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
