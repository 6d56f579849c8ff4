"""JavaScript engine: SpiderMonkey (StarlingMonkey) as a WASI p2 component from componentize-js.

`prepare` copies the pinned npm project (package.json + committed package-lock.json), runs
`npm ci`, bundles `guest/main.js` (driver, protobuf codec, fs shim, acorn rewrites, sucrase
TypeScript stripping, workspace `import()`, formatjs `Intl`) with esbuild and builds the
component with componentize-js 0.23.0 (`build.js`). The component is Wizer-pre-initialised,
so instantiation is cheap; it runs decomposed into its core modules (`engines.components`),
which makes contexts snapshottable.

Network: componentize-js is run with the `http` and `fetch-event` features disabled, so the
component imports no `wasi:http` and no `wasi:sockets` at all (its imports are wasi:io,
clocks, filesystem, cli stdio/terminal and random); the driver also deletes `fetch`.
Timers are deleted from the global object (the driver keeps a private `setTimeout(0)` only
to detect promises that never settle).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

from engines.components.engine import SnapshotComponentEngine
from engines.fetch import verify_sha256
from engines.javascript.pins import (
    COMPONENTIZE_JS_VERSION,
    STARLINGMONKEY_PATH,
    STARLINGMONKEY_SHA256,
)
from engines.language import PrepareError, Progress
from engines.toolchain import require_program, run_tool

ENGINE_DIR = Path(__file__).parent
GUEST_FILES = (
    "main.js",
    "proto.js",
    "fs.js",
    "rewrite.js",
    "modules.js",
    "intl.js",
    "date_time_data.js",
)
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


class JavaScriptEngine(SnapshotComponentEngine):
    """SpiderMonkey in StarlingMonkey (componentize-js component, decomposed).

    After any trap (fuel, epoch) the instance refuses re-entry, so the spec's "a clean fuel
    interrupt keeps the JS instance" cannot hold here: the framework restores the context's
    last snapshot instead.
    """

    language = "javascript"
    version = COMPONENTIZE_JS_VERSION
    """StarlingMonkey does not expose its SpiderMonkey version; this is componentize-js's."""
    engine = f"SpiderMonkey (StarlingMonkey) / componentize-js {COMPONENTIZE_JS_VERSION}"
    build_inputs = ("guest/**/*", "wit/**/*", "build.js", "package.json", "package-lock.json")
    """The Wasm is built from these alone (the adapter code does not change it)."""
    console_in_envelope = True
    fuel = 50_000_000
    """Spec 9.1, in the reference's units (`engines.metering`)."""
    memory_bytes = 64 << 20
    """Spec 9.1 cap."""
    contexts = True
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
            run_tool(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=project,
                what="npm ci",
                timeout=NPM_TIMEOUT_SECONDS,
            )
            stamp.write_text(lock_digest)
        verify_sha256(project / STARLINGMONKEY_PATH, STARLINGMONKEY_SHA256)

        progress("building the SpiderMonkey component (esbuild + componentize-js)", 0.4)
        output = work_dir / OUTPUT_NAME
        partial = work_dir / f"{OUTPUT_NAME}.partial"
        partial.unlink(missing_ok=True)
        started = time.monotonic()
        run_tool(
            [node, "build.js", str(partial)],
            cwd=project,
            what="componentize-js",
            timeout=BUILD_TIMEOUT_SECONDS,
        )
        if not partial.is_file():
            raise PrepareError("componentize-js finished without writing the component")
        os.replace(partial, output)
        progress(f"built in {time.monotonic() - started:.0f} s", 1.0)
        return output


ENGINE = JavaScriptEngine()
