"""Remote backend benchmarks: `run_code("1+1")` through a real `serve` process over
loopback against the in-process local backend, and 1,000 sequential small file writes.
Run: `python -m benchmarks remote`."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.serve_process import serve_process
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.backends.remote import open_remote_backend

RUNS = 200
WRITES = 1000


async def p50_ms(call: Callable[[], Awaitable[object]]) -> float:
    """Median milliseconds of `call` over RUNS calls, after 20 to warm up."""
    for _ in range(20):
        await call()
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def run_latency(backend: Backend) -> float:
    sandbox = backend.sandbox("bench-remote")
    context = await sandbox.interpreter.create_code_context("PYTHON")
    return await p50_ms(lambda: sandbox.interpreter.run_code("1+1", context=context))


async def health_round_trip(backend: Backend) -> float:
    """The empty `GET /v1/health` round trip: the HTTP stack's floor under every request."""
    return await p50_ms(lambda: backend.transport.request("GET", "/v1/health"))


async def write_throughput(backend: Backend) -> float:
    sandbox = backend.sandbox("bench-writes")
    started = time.perf_counter()
    for index in range(WRITES):
        await sandbox.write_file(f"/workspace/f{index:04}.txt", f"line {index}\n")
    return WRITES / (time.perf_counter() - started)


async def run() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        local = open_local_backend(Path(scratch) / "local", embedded=True)
        local_p50 = await run_latency(local)
        local_rate = await write_throughput(local)
        await local.aclose()
        with serve_process(Path(scratch) / "served") as server:
            remote = open_remote_backend("bench", server.url, server.token)
            remote_p50 = await run_latency(remote)
            health_p50 = await health_round_trip(remote)
            remote_rate = await write_throughput(remote)
            await remote.aclose()
    print(
        f"  run_code('1+1') p50: through serve {remote_p50:6.2f} ms vs in-process "
        f"{local_p50:6.2f} ms -> +{remote_p50 - local_p50:5.2f} ms added "
        f"({remote_p50 / local_p50:4.2f}x; target <= 2 ms added)"
    )
    print(f"  floor: the empty GET /v1/health round trip through serve {health_p50:6.2f} ms")
    print(
        f"  {WRITES} sequential small file writes: through serve {remote_rate:7.0f}/s vs "
        f"in-process {local_rate:7.0f}/s ({local_rate / remote_rate:4.2f}x slower)"
    )


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
