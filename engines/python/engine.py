"""Python engine: CPython 3.14 as a WASI p2 component built locally with componentize-py.

componentize-py (a pinned PyPI dependency) ships CPython and its stdlib inside its native
extension. `prepare` runs it on `guest/sbw_driver.py` + `guest/sandbox.wit`; the output is a
Wizer-pre-initialised component exporting `run(request: list<u8>) -> list<u8>` over the
protobuf envelopes. Builds are not byte-reproducible (the cache keys on what we built).
The component runs decomposed into its core modules (`engines.components`), which is what
makes its contexts snapshottable.

Network: the component imports `wasi:sockets/*` (wasi-libc links them) but not `wasi:http`.
Our WASI host denies socket creation and name lookup as wasmtime's does without network
access: `socket.socket()` raises PermissionError and `getaddrinfo` raises `gaierror`
(tested).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import time
from importlib import metadata, util
from pathlib import Path

from engines.components.engine import SnapshotComponentEngine
from engines.fetch import sha256_file
from engines.language import PrepareError, Progress
from engines.python.pins import (
    COMPONENTIZE_PY_SO_SHA256,
    COMPONENTIZE_PY_VERSION,
    PYTHON_VERSION,
)
from engines.toolchain import run_tool

GUEST_DIR = Path(__file__).parent / "guest"
DRIVER = "sbw_driver"
WIT_FILE = "sandbox.wit"
WORLD = "guest"
OUTPUT_NAME = "python-guest.wasm"
BUILD_TIMEOUT_SECONDS = 900

_BUILD_SCRIPT = (
    "import sys; from componentize_py import script; "
    "sys.argv[0] = 'componentize-py'; sys.exit(script())"
)
_SYS_VERSION = re.compile(rb"(\d+\.\d+\.\d+) \(main, [A-Z][a-z]{2} [ \d]\d \d{4}, [\d:]{8}\)")


def componentize_py_dir() -> Path:
    """The installed componentize-py package directory (raises PrepareError if missing)."""
    try:
        installed = metadata.version("componentize-py")
    except metadata.PackageNotFoundError as error:
        raise PrepareError(
            f"componentize-py is not installed: run `pip install componentize-py=="
            f"{COMPONENTIZE_PY_VERSION}` in the workbench's environment"
        ) from error
    if installed != COMPONENTIZE_PY_VERSION:
        raise PrepareError(
            f"componentize-py {installed} is installed but the Python engine is pinned to "
            f"{COMPONENTIZE_PY_VERSION}: run "
            f"`pip install componentize-py=={COMPONENTIZE_PY_VERSION}`"
        )
    spec = util.find_spec("componentize_py")
    if spec is None or spec.origin is None:
        raise PrepareError("componentize-py's package directory is missing: reinstall it")
    return Path(spec.origin).parent


def _verify_toolchain(package_dir: Path) -> None:
    expected = COMPONENTIZE_PY_SO_SHA256.get((platform.system(), platform.machine()))
    library = package_dir / "componentize_py.abi3.so"
    if expected is None or not library.is_file():
        return  # a platform whose wheel we have not hashed: the exact version pin still holds
    actual = sha256_file(library)
    if actual != expected:
        raise PrepareError(
            f"componentize-py's {library.name} has sha256 {actual}, expected {expected}: "
            f"reinstall it with `pip install --force-reinstall componentize-py=="
            f"{COMPONENTIZE_PY_VERSION}`"
        )


def guest_python_version(wasm: bytes) -> str | None:
    """The CPython version baked into a built component (its `sys.version` string)."""
    found = _SYS_VERSION.search(wasm)
    return found.group(1).decode() if found else None


class PythonEngine(SnapshotComponentEngine):
    """CPython 3.14 (componentize-py component, decomposed). A session that traps comes
    back from its last snapshot."""

    language = "python"
    version = PYTHON_VERSION
    engine = f"CPython {PYTHON_VERSION} / componentize-py {COMPONENTIZE_PY_VERSION}"
    build_inputs = ("guest/**/*",)
    """The Wasm is built from these alone (the adapter code does not change it)."""
    fuel = 100_000_000
    """Spec 9.1, in the reference's units (`engines.metering`)."""
    memory_bytes = 64 << 20
    """Spec 9.1 cap. The component starts at about 446 pages (27.9 MiB; it varies by a page
    or so between builds), leaving about 36 MiB to user code; past the cap allocations fail
    with a Python `MemoryError` and the instance stays usable."""
    contexts = True
    devices = True

    def prepare(self, work_dir: Path, progress: Progress) -> Path:
        """Build the component with componentize-py in `work_dir` (about 20-40 s)."""
        package_dir = componentize_py_dir()
        progress("checking componentize-py", 0.02)
        _verify_toolchain(package_dir)
        source = work_dir / "src"
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir(parents=True)
        for name in (f"{DRIVER}.py", WIT_FILE):
            shutil.copyfile(GUEST_DIR / name, source / name)
        output = work_dir / OUTPUT_NAME
        partial = work_dir / f"{OUTPUT_NAME}.partial"
        partial.unlink(missing_ok=True)
        command = [
            sys.executable,
            "-c",
            _BUILD_SCRIPT,
            "--quiet",
            "-d",
            str(source / WIT_FILE),
            "-w",
            WORLD,
            "componentize",
            DRIVER,
            "-p",
            str(source),
            "-o",
            str(partial),
        ]
        # No VIRTUAL_ENV: componentize-py would add that venv's site-packages to the guest path.
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        progress(f"building CPython {PYTHON_VERSION} component (componentize-py)", 0.05)
        started = time.monotonic()
        run_tool(
            command, cwd=source, what="componentize-py", timeout=BUILD_TIMEOUT_SECONDS, env=env
        )
        if not partial.is_file():
            raise PrepareError("componentize-py finished without writing the component")
        progress(f"built in {time.monotonic() - started:.0f} s; checking", 0.9)
        built = guest_python_version(partial.read_bytes())
        if built != PYTHON_VERSION:
            raise PrepareError(
                f"the built guest reports CPython {built}, expected {PYTHON_VERSION}: "
                "componentize-py does not match the pinned build"
            )
        os.replace(partial, output)
        progress("built", 1.0)
        return output


ENGINE = PythonEngine()
