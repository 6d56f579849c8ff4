"""Folder sync: save-to-visible latency under a real watcher, and initial sync of
1,000 files / 10 MiB locally and through a real `serve` process (as a ratio).

Targets: p50 latency beyond the debounce window ≤ 150 ms; initial local sync ≤ 2 s.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.backends.remote import open_remote_backend
from workbench.sync import EventKind, FolderSync

SAVES = 30
FILES = 1000
FILE_BYTES = 10 * 1024 * 1024 // FILES
DEBOUNCE = 0.05


def make_tree(root: Path) -> None:
    for index in range(FILES):
        sub = root / f"dir{index % 20}"
        sub.mkdir(exist_ok=True)
        line = f"line of file {index} ".encode()
        (sub / f"file{index}.txt").write_bytes((line * (FILE_BYTES // len(line) + 1))[:FILE_BYTES])


async def initial_sync_seconds(backend: Backend, root: Path) -> float:
    sandbox = backend.sandbox(f"bench-{os.getpid()}-{time.monotonic_ns() % 10**9}")
    started = time.perf_counter()
    report = await FolderSync(root, sandbox).initial_sync()
    elapsed = time.perf_counter() - started
    assert len(report.uploaded) == FILES and not report.errors, report.summary()
    await sandbox.destroy()
    return elapsed


async def save_latencies(backend: Backend, root: Path) -> list[float]:
    """Seconds from a file save to its new content being readable in the sandbox."""
    sandbox = backend.sandbox(f"latency-{os.getpid()}")
    sync = FolderSync(root, sandbox, debounce=DEBOUNCE)
    synced = asyncio.Event()
    sync.subscribe(lambda event: synced.set() if event.kind is EventKind.SYNCED else None)
    stop = asyncio.Event()
    task = asyncio.create_task(sync.watch(stop=stop))
    await synced.wait()
    latencies: list[float] = []
    for index in range(SAVES):
        content = f"save {index}\n".encode()
        started = time.perf_counter()
        (root / "edited.txt").write_bytes(content)
        while True:
            try:
                if await sandbox.read_bytes("/workspace/edited.txt") == content:
                    break
            except Exception:
                pass
            await asyncio.sleep(0.002)
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.1)
    stop.set()
    await task
    await sandbox.destroy()
    return latencies


async def run() -> None:
    from tests.serve_process import serve_process

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        tree = base / "tree"
        tree.mkdir()
        make_tree(tree)
        edited = base / "edited"
        edited.mkdir()

        local = open_local_backend(base / "local-data", embedded=True)
        try:
            local_seconds = await initial_sync_seconds(local, tree)
            latencies = await save_latencies(local, edited)
        finally:
            await local.aclose()
        with serve_process(base / "serve-data") as serve:
            remote = open_remote_backend(
                "bench", serve.url, serve.token, timeout=httpx.Timeout(60.0)
            )
            try:
                remote_seconds = await initial_sync_seconds(remote, tree)
            finally:
                await remote.aclose()

    p50 = statistics.median(latencies)
    beyond = p50 - DEBOUNCE
    print(f"save → visible (local backend, {SAVES} saves, debounce {DEBOUNCE * 1000:.0f} ms):")
    print(
        f"  p50 {p50 * 1000:.0f} ms, p90 {sorted(latencies)[int(SAVES * 0.9)] * 1000:.0f} ms; "
        f"beyond debounce {beyond * 1000:.0f} ms (target ≤ 150 ms, ratio "
        f"{beyond / 0.150:.2f})"
    )
    print(f"initial sync of {FILES} files / {FILES * FILE_BYTES / 2**20:.0f} MiB:")
    print(f"  local backend  {local_seconds:.2f} s (target ≤ 2 s, ratio {local_seconds / 2:.2f})")
    print(
        f"  through serve  {remote_seconds:.2f} s "
        f"(ratio to local {remote_seconds / local_seconds:.2f})"
    )


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
