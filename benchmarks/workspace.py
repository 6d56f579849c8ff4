"""The guest's `/workspace` in memory (`engines.vfs`): what file work costs a guest.

Per language, the median of a few runs of:
- writing 1,000 small files (100 bytes each, into an emptied workspace);
- reading one 1 MiB file 100 times (4 in JavaScript: each read keeps 1 MiB of its 64 MiB
  memory for good, on the host directory as on the virtual tree, a leak of its bindings);
- `1+1` with 1,000 files in the workspace, against `1+1` with none: a run that touches
  no file must pay nothing for them.
Each run includes the change set the engine returns. The baseline, measured in the same
run for Perl and Ruby, is the host directory the engines used before: the same guest on
wasmtime's own WASI with a preopened temp directory. Python and JavaScript ran on our own
WASI 0.2 host over host directories, which no longer exists: their before-figures are
recorded in benchmarks/README.md. Target: at most 1.5x the host directory.
Run: `python -m benchmarks workspace`.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import wasmtime

from engines.cache import EngineCache
from engines.host import IDLE_EPOCH_DEADLINE, OutputCapture, new_store
from engines.language import LanguageEngine
from engines.module import ModuleGuest
from engines.preview1 import Preview1Host
from engines.proto import envelope_pb2
from engines.registry import LANGUAGES, language_engine, missing_requirements
from engines.result import Limits
from engines.session import Session
from engines.vfs import PathState, TreeUpdate, VirtualFS

RUNS = 5
SMALL_FILES = {
    "python": "for i in range(1000):\n    open(f'/workspace/s{i}', 'w').write('x' * 100)\n1",
    "perl": 'for my $i (0..999) { open(my $f, ">", "/workspace/s$i") or die; print $f ("x" x 100);'
    " close $f } 1",
    "ruby": '1000.times { |i| File.write("/workspace/s#{i}", "x" * 100) }\n1',
    "javascript": (
        "for (let i = 0; i < 1000; i++) fs.writeFileSync(`/workspace/s${i}`, 'x'.repeat(100)); 1"
    ),
}
READ_BIG = {
    "python": "for _ in range(100):\n    open('/workspace/big', 'rb').read()\n1",
    "perl": 'for (1..100) { open(my $f, "<", "/workspace/big") or die; local $/; my $d = <$f>;'
    " close $f } 1",
    "ruby": '100.times { File.binread("/workspace/big") }\n1',
    "javascript": "for (let i = 0; i < 4; i++) fs.readFileSync('/workspace/big'); 1",
}
LIMITS = Limits(timeout_seconds=120, fuel=10**13)
BIG = bytes(range(256)) * 4096
"""1 MiB."""
MANY = tuple(PathState(f"s{index}", "file", b"x" * 100) for index in range(1000))


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples)


def in_memory(language: str) -> dict[str, float]:
    """The three figures on the engines as they run now (a `VirtualFS` workspace)."""
    empty = TreeUpdate(replace=True)
    big = TreeUpdate((PathState("big", "file", BIG),), replace=True)
    many = TreeUpdate(MANY, replace=True)
    return {
        "write": _median_run(language, SMALL_FILES[language], empty, empty, RUNS),
        "read": _median_run(language, READ_BIG[language], big, big, RUNS),
        "idle_many": _median_run(language, "1+1", many, TreeUpdate(), RUNS * 4),
        "idle_none": _median_run(language, "1+1", empty, TreeUpdate(), RUNS * 4),
    }


def _median_run(language: str, code: str, first: TreeUpdate, each: TreeUpdate, runs: int) -> float:
    """The median time of `runs` runs of `code` in a new session whose workspace is set
    by `first`, and updated by `each` before every run (timed with it)."""
    with Session(language, workspace=VirtualFS(), limits=LIMITS) as session:
        session.execute("1", update=first)  # boot outside the timings
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            outcome = session.execute(code, update=each)
            samples.append((time.perf_counter() - started) * 1000)
            assert outcome.result.error is None, outcome.result.error
    return median_ms(samples)


class _WasmtimeFiles(Preview1Host):
    """Leaves every file call to wasmtime's own WASI (the design before `engines.vfs`)."""

    def define(
        self, linker: wasmtime.Linker, module: wasmtime.Module, store: wasmtime.Store
    ) -> None:
        linker.allow_shadowing = True


def host_directory(spec: LanguageEngine) -> dict[str, float]:
    """The read and write figures on wasmtime's own WASI over a temp host directory."""
    engine = spec.new_engine()
    module = EngineCache(spec).load(engine)
    assert isinstance(module, wasmtime.Module)
    workspace = Path(tempfile.mkdtemp(prefix="sbw-bench-"))
    dev = Path(tempfile.mkdtemp(prefix="sbw-bench-dev-"))
    (dev / "null").touch()
    output = OutputCapture()
    wasi = wasmtime.WasiConfig()
    wasi.env = []
    wasi.preopen_dir(str(workspace), "/workspace")
    if spec.devices:
        wasi.preopen_dir(str(dev), "/dev")
    wasi.stdout_custom, wasi.stderr_custom = output.on_stdout, output.on_stderr
    store = new_store(engine, memory_bytes=spec.memory_bytes, data=_WasmtimeFiles([], print, print))
    store.set_wasi(wasi)
    guest = spec.instantiate(engine, module, store)
    assert isinstance(guest, ModuleGuest)

    def timed(code: str) -> float:
        request = envelope_pb2.ExecuteRequest(code=code, session=True, cwd="/workspace")
        guest.meter.remaining = LIMITS.fuel or 0
        store.set_epoch_deadline(1)
        started = time.perf_counter()
        response = envelope_pb2.ExecuteResponse.FromString(guest.call(request.SerializeToString()))
        elapsed = (time.perf_counter() - started) * 1000
        store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
        assert not response.HasField("error"), response.error
        return elapsed

    def emptied() -> None:
        for entry in workspace.iterdir():
            entry.unlink()

    try:
        writes = []
        for _ in range(RUNS):
            emptied()
            writes.append(timed(SMALL_FILES[spec.language]))
        emptied()
        (workspace / "big").write_bytes(BIG)
        reads = [timed(READ_BIG[spec.language]) for _ in range(RUNS)]
        return {"write": median_ms(writes), "read": median_ms(reads)}
    finally:
        store.close()
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(dev, ignore_errors=True)


def main() -> None:
    print(
        f"{'language':<11} {'1,000 writes':>13} {'vs host dir':>11} {'1 MiB x 100 reads':>18}"
        f" {'vs host dir':>11} {'1+1, 1,000 files':>17} {'1+1, none':>10}"
    )
    for language in LANGUAGES:
        spec = language_engine(language)
        if missing_requirements(spec):
            print(f"{language:<11} skipped: {missing_requirements(spec)[0].program} is missing")
            continue
        EngineCache(spec).prepare()
        now = in_memory(language)
        before = host_directory(spec) if spec.kind == "module" else None
        write_ratio = f"{now['write'] / before['write']:.2f}x" if before else "README"
        read_ratio = f"{now['read'] / before['read']:.2f}x" if before else "README"
        print(
            f"{language:<11} {now['write']:>10.1f} ms {write_ratio:>11}"
            f" {now['read']:>15.1f} ms {read_ratio:>11}"
            f" {now['idle_many']:>14.2f} ms {now['idle_none']:>7.2f} ms"
        )
        if before:
            print(
                f"{'':<11} host dir: {before['write']:.1f} ms writes, {before['read']:.1f} ms reads"
            )
