"""Local backend benchmarks: the API's overhead over a bare engine call, a 1,000-file
workspace reaching the engine, and the store's size and speed with history.
Run: `python -m benchmarks local_backend`."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from engines.session import Session
from workbench.backends.local import open_local_backend
from workbench.paths import DATABASE_NAME

LANGUAGES = {"PYTHON": "python", "PERL": "perl"}
RUNS = 200


async def api_overhead(binding: str, data_dir: Path) -> None:
    backend = open_local_backend(data_dir)
    sandbox = backend.sandbox(f"bench-{binding.lower()}")
    context = await sandbox.interpreter.create_code_context(binding)
    await sandbox.interpreter.run_code("1+1", context=context)
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        await sandbox.interpreter.run_code("1+1", context=context)
        samples.append((time.perf_counter() - started) * 1000)
    await backend.aclose()
    with (
        tempfile.TemporaryDirectory() as workspace,
        Session(LANGUAGES[binding], workspace=Path(workspace)) as session,
    ):
        session.execute("1+1")
        bare = []
        for _ in range(RUNS):
            started = time.perf_counter()
            session.execute("1+1")
            bare.append((time.perf_counter() - started) * 1000)
    api, engine = statistics.median(samples), statistics.median(bare)
    print(
        f"  run_code('1+1') via the API ({binding}): p50 {api:6.2f} ms vs engine session call "
        f"{engine:6.2f} ms -> {api / engine:4.2f}x (target <= 1.5x)"
    )


async def many_files(data_dir: Path) -> None:
    backend = open_local_backend(data_dir)
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
    backend = open_local_backend(data_dir)
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
        await many_files(Path(scratch) / "files")
        await history_cost(Path(scratch) / "history")


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
