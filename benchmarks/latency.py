"""Performance at a distance: the remote backend against `serve` behind a proxy that adds
a fixed delay each way (0, 50 and 150 ms round trip), as a deployed gateway would be.

Measures, per round-trip time (RTT), next to the targets at 50 ms:
- a `run_code` round trip (p50), and HTTP requests per execution (target ≤ 1 RTT + 10 ms,
  one request);
- save → visible in the sandbox while watching (p50 from the file write to the sync's
  acknowledgement; target ≤ 1 RTT + 100 ms), and HTTP requests per save;
- the initial sync of 1,000 files / 10 MiB (target ≤ 3 s), and its HTTP requests;
- opening a sandbox (the API calls the TUI makes before it shows the sandbox; target ≤ 2 RTTs).

Run: `python -m benchmarks latency`.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from benchmarks._delay_proxy import DelayProxy
from benchmarks.sync import FILE_BYTES, FILES, make_tree
from workbench.api import Backend
from workbench.backends.remote import open_remote_backend
from workbench.sync import EventKind, FolderSync

RTTS_MS = (0, 50, 150)
RUNS = 20
SAVES = 10
DEBOUNCE = 0.05
REPL_PAUSE = 0.1
"""Seconds between two `run_code` calls: a person at a REPL is slower than that."""


async def run_code_round_trip(backend: Backend, proxy: DelayProxy) -> tuple[float, float]:
    """p50 seconds of `run_code("1+1")` in a context at a REPL's pace (the snapshot the
    engine takes after each answer is done before the next run), and requests per
    execution."""
    sandbox = backend.sandbox("latency-run")
    context = await sandbox.interpreter.create_code_context("PYTHON")
    for _ in range(3):
        await sandbox.interpreter.run_code("1+1", context=context)
    samples = []
    before = proxy.requests
    for _ in range(RUNS):
        await asyncio.sleep(REPL_PAUSE)
        started = time.perf_counter()
        await sandbox.interpreter.run_code("1+1", context=context)
        samples.append(time.perf_counter() - started)
    requests = (proxy.requests - before) / RUNS
    await sandbox.destroy()
    return statistics.median(samples), requests


async def save_to_visible(backend: Backend, folder: Path, proxy: DelayProxy) -> tuple[float, float]:
    """p50 seconds from a file write to the sync's acknowledgement that it is uploaded,
    and HTTP requests per save."""
    sandbox = backend.sandbox("latency-save")
    sync = FolderSync(folder, sandbox, debounce=DEBOUNCE)
    synced: asyncio.Queue[float] = asyncio.Queue()
    sync.subscribe(
        lambda event: (
            synced.put_nowait(time.perf_counter()) if event.kind is EventKind.SYNCED else None
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(sync.watch(stop=stop))
    await synced.get()  # the initial pass
    samples = []
    requests = 0
    for index in range(SAVES):
        before = proxy.requests
        started = time.perf_counter()
        (folder / "edited.txt").write_text(f"save {index}\n")
        samples.append(await synced.get() - started)
        requests += proxy.requests - before
        await asyncio.sleep(0.05)
    stop.set()
    await task
    await sandbox.destroy()
    return statistics.median(samples), requests / SAVES


async def initial_sync(
    backend: Backend, tree: Path, rtt_ms: int, proxy: DelayProxy
) -> tuple[float, int]:
    """Seconds and HTTP requests of a first sync of the tree into a fresh sandbox."""
    sandbox = backend.sandbox(f"latency-tree-{rtt_ms}")
    before = proxy.requests
    started = time.perf_counter()
    report = await FolderSync(tree, sandbox).initial_sync()
    elapsed = time.perf_counter() - started
    requests = proxy.requests - before
    assert len(report.uploaded) == FILES and not report.errors, report.summary()
    await sandbox.destroy()
    return elapsed, requests


async def open_sandbox(backend: Backend, proxy: DelayProxy) -> tuple[float, int]:
    """What the TUI does when a sandbox is selected: its info (contexts included) and the
    top of its workspace. Seconds and requests."""
    sandbox = backend.sandbox("latency-open")
    await sandbox.write_file("a.txt", "a")
    before = proxy.requests
    started = time.perf_counter()
    await asyncio.gather(sandbox.get_info(), sandbox.list_files("/workspace"))
    elapsed = time.perf_counter() - started
    requests = proxy.requests - before
    await sandbox.destroy()
    return elapsed, requests


async def measure(serve_url: str, token: str, base: Path, tree: Path) -> None:
    port = urlsplit(serve_url).port
    assert port is not None
    for rtt in RTTS_MS:
        async with DelayProxy(port, rtt_ms=rtt) as proxy:
            backend = open_remote_backend("latency", proxy.url, token, timeout=httpx.Timeout(120.0))
            try:
                run_p50, per_run = await run_code_round_trip(backend, proxy)
                folder = base / f"edited-{rtt}"
                folder.mkdir()
                save_p50, per_save = await save_to_visible(backend, folder, proxy)
                sync_seconds, sync_requests = await initial_sync(backend, tree, rtt, proxy)
                open_seconds, open_requests = await open_sandbox(backend, proxy)
            finally:
                await backend.aclose()
        rtt_s = rtt / 1000
        print(f"RTT {rtt} ms:")
        print(
            f"  run_code round trip p50   {run_p50 * 1000:7.1f} ms, {per_run:.1f} requests/run"
            + (f"   (target ≤ {rtt + 10} ms, 1 request)" if rtt == 50 else "")
        )
        print(
            f"  save → visible p50        {save_p50 * 1000:7.1f} ms, {per_save:.1f} requests/save"
            f"   (debounce {DEBOUNCE * 1000:.0f} ms"
            + (f"; target ≤ {rtt + 100} ms)" if rtt == 50 else ")")
        )
        print(
            f"  initial sync {FILES} files / {FILES * FILE_BYTES / 2**20:.0f} MiB "
            f"{sync_seconds:6.2f} s, {sync_requests} requests"
            + ("   (target ≤ 3 s)" if rtt == 50 else "")
        )
        rtts = open_seconds / rtt_s if rtt else float("nan")
        print(
            f"  open a sandbox            {open_seconds * 1000:7.1f} ms, {open_requests} requests"
            + (f" = {rtts:.1f} RTTs   (target ≤ 2 RTTs)" if rtt == 50 else "")
        )


async def run() -> None:
    from tests.serve_process import serve_process

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        tree = base / "tree"
        tree.mkdir()
        make_tree(tree)
        with serve_process(base / "serve-data") as serve:
            await measure(serve.url, serve.token, base, tree)


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
