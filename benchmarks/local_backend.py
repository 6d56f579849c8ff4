"""Local backend benchmarks: the API's overhead over a bare engine call, a revisit of an
evicted context, a run beside many resident contexts, a 1,000-file workspace reaching the
engine, and the store's size and speed with history.
Run: `python -m benchmarks local_backend`."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.engines import FIB
from engines.process import ProcessSession, engine_process_pool
from engines.session import Session
from engines.vfs import VirtualFS
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.config import LocalSettings
from workbench.core.workspace import GUEST_LIMITS
from workbench.paths import DATABASE_NAME

LANGUAGES = {"PYTHON": "python", "JAVASCRIPT": "javascript", "PERL": "perl", "RUBY": "ruby"}
RUNS = 100
PAUSE = 0.05
"""Seconds between the spaced runs: a REPL's pace (caches go cold in between)."""


def _open_api(data_dir: Path) -> Backend:
    # Ruby's contexts are a local extension (off by default, as deployed)
    return open_local_backend(data_dir, embedded=True, settings=LocalSettings(ruby_contexts=True))


async def back_to_back_samples(binding: str, data_dir: Path) -> list[float]:
    """`run_code('1+1')` through the API with no pause between runs."""
    backend = _open_api(data_dir)
    try:
        sandbox = backend.sandbox(f"bench-{binding.lower()}-back-to-back")
        context = await sandbox.interpreter.create_code_context(binding)
        for _ in range(3):
            await sandbox.interpreter.run_code("1+1", context=context)
        samples = []
        for _ in range(RUNS):
            started = time.perf_counter()
            await sandbox.interpreter.run_code("1+1", context=context)
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        await backend.aclose()
    return samples


async def paced_samples(binding: str, data_dir: Path) -> dict[str, list[float]]:
    """At a REPL's pace (a call after a pause costs more than one right after another,
    caches gone cold), in turn: the engine's own `1+1` call in this process and the
    snapshot after it; the same through an engine process (the isolation every run gets,
    see docs/security.md), the floor under the API's figure; and `run_code('1+1')`
    through the API, which adds its thread hop, JSON and the SQLite commit with the
    snapshot's delta. The three take turns, each in a different order every round, so
    that the machine's drift (large on these machines) falls on all three alike."""
    language = LANGUAGES[binding]
    backend = _open_api(data_dir)
    process = ProcessSession(language, pool=engine_process_pool(), workspace=GUEST_LIMITS)
    samples: dict[str, list[float]] = {
        name: [] for name in ("call", "snapshot", "process call", "process snapshot", "api")
    }
    try:
        with Session(language, workspace=VirtualFS(GUEST_LIMITS)) as in_process:
            sandbox = backend.sandbox(f"bench-{binding.lower()}")
            context = await sandbox.interpreter.create_code_context(binding)

            async def api() -> None:
                started = time.perf_counter()
                await sandbox.interpreter.run_code("1+1", context=context)
                samples["api"].append((time.perf_counter() - started) * 1000)

            async def engine() -> None:
                _timed(samples["call"], lambda: in_process.execute("1+1"))
                _timed(samples["snapshot"], in_process.take_snapshot)

            async def engine_process() -> None:
                _timed(samples["process call"], lambda: process.execute("1+1"))
                # as the API does after a run, before its answer
                _timed(samples["process snapshot"], process.take_snapshot, process.collect_snapshot)

            for _ in range(3):
                await api()
                await engine()
                await engine_process()
            for samples_so_far in samples.values():
                samples_so_far.clear()
            turns = [api, engine, engine_process]
            for round_number in range(RUNS):
                shift = round_number % len(turns)
                for turn in turns[shift:] + turns[:shift]:
                    await asyncio.sleep(PAUSE)
                    await turn()
    finally:
        process.close()
        await backend.aclose()
    return samples


def _timed(samples: list[float], *steps: Callable[[], object]) -> None:
    started = time.perf_counter()
    for step in steps:
        step()
    samples.append((time.perf_counter() - started) * 1000)


async def api_overhead(binding: str, data_dir: Path) -> None:
    paced = {
        name: statistics.median(values)
        for name, values in (await paced_samples(binding, data_dir)).items()
    }
    back_to_back = statistics.median(await back_to_back_samples(binding, data_dir))
    spaced, engine, snapshot = paced["api"], paced["call"], paced["snapshot"]
    process_call, process_snapshot = paced["process call"], paced["process snapshot"]
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


CROWD = 31
"""Other contexts resident beside the one timed (the resident cap is 32)."""


async def crowded(data_dir: Path) -> None:
    """A JavaScript `run_code('1+1')` at a REPL's pace with no other context resident,
    then with `CROWD` more resident (in sandboxes of their own, as 8 is a sandbox's cap):
    what a run pays for the sessions it does not use."""
    backend = open_local_backend(data_dir, embedded=True, memory_budget=8 << 30)
    interpreter = backend.sandbox("bench-crowd").interpreter
    context = await interpreter.create_code_context("JAVASCRIPT")

    async def paced() -> float:
        samples = []
        for _ in range(40):
            await asyncio.sleep(PAUSE)
            started = time.perf_counter()
            await interpreter.run_code("1+1", context=context)
            samples.append((time.perf_counter() - started) * 1000)
        return statistics.median(samples)

    await interpreter.run_code("1+1", context=context)
    alone = await paced()
    for index in range(CROWD):
        other = backend.sandbox(f"bench-crowd-{index}").interpreter
        await other.run_code("1+1", context=await other.create_code_context("JAVASCRIPT"))
    crowd = await paced()
    await backend.aclose()
    print(
        f"  JAVASCRIPT run_code('1+1') p50 with {CROWD} other contexts resident {crowd:6.2f} ms "
        f"vs alone {alone:6.2f} ms ({crowd / alone:4.2f}x)"
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
        await crowded(Path(scratch) / "crowd")
        await many_files(Path(scratch) / "files")
        await history_cost(Path(scratch) / "history")


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
