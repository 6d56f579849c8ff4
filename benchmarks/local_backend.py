"""Local backend benchmarks: the API's overhead over a bare engine call, a revisit of an
evicted context, a 1,000-file workspace reaching the engine, and the store's size and
speed with history.
Run: `python -m benchmarks local_backend`."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.engines import FIB
from engines.process import ProcessSession, engine_process_pool
from engines.session import Session
from engines.vfs import VirtualFS
from workbench.backends.local import open_local_backend
from workbench.config import LocalSettings
from workbench.core.workspace import GUEST_LIMITS
from workbench.paths import DATABASE_NAME

LANGUAGES = {"PYTHON": "python", "JAVASCRIPT": "javascript", "PERL": "perl", "RUBY": "ruby"}
RUNS = 100
PAUSE = 0.05
"""Seconds between the spaced runs: a REPL's pace (caches go cold in between)."""


async def api_samples(binding: str, data_dir: Path, pause: float) -> list[float]:
    # Ruby's contexts are a local extension (off by default, as deployed)
    backend = open_local_backend(
        data_dir, embedded=True, settings=LocalSettings(ruby_contexts=True)
    )
    sandbox = backend.sandbox(f"bench-{binding.lower()}-{int(pause * 1000)}")
    context = await sandbox.interpreter.create_code_context(binding)
    for _ in range(3):
        await sandbox.interpreter.run_code("1+1", context=context)
    samples = []
    for _ in range(RUNS):
        if pause:
            await asyncio.sleep(pause)
        started = time.perf_counter()
        await sandbox.interpreter.run_code("1+1", context=context)
        samples.append((time.perf_counter() - started) * 1000)
    await backend.aclose()
    return samples


def engine_samples(language: str) -> tuple[list[float], list[float]]:
    """The engine's own `1+1` call in this process at a REPL's pace (as the other figures:
    a call after a pause costs more than one right after another, caches gone cold), and
    the snapshot after it."""
    with Session(language, workspace=VirtualFS(GUEST_LIMITS)) as session:
        session.execute("1+1")
        session.take_snapshot()
        calls, snapshots = [], []
        for _ in range(RUNS):
            time.sleep(PAUSE)
            started = time.perf_counter()
            session.execute("1+1")
            calls.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            session.take_snapshot()
            snapshots.append((time.perf_counter() - started) * 1000)
    return calls, snapshots


def engine_process_samples(language: str) -> tuple[list[float], list[float]]:
    """The same call and snapshot through an engine process (the isolation every run
    gets, see docs/security.md) at a REPL's pace: the floor under the API's figure, which
    adds its thread hop, JSON and the SQLite commit (with the snapshot's delta)."""
    session = ProcessSession(language, pool=engine_process_pool(), workspace=GUEST_LIMITS)
    try:
        session.execute("1+1")
        calls, snapshots = [], []
        for _ in range(RUNS):
            time.sleep(PAUSE)
            started = time.perf_counter()
            session.execute("1+1")
            calls.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            session.take_snapshot()  # as the API does after a run, before its answer
            session.collect_snapshot()
            snapshots.append((time.perf_counter() - started) * 1000)
    finally:
        session.close()
    return calls, snapshots


async def api_overhead(binding: str, data_dir: Path) -> None:
    spaced = statistics.median(await api_samples(binding, data_dir, PAUSE))
    back_to_back = statistics.median(await api_samples(binding, data_dir, 0.0))
    calls, snapshots = engine_samples(LANGUAGES[binding])
    engine, snapshot = statistics.median(calls), statistics.median(snapshots)
    process_calls, process_snapshots = engine_process_samples(LANGUAGES[binding])
    process_call, process_snapshot = (
        statistics.median(process_calls),
        statistics.median(process_snapshots),
    )
    floor = process_call + process_snapshot
    print(
        f"  {binding:10} run_code('1+1') p50: {spaced:6.2f} ms at a REPL's pace, "
        f"{back_to_back:6.2f} ms back to back; the engine's own call {engine:5.2f} ms + "
        f"its snapshot {snapshot:5.2f} ms = {engine + snapshot:5.2f} ms "
        f"({spaced / (engine + snapshot):4.2f}x)"
    )
    print(
        f"  {'':10} through the engine process {process_call:5.2f} + {process_snapshot:5.2f} ms "
        f"(the process adds {process_call - engine:5.2f} ms to the call, target <= 0.5); the API "
        f"adds {spaced - floor:5.2f} ms to that (routes, thread hop, JSON, the SQLite "
        "commit with the snapshot's delta; target <= 0.5)"
    )


REVISITS = 21


async def revisit(binding: str, data_dir: Path) -> None:
    """A run in a context that was evicted (restored from the store into a new engine
    process: what a user waits for after the memory budget evicted it) against the first
    run of a new context, both through the API."""
    backend = open_local_backend(
        data_dir, embedded=True, max_resident=1, settings=LocalSettings(ruby_contexts=True)
    )
    interpreter = backend.sandbox(f"bench-revisit-{binding.lower()}").interpreter
    contexts = [await interpreter.create_code_context(binding) for _ in range(2)]
    for context in contexts:  # a context that has done some work: a heap that grew
        for _ in range(20):
            await interpreter.run_code("1+1", context=context)
        await interpreter.run_code(FIB[LANGUAGES[binding]], context=context)
    revisits, firsts = [], []
    for turn in range(REVISITS):
        started = time.perf_counter()
        await interpreter.run_code("1+1", context=contexts[turn % 2])  # evicts the other
        revisits.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        context = await interpreter.create_code_context(binding)
        await interpreter.run_code("1+1", context=context)
        firsts.append((time.perf_counter() - started) * 1000)
        await interpreter.delete_code_context(context)
    await backend.aclose()
    revisit_ms, first_ms = statistics.median(revisits), statistics.median(firsts)
    print(
        f"  {binding:10} a revisit's run_code('1+1') p50 {revisit_ms:6.1f} ms vs a new "
        f"context's create + first run {first_ms:6.1f} ms ({revisit_ms / first_ms:4.2f}x)"
    )


async def many_files(data_dir: Path) -> None:
    backend = open_local_backend(data_dir, embedded=True)
    sandbox = backend.sandbox("bench-files")
    started = time.perf_counter()
    await sandbox.mkdir("/workspace/data")
    for index in range(1000):
        await sandbox.write_file(f"/workspace/data/f{index:04}.txt", f"line {index}\n")
    written = time.perf_counter()
    result = await sandbox.interpreter.run_code(
        "import os\nlen(os.listdir('/workspace/data'))", binding="PYTHON"
    )
    finished = time.perf_counter()
    assert result.results and result.results[0].text == "1000", result.to_json()
    await backend.aclose()
    total = finished - started
    print(
        f"  1,000 small files: writes {written - started:5.2f} s + first execution that sees "
        f"them {finished - written:5.2f} s = {total:5.2f} s (target <= 1 s)"
    )


async def history_cost(data_dir: Path) -> None:
    backend = open_local_backend(data_dir, embedded=True)
    sandbox = backend.sandbox("bench-history")
    context = await sandbox.interpreter.create_code_context("PYTHON")
    database = data_dir / DATABASE_NAME
    before = database.stat().st_size
    started = time.perf_counter()
    for index in range(100):
        await sandbox.interpreter.run_code(
            f"value_{index} = {index} * 2\nvalue_{index}", context=context
        )
    elapsed = time.perf_counter() - started
    await backend.aclose()
    wal = database.with_name(database.name + "-wal")
    after = database.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    print(
        f"  100 executions with history: {elapsed:5.2f} s ({elapsed * 10:5.1f} ms each), "
        f"database +{(after - before) / 1024:7.1f} KiB"
    )


async def run() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for binding in LANGUAGES:
            await api_overhead(binding, Path(scratch) / binding)
        for binding in LANGUAGES:
            await revisit(binding, Path(scratch) / f"revisit-{binding}")
        await many_files(Path(scratch) / "files")
        await history_cost(Path(scratch) / "history")


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
