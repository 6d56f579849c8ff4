"""Python engine: CPython 3.14 as a WASI p2 component built locally with componentize-py.

componentize-py (a pinned PyPI dependency) ships CPython and its stdlib inside its native
extension. `prepare` runs it on `guest/sbw_driver.py` + `guest/sandbox.wit`; the output is a
Wizer-pre-initialised component exporting `run(request: list<u8>) -> list<u8>` over the
protobuf envelopes. Builds are not byte-reproducible (the cache keys on what we built).

Network: the component imports `wasi:sockets/*` (wasi-libc links them) but not `wasi:http`,
and we link only `Linker.add_wasip2()`. wasmtime-py 50's `WasiConfig` has no network
switches, and the WASI context it builds denies socket creation and name lookup:
`socket.socket()` raises PermissionError and `getaddrinfo` raises `gaierror` (tested).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata, util
from pathlib import Path

import wasmtime
import wasmtime.component

from engines.component import instantiate_component
from engines.fetch import sha256_file
from engines.language import GuestInstance, LanguageEngine, PrepareError, Progress

COMPONENTIZE_PY_VERSION = "0.25.1"
"""Pinned exactly in pyproject.toml; it determines the CPython build below."""
PYTHON_VERSION = "3.14.0"
"""CPython inside componentize-py 0.25.1; `prepare` checks the built guest's `sys.version`."""
COMPONENTIZE_PY_SO_SHA256 = {
    # componentize_py-0.25.1-cp39-abi3-manylinux_2_28_x86_64.whl
    ("Linux", "x86_64"): "260941cadb237f0ae5a19dcbc01220ca48d32dbd58d8e451c6a2f95497e3e291",
}
"""sha256 of `componentize_py/componentize_py.abi3.so` per platform we have verified."""

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


class PythonEngine(LanguageEngine):
    """CPython 3.14 (componentize-py component).

    Snapshots are not supported (`snapshots = False`): wasmtime-py 50's component API
    exposes only exported functions of a component instance (`Instance.get_func` /
    `get_export_index`), not the linear memory or the globals of the core instances inside
    it, and a component cannot be instantiated without running its start-up. Beyond that, the
    guest's memory holds handles into the store's host-side WASI resource table (streams,
    preopened descriptors) that a byte copy would not recreate. So there is nothing honest
    to copy; a session that traps starts a fresh instance instead (about 5-10 ms: the
    component is already Wizer-pre-initialised at build time).
    """

    language = "python"
    version = PYTHON_VERSION
    engine = f"CPython {PYTHON_VERSION} / componentize-py {COMPONENTIZE_PY_VERSION}"
    kind = "component"
    build_inputs = ("guest/**/*",)
    """The Wasm is built from these alone (the adapter code does not change it)."""
    fuel = 10_000_000_000
    """A tight `while True: pass` burns this in 1.2-1.6 s of CPU on the 2-core reference box."""
    memory_bytes = 64 << 20
    """Spec 9.1 cap. The component starts at about 446 pages (27.9 MiB; it varies by a page
    or so between builds), leaving about 36 MiB to user code; past the cap allocations fail
    with a Python `MemoryError` and the instance stays usable."""
    contexts = True
    snapshots = False

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
        try:
            completed = subprocess.run(
                command,
                cwd=source,
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise PrepareError(
                f"componentize-py did not finish within {BUILD_TIMEOUT_SECONDS} s"
            ) from error
        if completed.returncode != 0 or not partial.is_file():
            detail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
            raise PrepareError(
                f"componentize-py failed (exit {completed.returncode}): "
                + (" | ".join(detail) or "no output")
            )
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

    def instantiate(
        self,
        engine: wasmtime.Engine,
        artifact: wasmtime.Module | wasmtime.component.Component,
        store: wasmtime.Store,
    ) -> GuestInstance:
        return instantiate_component(engine, artifact, store, self.language)


ENGINE = PythonEngine()
