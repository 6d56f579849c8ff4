"""JavaScript engine: SpiderMonkey (StarlingMonkey) as a WASI p2 component from componentize-js.

`prepare` copies the pinned npm project (package.json + committed package-lock.json), runs
`npm ci`, bundles `guest/main.js` (driver, protobuf codec, fs shim, acorn rewrites, sucrase
TypeScript stripping) with esbuild and builds the component with componentize-js 0.23.0
(`build.js`). The component is Wizer-pre-initialised, so instantiation is cheap.

Network: componentize-js is run with the `http` and `fetch-event` features disabled, so the
component imports no `wasi:http` at all (its imports are wasi:io, clocks, filesystem,
cli stdio/terminal and random); the driver also deletes `fetch`. We link only
`Linker.add_wasip2()`. Timers are deleted from the global object (the driver keeps a private
`setTimeout(0)` only to detect promises that never settle).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import wasmtime
import wasmtime.component

from engines.component import instantiate_component
from engines.fetch import require_program, verify_sha256
from engines.language import GuestInstance, LanguageEngine, PrepareError, Progress

COMPONENTIZE_JS_VERSION = "0.23.0"
"""Pinned exactly in package.json / package-lock.json."""
STARLINGMONKEY_SHA256 = "6094cd93d966f9bec9b01332db6e0eedbaf22f60b745c9f823f21e33cbd4d365"
"""sha256 of componentize-js 0.23.0's `lib/starlingmonkey_embedding.wasm`."""
STARLINGMONKEY_PATH = (
    "node_modules/@bytecodealliance/componentize-js/lib/starlingmonkey_embedding.wasm"
)

ENGINE_DIR = Path(__file__).parent
GUEST_FILES = ("main.js", "proto.js", "fs.js", "rewrite.js")
PROJECT_FILES = ("package.json", "package-lock.json", "build.js")
WIT_FILE = "sandbox.wit"
OUTPUT_NAME = "javascript-guest.wasm"
NPM_TIMEOUT_SECONDS = 900
BUILD_TIMEOUT_SECONDS = 900


def source_files() -> list[tuple[Path, str]]:
    """Every committed input of the build as (source path, path relative to the project)."""
    files = [(ENGINE_DIR / name, name) for name in PROJECT_FILES]
    files += [(ENGINE_DIR / "guest" / name, f"guest/{name}") for name in GUEST_FILES]
    files.append((ENGINE_DIR / "wit" / WIT_FILE, f"wit/{WIT_FILE}"))
    return files


def inputs_digest() -> str:
    """sha256 over the build inputs (for callers that cache the built component)."""
    digest = hashlib.sha256()
    for path, relative in source_files():
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _run(command: list[str], cwd: Path, what: str, timeout: int) -> None:
    try:
        completed = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise PrepareError(f"{what} did not finish within {timeout} s") from error
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip().splitlines()[-6:]
        raise PrepareError(
            f"{what} failed (exit {completed.returncode}): " + (" | ".join(detail) or "no output")
        )


class JavaScriptEngine(LanguageEngine):
    """SpiderMonkey in StarlingMonkey (componentize-js component).

    No snapshots (`snapshots = False`): wasmtime-py 50 exposes only a component instance's
    exported functions, not the linear memory or globals of its core instances, and the
    guest's memory holds handles into the host-side WASI resource table. After any trap
    (fuel, epoch) the component instance refuses re-entry, so the spec's "a clean fuel
    interrupt keeps the JS instance" cannot hold here: the framework starts a fresh one.
    """

    language = "javascript"
    version = COMPONENTIZE_JS_VERSION
    """StarlingMonkey does not expose its SpiderMonkey version; this is componentize-js's."""
    engine = f"SpiderMonkey (StarlingMonkey) / componentize-js {COMPONENTIZE_JS_VERSION}"
    kind = "component"
    build_inputs = ("guest/**/*", "wit/**/*", "build.js", "package.json", "package-lock.json")
    console_in_envelope = True
    """The Wasm is built from these alone (the adapter code does not change it)."""
    fuel = 8_000_000_000
    """A tight `for (;;) {}` burns this in about 1.5 s on the 2-core reference box."""
    memory_bytes = 64 << 20
    """Spec 9.1 cap."""
    contexts = True
    snapshots = False
    requirements = ("npm", "node")

    def prepare(self, work_dir: Path, progress: Progress) -> Path:
        """npm ci + esbuild + componentize-js in `work_dir` (about 1-2 min on 2 cores)."""
        npm = require_program("npm", "build the JavaScript engine (componentize-js)")
        node = require_program("node", "build the JavaScript engine (componentize-js)")
        project = work_dir / "project"
        project.mkdir(parents=True, exist_ok=True)
        for path, relative in source_files():
            target = project / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)

        lock = (project / "package-lock.json").read_bytes()
        stamp = project / "node_modules" / ".sbw-lock-sha256"
        lock_digest = hashlib.sha256(lock).hexdigest()
        if not (stamp.is_file() and stamp.read_text() == lock_digest):
            progress("installing componentize-js and build tools (npm ci)", 0.05)
            # --ignore-scripts: nothing we use needs an install script (esbuild's native
            # binary comes from its optional platform package).
            _run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                project,
                "npm ci",
                NPM_TIMEOUT_SECONDS,
            )
            stamp.write_text(lock_digest)
        verify_sha256(project / STARLINGMONKEY_PATH, STARLINGMONKEY_SHA256)

        progress("building the SpiderMonkey component (esbuild + componentize-js)", 0.4)
        output = work_dir / OUTPUT_NAME
        partial = work_dir / f"{OUTPUT_NAME}.partial"
        partial.unlink(missing_ok=True)
        started = time.monotonic()
        _run(
            [node, "build.js", str(partial)],
            project,
            "componentize-js",
            BUILD_TIMEOUT_SECONDS,
        )
        if not partial.is_file():
            raise PrepareError("componentize-js finished without writing the component")
        os.replace(partial, output)
        progress(f"built in {time.monotonic() - started:.0f} s", 1.0)
        return output

    def instantiate(
        self,
        engine: wasmtime.Engine,
        artifact: wasmtime.Module | wasmtime.component.Component,
        store: wasmtime.Store,
    ) -> GuestInstance:
        return instantiate_component(engine, artifact, store, self.language)


ENGINE = JavaScriptEngine()
