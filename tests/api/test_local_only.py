"""Local-backend-only behaviour: restart persistence, idle expiry on a fixed clock, LRU
eviction of live engine sessions, and durability against SIGKILL (spec 2.6, 7.7, 8.3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workbench.api import ExecutionResult, SandboxError
from workbench.backends.local import open_local_backend
from workbench.core.clock import FixedClock

REPO = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000_000
TTL = 10_000


def texts(result: ExecutionResult) -> list[str | None]:
    return [entry.text for entry in result.results]


def ok(result: ExecutionResult) -> ExecutionResult:
    assert result.error is None, result.error
    return result


# ----- restart persistence --------------------------------------------------------------


async def test_state_survives_a_restart(
    tmp_path: Path, perl_engine: None, python_engine: None
) -> None:
    data = tmp_path / "data"
    first = open_local_backend(data, embedded=True)
    sandbox = first.sandbox("persist")
    await sandbox.set_env_vars({"SB": "sandbox"})
    await sandbox.mkdir("dir/empty", recursive=True)
    await sandbox.write_file("dir/a.txt", "alpha")
    await sandbox.write_file("bin.dat", bytes(range(256)))
    perl = await sandbox.interpreter.create_code_context(
        "PERL", cwd="/workspace/dir", env_vars={"CTX": "perl"}
    )
    python = await sandbox.interpreter.create_code_context("PYTHON")
    ok(await sandbox.interpreter.run_code("our $kept = 'from before'; 1", context=perl))
    ok(await sandbox.interpreter.run_code("our @list = (1, 2, 3); 2", context=perl))
    ok(await sandbox.interpreter.run_code("remembered = 42", context=python))
    before = await sandbox.get_info()
    await first.aclose()

    second = open_local_backend(data, embedded=True)
    try:
        assert "persist" in {summary.id for summary in await second.list_sandboxes()}
        sandbox = second.sandbox("persist")
        info = await sandbox.get_info()
        assert (info.id, info.created_at, info.env_vars) == (
            "persist",
            before.created_at,
            {"SB": "sandbox"},
        )
        assert (info.workspace_files, info.workspace_bytes) == (4, 5 + 256)
        assert (await sandbox.read_file("dir/a.txt")).content == "alpha"
        assert await sandbox.read_bytes("bin.dat") == bytes(range(256))
        assert (await sandbox.exists("dir/empty")).exists
        assert [(row.id, row.binding, row.cwd, row.executions) for row in info.contexts] == [
            (perl.id, "PERL", "/workspace/dir", 2),
            (python.id, "PYTHON", "/workspace", 1),
        ]
        perl_row, python_row = info.contexts
        assert perl_row.snapshot is not None  # written when the session closed
        assert python_row.snapshot is not None  # every engine snapshots
        listed = await sandbox.interpreter.list_code_contexts()
        assert [(c.id, c.created_at) for c in listed] == [
            (perl.id, perl.created_at),
            (python.id, python.created_at),
        ]

        restored = ok(
            await sandbox.interpreter.run_code(
                "[$kept, scalar(@list), $ENV{CTX}, $ENV{SB}, do { use Cwd; getcwd() }]",
                context=perl,
            )
        )
        assert [entry.json for entry in restored.results] == [
            ["from before", 3, "perl", "sandbox", "/workspace/dir"]
        ]
        assert restored.execution_count == 3
        assert restored.session is not None and restored.session.boot == "restored"
        assert restored.session.notes

        kept = await sandbox.interpreter.run_code("remembered", context=python)
        assert texts(ok(kept)) == ["42"]
        assert kept.execution_count == 2
        assert kept.session is not None and kept.session.boot == "restored"
    finally:
        await second.aclose()


DEPTH = 1520
"""`/workspace/top`, 1,520 levels of `/d` and `/leaf.txt`: 3,063 bytes (3,065 once
renamed to `moved`), within the 3,072 of a path."""
MAKE_DEEP_TREE = f"""
import os
path = '/workspace/top'
os.mkdir(path)
for _ in range({DEPTH}):
    path += '/d'
    os.mkdir(path)
open(path + '/leaf.txt', 'w').write('at the bottom')
len(path)
"""


async def test_a_tree_as_deep_as_a_path_allows_keeps_its_sandbox_working(
    tmp_path: Path, python_engine: None
) -> None:
    """Every walk over a tree (the store's, the engine's, a listing's) goes as deep as
    a path may: Python's recursion stops at 1,000 levels, and a tree deeper than that
    once made every run of its sandbox fail, a restart included."""
    data = tmp_path / "data"
    deepest = "/workspace/moved" + "/d" * DEPTH
    first = open_local_backend(data, embedded=True)
    try:
        sandbox = first.sandbox("deep")
        context = await sandbox.interpreter.create_code_context("PYTHON")
        made = ok(await sandbox.interpreter.run_code(MAKE_DEEP_TREE, context=context))
        assert texts(made) == [str(len("/workspace/top") + 2 * DEPTH)]
        listed = await sandbox.list_files("/workspace", recursive=True)
        assert len(listed.files) == 1 + DEPTH + 1
        # The guest moves the whole chain: the engine walks it to check and record it.
        moved = "os.rename('/workspace/top', '/workspace/moved')\nos.listdir('/workspace')"
        renamed = ok(await sandbox.interpreter.run_code(moved, context=context))
        assert [entry.json for entry in renamed.results] == [["moved"]]
    finally:
        await first.aclose()

    second = open_local_backend(data, embedded=True)  # the tree is read from the store
    try:
        sandbox = second.sandbox("deep")
        assert (await sandbox.read_file(f"{deepest}/leaf.txt")).content == "at the bottom"
        seen = f"open('{deepest}/leaf.txt').read()"
        assert texts(ok(await sandbox.interpreter.run_code(seen, context=context))) == [
            "'at the bottom'"
        ]
        await sandbox.delete_file("/workspace/moved", recursive=True)
        info = await sandbox.get_info()
        assert (info.workspace_files, info.workspace_bytes) == (0, 0)
        gone = "os.listdir('/workspace')"
        emptied = ok(await sandbox.interpreter.run_code(gone, context=context))
        assert [entry.json for entry in emptied.results] == [[]]
    finally:
        await second.aclose()


# ----- idle expiry on a fixed clock (spec 8.3) --------------------------------------


async def test_expires_at_moves_only_in_steps_over_a_tenth_of_the_ttl(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", ttl_ms=TTL, clock=clock, embedded=True)
    try:
        sandbox = backend.sandbox("idle")
        info = await sandbox.get_info()
        assert info.expires_at == T0 + TTL
        assert info.created_at == info.last_used == clock.now_iso()

        clock.advance(TTL // 10)  # exactly a tenth: not moved
        await sandbox.write_file("a.txt", "x")
        info = await sandbox.get_info()
        assert info.expires_at == T0 + TTL
        assert info.last_used == FixedClock(T0).now_iso()

        clock.advance(1)  # now more than a tenth later: moved, lastUsed recorded
        info = await sandbox.get_info()
        assert info.expires_at == clock.now_ms() + TTL
        assert info.last_used == clock.now_iso()
        [summary] = await backend.list_sandboxes()
        assert summary.expires_at == info.expires_at

        # set_env_vars always writes lastUsed, but moves the deadline only past the step
        clock.advance(10)
        await sandbox.set_env_vars({"A": "1"})
        info = await sandbox.get_info()
        assert info.last_used == clock.now_iso()
        assert info.expires_at == clock.now_ms() - 10 + TTL
    finally:
        await backend.aclose()


async def test_context_run_reports_the_armed_deadline(tmp_path: Path, perl_engine: None) -> None:
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", ttl_ms=TTL, clock=clock, embedded=True)
    try:
        sandbox = backend.sandbox("idle-run")
        first = ok(await sandbox.interpreter.run_code("1", binding="PERL"))
        assert first.context is not None and first.context.expires_at == T0 + TTL
        clock.advance(500)
        second = ok(await sandbox.interpreter.run_code("2", binding="PERL"))
        assert second.context is not None and second.context.expires_at == T0 + TTL
        clock.advance(600)
        third = ok(await sandbox.interpreter.run_code("3", binding="PERL"))
        assert third.context is not None and third.context.expires_at == T0 + 1100 + TTL
    finally:
        await backend.aclose()


async def test_idle_sandbox_is_wiped_after_the_ttl(tmp_path: Path, perl_engine: None) -> None:
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", ttl_ms=TTL, clock=clock, embedded=True)
    try:
        sandbox = backend.sandbox("idle-wipe")
        await sandbox.set_env_vars({"A": "1"})
        await sandbox.write_file("a.txt", "x")
        ok(await sandbox.interpreter.run_code("our $v = 1; 1", binding="PERL"))
        clock.advance(900)  # a touch inside the step does not extend the deadline
        await sandbox.exists("a.txt")

        clock.set(T0 + TTL - 1)
        assert "idle-wipe" in {summary.id for summary in await backend.list_sandboxes()}
        clock.set(T0 + TTL)  # 0.91 x TTL after the last request: destroyed
        assert "idle-wipe" not in {summary.id for summary in await backend.list_sandboxes()}

        info = await sandbox.get_info()  # a brand-new sandbox
        assert info.created_at == clock.now_iso()
        assert info.env_vars == {}
        assert info.contexts == []
        assert (info.workspace_files, info.workspace_bytes) == (0, 0)
        fresh = ok(await sandbox.interpreter.run_code("defined $v ? 1 : 0", binding="PERL"))
        assert texts(fresh) == ["0"]
        assert fresh.execution_count == 1
    finally:
        await backend.aclose()


async def test_expiry_also_applies_without_a_listing(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", ttl_ms=TTL, clock=clock, embedded=True)
    try:
        sandbox = backend.sandbox("idle-direct")
        await sandbox.write_file("a.txt", "x")
        clock.advance(TTL + 1)
        assert not (await sandbox.exists("a.txt")).exists
    finally:
        await backend.aclose()


async def test_expiry_survives_a_restart(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", ttl_ms=TTL, clock=clock, embedded=True)
    await backend.sandbox("idle-restart").write_file("a.txt", "x")
    await backend.aclose()
    clock.advance(TTL)
    backend = open_local_backend(tmp_path / "data", ttl_ms=TTL, clock=clock, embedded=True)
    try:
        assert await backend.list_sandboxes() == []
    finally:
        await backend.aclose()


async def test_ttl_zero_disables_expiry(tmp_path: Path, perl_engine: None) -> None:
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", ttl_ms=0, clock=clock, embedded=True)
    try:
        sandbox = backend.sandbox("forever")
        await sandbox.write_file("a.txt", "x")
        info = await sandbox.get_info()
        assert info.expires_at is None
        result = ok(await sandbox.interpreter.run_code("1", binding="PERL"))
        assert result.context is not None and result.context.expires_at is None
        assert "expiresAt" not in result.to_json()["context"]
        clock.advance(10 * 365 * 86_400_000)
        [summary] = await backend.list_sandboxes()
        assert (summary.id, summary.expires_at) == ("forever", None)
        assert (await sandbox.read_file("a.txt")).content == "x"
    finally:
        await backend.aclose()


@pytest.mark.parametrize("ttl", ["1e18", "1e300", "99999999999999999999999"])
async def test_a_ttl_past_the_range_of_a_date_counts_as_a_hundred_years(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ttl: str
) -> None:
    """1e300 made every touch of a sandbox an HTTP 500 (SQLite's integer overflowed), and
    1e18 stored a deadline no date can hold, so listing the sandbox failed for good."""
    monkeypatch.setenv("SANDBOX_WORKBENCH_IDLE_TTL_MS", ttl)
    clock = FixedClock(T0)
    backend = open_local_backend(tmp_path / "data", clock=clock, embedded=True)
    try:
        await backend.sandbox("lasting").write_file("a.txt", "x")
        [summary] = await backend.list_sandboxes()
        hundred_years = 100 * 365 * 86_400_000
        assert summary.expires_at == T0 + hundred_years
        assert (await backend.sandbox("lasting").get_info()).expires_at == T0 + hundred_years
    finally:
        await backend.aclose()


# ----- LRU eviction of live sessions -------------------------------------------------


async def test_evicted_context_is_restored_from_its_snapshot(
    tmp_path: Path, perl_engine: None, python_engine: None
) -> None:
    backend = open_local_backend(tmp_path / "data", max_resident=1, embedded=True)
    try:
        sandbox = backend.sandbox("lru")
        one = await sandbox.interpreter.create_code_context("PERL")
        two = await sandbox.interpreter.create_code_context("PERL")
        first = ok(await sandbox.interpreter.run_code("our $who = 'one'; 1", context=one))
        assert first.session is not None and first.session.boot == "fresh"
        ok(await sandbox.interpreter.run_code("our $who = 'two'; 2", context=two))  # evicts one

        back = ok(await sandbox.interpreter.run_code("$who", context=one))
        assert texts(back) == ["one"]
        assert back.session is not None and back.session.boot == "restored"
        again = ok(await sandbox.interpreter.run_code("$who", context=one))
        assert again.session is not None and again.session.boot == "resident"
        other = ok(await sandbox.interpreter.run_code("$who", context=two))
        assert texts(other) == ["two"]
        assert other.session is not None and other.session.boot == "restored"

        # a Python context comes back from its snapshot too (every engine snapshots)
        python = await sandbox.interpreter.create_code_context("PYTHON")
        ok(await sandbox.interpreter.run_code("x = 1", context=python))
        ok(await sandbox.interpreter.run_code("$who", context=one))  # evicts python
        kept = ok(await sandbox.interpreter.run_code("x + 41", context=python))
        assert texts(kept) == ["42"]
        assert kept.session is not None and kept.session.boot == "restored"
        assert kept.session.notes
    finally:
        await backend.aclose()


# ----- durability against SIGKILL -------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from workbench.backends.local import open_local_backend

    def content(i):
        return f"{i}:" + "abcdefghij" * (i % 50) * 200 + f":{i}"

    async def main():
        backend = open_local_backend(Path(sys.argv[1]), embedded=True)
        sandbox = backend.sandbox("killed")
        await sandbox.mkdir("out")
        print("ready", flush=True)
        i = 0
        while True:
            path = f"out/f{i:05d}.txt"
            await sandbox.write_file(path, content(i))
            if i % 7 == 3:
                await sandbox.write_file(f"out/f{i - 3:05d}.txt", content(i - 3) + "!")
            print(path, flush=True)
            i += 1

    asyncio.run(main())
    """
)


def expected_content(index: int, rewritten: bool) -> str:
    text = f"{index}:" + "abcdefghij" * (index % 50) * 200 + f":{index}"
    return text + "!" if rewritten else text


async def test_sigkill_loses_no_acknowledged_write(tmp_path: Path) -> None:
    data = tmp_path / "data"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(data)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acknowledged: list[str] = []
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr
        deadline = time.monotonic() + 30
        while len(acknowledged) < 150 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acknowledged.append(line.strip())
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        # Read the rest through the same buffered reader: `communicate` would read the raw
        # pipe and miss acknowledgements already buffered by `readline`.
        rest = child.stdout.read()
        acknowledged.extend(line for line in rest.splitlines() if line)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert len(acknowledged) >= 150

    def rewritten(index: int) -> bool:
        # file i is rewritten with "!" right after file i + 3 is written (when i % 7 == 0)
        return index % 7 == 0 and f"out/f{index + 3:05d}.txt" in acknowledged

    backend = open_local_backend(data, embedded=True)
    try:
        sandbox = backend.sandbox("killed")
        for path in acknowledged:
            index = int(path[len("out/f") : -len(".txt")])
            read = await sandbox.read_file(path)
            allowed = {expected_content(index, rewritten(index))}
            if index % 7 == 0 and not rewritten(index):
                # the rewrite may be the one write in flight when the process died
                allowed.add(expected_content(index, True))
            assert read.content in allowed, path

        listing = await sandbox.list_files("out")
        present = sorted(f.relative_path for f in listing.files)
        # at most one write was in flight when the process died: present whole, or absent
        assert set(present) >= {path[len("out/") :] for path in acknowledged}
        assert len(present) <= len(acknowledged) + 1
        total = 0
        for entry in listing.files:
            index = int(entry.name[1:-4])
            content = (await sandbox.read_file(f"out/{entry.name}")).content
            assert content in (expected_content(index, False), expected_content(index, True))
            assert entry.size == len(content.encode())
            total += entry.size
        info = await sandbox.get_info()
        assert (info.workspace_files, info.workspace_bytes) == (len(present) + 1, total)
        # the database is still writable
        await sandbox.write_file("after.txt", "ok")
        assert (await sandbox.read_file("after.txt")).content == "ok"
    finally:
        await backend.aclose()


async def test_a_request_whose_turn_comes_after_a_close_is_not_carried_out(
    tmp_path: Path, perl_engine: None
) -> None:
    """Once the gateway cancelled everything to close (a daemon stopping), a request that
    was still to come, stateless, in a sandbox or an inspection, is refused and says
    why."""
    backend = open_local_backend(tmp_path / "data", embedded=True)
    try:
        context = await backend.sandbox("s").interpreter.create_code_context("PERL")
        gateway = backend.transport.gateway  # type: ignore[attr-defined]
        gateway.cancel_all("the test closed the gateway")
        for call in (
            backend.run_code("1", binding="PERL"),
            backend.sandbox("s").write_file("/workspace/a.txt", "a"),
            backend.sandbox("s").interpreter.inspect_context(context),
        ):
            with pytest.raises(SandboxError) as refused:
                await call
            assert refused.value.http_status == 503
            assert refused.value.message == (
                "Not carried out: the test closed the gateway before this request's turn"
            )
    finally:
        await backend.aclose()
