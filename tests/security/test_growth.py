"""Nothing in the local backend grows without bound (issue 11, item 8): the in-memory
sandbox objects (LRU), what a listing reads, execution history, and idle sandboxes that
nobody touches again (a periodic sweep)."""

from __future__ import annotations

import asyncio
import base64
import sqlite3
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from engines.result import Limits
from engines.snapshot import SnapshotDelta
from workbench.api import Backend, ExecutionResult
from workbench.backends.local import LocalGateway, LocalTransport, open_local_gateway
from workbench.backends.local.gateway import MAX_CACHED_SANDBOXES
from workbench.core.clock import FixedClock
from workbench.store import Store

T0 = 1_800_000_000_000


def client(gateway: LocalGateway) -> Backend:
    return Backend(LocalTransport(gateway, "local"), name="local")


def ok(result: ExecutionResult) -> ExecutionResult:
    assert result.error is None, result.error
    return result


# ----- the sandbox objects are an LRU ---------------------------------------------------


async def test_sandbox_objects_are_bounded_and_reread_from_the_store(tmp_path: Path) -> None:
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    backend = client(gateway)
    try:
        count = MAX_CACHED_SANDBOXES + 12
        for index in range(count):
            sandbox = backend.sandbox(f"s{index}")
            await sandbox.write_file("n.txt", str(index))
            await sandbox.set_env_vars({"N": str(index)})
            assert len(gateway._sandboxes) <= MAX_CACHED_SANDBOXES
        for index in (0, 5, count - 1):  # evicted ones come back from SQLite intact
            sandbox = backend.sandbox(f"s{index}")
            assert (await sandbox.read_file("n.txt")).content == str(index)
            assert (await sandbox.get_info()).env_vars == {"N": str(index)}
    finally:
        gateway.close()


async def test_a_busy_sandbox_is_never_evicted(tmp_path: Path, perl_engine: None) -> None:
    # Fuel to spare: the loop below must outlast the test's pauses on a fast machine.
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0, limits=Limits(fuel=10**13))
    gateway.max_cached_sandboxes = 2
    backend = client(gateway)
    try:
        busy = backend.sandbox("busy")
        context = await busy.interpreter.create_code_context("PERL")
        running = asyncio.create_task(busy.interpreter.run_code("1 while 1", context=context))
        await asyncio.sleep(0.3)  # the run holds the sandbox's queue
        for index in range(5):
            await backend.sandbox(f"other{index}").write_file("a.txt", "x")
        # Still the one object of "busy": a request queues behind its run (spec 1.5) ...
        queued = asyncio.create_task(busy.write_file("after.txt", "x"))
        await asyncio.sleep(0.3)
        assert not queued.done()
        # ... and the run can still be cancelled through it.
        assert await busy.cancel() is True
        result = await running
        assert result.error is not None and result.error.message == "Execution cancelled"
        await queued
        assert len(gateway._sandboxes) <= 2
    finally:
        gateway.close()


async def test_an_evicted_sandbox_keeps_its_contexts_state(
    tmp_path: Path, perl_engine: None
) -> None:
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    gateway.max_cached_sandboxes = 2
    backend = client(gateway)
    try:
        sandbox = backend.sandbox("snap")
        context = await sandbox.interpreter.create_code_context("PERL")
        ok(await sandbox.interpreter.run_code("our $kept = 42; 1", context=context))
        for index in range(3):
            await backend.sandbox(f"other{index}").write_file("a.txt", "x")
        [row] = (await sandbox.get_info()).contexts
        assert row.snapshot is not None
        again = ok(await sandbox.interpreter.run_code("$kept", context=context))
        assert [entry.text for entry in again.results] == ["42"]
    finally:
        gateway.close()


# ----- a listing reads sandbox rows only ------------------------------------------------


async def test_listing_reads_no_workspace(tmp_path: Path) -> None:
    first = open_local_gateway(tmp_path / "data", ttl_ms=0)
    megabyte = base64.b64encode(bytes(range(256)) * 4096).decode()
    for name in ("a", "b", "c"):
        sandbox = client(first).sandbox(name)
        for index in range(3):
            await sandbox.write_file(f"f{index}.bin", megabyte, encoding="base64")
    first.close()

    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    try:
        tracemalloc.start()
        try:
            listed = await client(gateway).list_sandboxes()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert [summary.id for summary in listed] == ["a", "b", "c"]
        assert peak < 1 << 20, f"listing 3 sandboxes of 3 MiB allocated {peak} bytes"
        info = await client(gateway).sandbox("b").get_info()  # used: now it is read
        assert (info.workspace_files, info.workspace_bytes) == (3, 3 << 20)
    finally:
        gateway.close()


# ----- history keeps the newest entries per context -------------------------------------


def test_history_is_pruned_to_the_newest_entries_on_insert(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3", history_limit=3)
    try:
        for seq in range(1, 6):
            with store.transaction() as tx:
                tx.add_history("s", "one", seq, f"code {seq}", seq, None)
                if seq <= 2:
                    tx.add_history("s", "two", seq, f"code {seq}", seq, None)
        assert [entry[0] for entry in store.history("s", "one")] == [3, 4, 5]
        assert [entry[0] for entry in store.history("s", "two")] == [1, 2]
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "db.sqlite3") as other:  # pruned, not just hidden
        [(rows,)] = other.execute("SELECT count(*) FROM history").fetchall()
    assert rows == 3 + 2


def test_checkpoint_blocks_are_shared_and_freed_with_their_last_holder(tmp_path: Path) -> None:
    """A checkpoint names the snapshot's blocks (no copy); a block goes when no snapshot
    or checkpoint names it any more, so checkpoints never leave memory behind."""

    def block(byte: int) -> memoryview:
        return memoryview(bytes([byte]) * 4096)

    def stored_blocks() -> int:
        with sqlite3.connect(tmp_path / "db.sqlite3") as other:
            [(count,)] = other.execute("SELECT count(*) FROM snapshot_blocks").fetchall()
        return int(count)

    store = Store(tmp_path / "db.sqlite3")
    value = {"snapshot": None, "executions": 1, "cwd": "/workspace"}
    try:
        with store.transaction() as tx:
            first = SnapshotDelta(8192, {0: block(1), 1: block(2)}, {}, from_image=True)
            tx.put_snapshot("s", "c", first)
            tx.save_checkpoint("s", "c", "one", 1, value)
            tx.put_snapshot("s", "c", SnapshotDelta(8192, {0: block(3)}, {}))
        store.fold_changes()
        assert stored_blocks() == 3
        assert [saved.bytes for saved in store.checkpoints("s", "c")] == [8192]
        with store.transaction() as tx:
            assert tx.restore_checkpoint("s", "c", "one")
            assert not tx.restore_checkpoint("s", "c", "none")
        assert store.snapshot_blocks("s", "c") == {0: bytes(block(1)), 1: bytes(block(2))}
        assert stored_blocks() == 2  # block 3: nothing names it now
        with store.transaction() as tx:
            tx.save_checkpoint("s", "c", "two", 2, value)
            assert tx.delete_checkpoint("s", "c", "one")
        assert stored_blocks() == 2  # the snapshot and "two" still name them
        with store.transaction() as tx:
            tx.delete_context("s", "c")
        assert stored_blocks() == 0 and store.checkpoints("s", "c") == []
    finally:
        store.close()


async def test_history_limit_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, perl_engine: None
) -> None:
    monkeypatch.setenv("SANDBOX_WORKBENCH_HISTORY_LIMIT", "2")
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    try:
        interpreter = client(gateway).sandbox("hist").interpreter
        context = await interpreter.create_code_context("PERL")
        for value in range(1, 5):
            ok(await interpreter.run_code(str(value), context=context))
        history = await interpreter.history(context)
        assert [(entry.seq, entry.code) for entry in history] == [(3, "3"), (4, "4")]
    finally:
        gateway.close()


# ----- idle sandboxes expire without being touched --------------------------------------


async def _until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_an_idle_sandbox_is_swept_without_any_request(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    ttl = 1000  # the sweep runs every TTL/10 = 0.1 s of real time
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=ttl, clock=clock)
    backend = client(gateway)
    try:
        await backend.sandbox("idle").write_file("a.txt", "x")
        clock.advance(ttl - 200)
        await backend.sandbox("recent").write_file("a.txt", "x")
        clock.advance(200)  # "idle" reached its deadline, "recent" has 0.8 TTL to go
        assert await _until(lambda: gateway.store.sandbox("idle") is None, 5)
        assert gateway.store.files("idle") == []
        await asyncio.sleep(0.3)  # a few more sweeps
        assert gateway.store.sandbox("recent") is not None
    finally:
        gateway.close()


async def test_close_cancels_the_sweep(tmp_path: Path) -> None:
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=1000, clock=FixedClock(T0))
    await client(gateway).sandbox("s").write_file("a.txt", "x")
    sweeper = gateway._sweeper
    assert sweeper is not None and not sweeper.done()
    gateway.close()
    await asyncio.sleep(0)
    assert sweeper.cancelled()


async def test_no_sweep_runs_when_expiry_is_off(tmp_path: Path) -> None:
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    try:
        await client(gateway).sandbox("s").write_file("a.txt", "x")
        assert gateway._sweeper is None
    finally:
        gateway.close()
