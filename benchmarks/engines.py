"""Engine benchmarks: cold start, warm latency, host overhead, speed against the host's
native interpreter, snapshots and memory, per language, each against a baseline measured
in the same run. Run: `python -m benchmarks engines`."""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence

from engines.cache import EngineCache
from engines.process import ProcessSession, engine_process_pool
from engines.proto import envelope_pb2
from engines.registry import LANGUAGES, language_engine, missing_requirements
from engines.result import Limits
from engines.session import Session
from engines.snapshot import MemorySnapshot
from engines.vfs import VirtualFS
from workbench.core.workspace import GUEST_LIMITS

FIB = {
    "javascript": "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }\nfib(25)",
    "python": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nfib(25)",
    "perl": "sub fib { my $n = shift; $n < 2 ? $n : fib($n - 1) + fib($n - 2) } fib(25)",
    "ruby": "def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)\nfib(25)",
}
NATIVE = {
    "javascript": (
        ["node", "-e"],
        "function fib(n){return n<2?n:fib(n-1)+fib(n-2)}"
        "const t=process.hrtime.bigint();fib(25);"
        "console.log(Number(process.hrtime.bigint()-t)/1e6)",
    ),
    "python": (
        ["python3", "-c"],
        "import time\ndef fib(n): return n if n < 2 else fib(n-1)+fib(n-2)\n"
        "t=time.perf_counter(); fib(25); print((time.perf_counter()-t)*1000)",
    ),
    "perl": (
        ["perl", "-MTime::HiRes=time", "-e"],
        "sub fib { my $n = shift; $n < 2 ? $n : fib($n-1) + fib($n-2) } "
        "my $t = time; fib(25); print((time - $t) * 1000)",
    ),
    "ruby": (
        ["ruby", "-e"],
        "def fib(n) = n < 2 ? n : fib(n-1)+fib(n-2)\n"
        "t=Process.clock_gettime(Process::CLOCK_MONOTONIC); fib(25); "
        "puts (Process.clock_gettime(Process::CLOCK_MONOTONIC)-t)*1000",
    ),
}


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


RESTORE_PAIRS = 21
"""Restores and cold starts timed in turns for their ratio."""


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def native_fib_ms(language: str) -> float | None:
    command, program = NATIVE[language]
    if shutil.which(command[0]) is None:
        return None
    runs = []
    for _ in range(3):
        output = subprocess.run([*command, program], capture_output=True, text=True, check=True)
        runs.append(float(output.stdout.strip()))
    return statistics.median(runs)


def bench_language(language: str) -> None:
    spec = language_engine(language)
    EngineCache(spec).prepare()
    print(f"\n[{language}] {spec.engine}")

    def first_result_ms(restore_point: MemorySnapshot | None = None) -> float:
        """From a new session (restoring `restore_point` if given) to its first result;
        closing it is not part of either figure."""
        started = time.perf_counter()
        session = Session(spec, workspace=VirtualFS(GUEST_LIMITS), restore_point=restore_point)
        try:
            session.execute("1+1")
            return (time.perf_counter() - started) * 1000
        finally:
            session.close()

    cold_ms = statistics.median(first_result_ms() for _ in range(5))
    target = 50 if spec.kind == "component" else 250
    print(f"  cold start (cache -> first result): {cold_ms:8.1f} ms   (target <= {target} ms)")

    # fib(25) takes more than Perl's 10M fuel (15M): this measures speed, not budgets.
    with Session(spec, workspace=VirtualFS(GUEST_LIMITS), limits=Limits(fuel=10**12)) as session:
        session.execute("1+1")
        warm = timed(lambda: session.execute("1+1"), 200)
        p50, p95 = statistics.median(warm), percentile(warm, 0.95)
        print(f"  warm 1+1: p50 {p50:6.3f} ms  p95 {p95:6.3f} ms           (target p50 <= 2 ms)")
        instance = session._instance
        store = session._store
        assert instance is not None and store is not None
        payload = envelope_pb2.ExecuteRequest(code="1+1", session=True, cwd="/workspace")
        raw = payload.SerializeToString()

        def bare() -> None:
            instance.meter.remaining = spec.fuel
            instance.call(raw)

        bare_p50 = statistics.median(timed(bare, 200))
        print(
            f"  bare wasmtime call of the same guest: p50 {bare_p50:6.3f} ms -> host overhead "
            f"{p50 / bare_p50:4.2f}x (target <= 1.3x)"
        )
        fib = session.execute(FIB[language])
        assert fib.result.error is None, fib.result.error
        engine_fib = fib.result.duration_ms
        native = native_fib_ms(language)
        if native is None:
            print(f"  fib(25): {engine_fib:8.1f} ms in the engine; no native {language} here")
        else:
            print(
                f"  fib(25): {engine_fib:8.1f} ms in the engine vs {native:7.1f} ms native "
                f"-> {engine_fib / native:5.1f}x"
            )
        snapshot, first_take, take = None, 0.0, [0.0]
        if spec.snapshots:
            # The first snapshot copies every written block; the next ones compare what
            # the guest wrote since (two of them to arm the blocks it left alone).
            first_take = timed(session.take_snapshot, 1)[0]
            timed(session.take_snapshot, 2)
            take = timed(session.take_snapshot, 5)
            snapshot = session.take_snapshot()
            assert snapshot is not None
    if snapshot is not None:
        # Restored once the session is gone, as an engine process restores what its host
        # sent (a snapshot another live instance maps is copied instead: see
        # `engines.snapshot`).
        whole = len(snapshot.memory)
        snapshot.keep_written_only()  # as an engine process keeps it, and restores it
        kept = 0 if snapshot.written is None else sum(snapshot.written) * 4096

        # Taken in turns, so that both see the same machine (a drift between two series
        # of a few samples each moved this ratio by 0.3 from run to run).
        restores, colds = [], []
        for _ in range(RESTORE_PAIRS):
            restores.append(first_result_ms(snapshot))
            colds.append(first_result_ms())
        restore_ms, paired_cold_ms = statistics.median(restores), statistics.median(colds)
        print(
            f"  snapshot: take {statistics.median(take):6.1f} ms (the first {first_take:5.1f} "
            f"ms), restore + first run {restore_ms:6.1f} ms ({kept / (1 << 20):.1f} of "
            f"{whole >> 20} MiB written) vs cold {paired_cold_ms:6.1f} ms -> "
            f"{restore_ms / paired_cold_ms:4.2f}x (medians of {RESTORE_PAIRS} in turns; "
            "target <= 1.0x)"
        )
        process_restore(language)
    else:
        print("  snapshot: this engine takes none")

    gc.collect()
    before = rss_bytes()
    sessions = [Session(spec, workspace=VirtualFS(GUEST_LIMITS)) for _ in range(3)]
    for live in sessions:
        live.execute("1+1")
    per_session = (rss_bytes() - before) / len(sessions)
    for live in sessions:
        live.close()
    print(f"  resident memory per live session: {per_session / (1 << 20):6.1f} MiB")


def process_restore(language: str) -> None:
    """A context's revisit after eviction, as the backend does it: a new session in an
    engine process of the pool, restored from the blocks stored for it (sent over its
    pipe), to its first result; against a cold session in the same pool."""
    pool = engine_process_pool()
    with ProcessSession(
        language, pool=pool, workspace=GUEST_LIMITS, limits=Limits(fuel=10**12)
    ) as source:
        for code in ["1+1"] * 200 + [FIB[language]]:
            source.execute(code)
        source.take_snapshot()
        source.collect_snapshot()
        stored = source.unstored
    assert stored is not None

    def first_result_ms(restore: bool) -> float:
        started = time.perf_counter()
        session = ProcessSession(
            language,
            pool=pool,
            workspace=GUEST_LIMITS,
            restore_source=(lambda build: stored) if restore else None,
        )
        try:
            session.execute("1+1")
            return (time.perf_counter() - started) * 1000
        finally:
            session.close()

    restores, colds = [], []
    for _ in range(RESTORE_PAIRS):
        restores.append(first_result_ms(True))
        colds.append(first_result_ms(False))
    restore_ms, cold_ms = statistics.median(restores), statistics.median(colds)
    print(
        f"  through an engine process (a revisit): restore + first run {restore_ms:6.1f} ms "
        f"({len(stored.blocks) * 4 / 1024:.1f} MiB sent) vs cold {cold_ms:6.1f} ms -> "
        f"{restore_ms / cold_ms:4.2f}x"
    )


def each_language(bench: Callable[[str], None], languages: Sequence[str] = LANGUAGES) -> None:
    """`bench(language)` for each language whose engine can be prepared here."""
    for language in languages:
        missing = missing_requirements(language_engine(language))
        if missing:
            print(f"\n[{language}] skipped: {missing[0].program} not found")
            continue
        bench(language)


def main() -> None:
    each_language(bench_language)


if __name__ == "__main__":
    main()
