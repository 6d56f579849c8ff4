"""Workspace paths from outside are checked up front, and a change reaches memory only
together with SQLite (issue 11, item 6).

A path with a NUL, a lone surrogate, a segment over 255 bytes or a total over
`MAX_PATH_BYTES` is one no guest could make (the engines hold the same name and path
limits, and the other two have no UTF-8 form). The files API refuses such a path with 400
VALIDATION_FAILED (`Invalid path: ...` / `Invalid newPath: ...`), context creation
refuses such a `cwd` the same way,
and a change whose transaction fails (a statement or the COMMIT itself) is taken back out
of the in-memory workspace, and a run's out of its context's REPL state.
"""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import signal
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.vfs import File, PathState, TreeUpdate, VirtualFS
from tests.conftest import require_engine
from workbench.api import Backend, ErrorCode, SandboxError
from workbench.backends.local import (
    LocalGateway,
    LocalTransport,
    open_local_backend,
    open_local_gateway,
)
from workbench.core.paths import MAX_PATH_BYTES, ROOT, InvalidPathError, normalize
from workbench.core.workspace import GUEST_LIMITS, FileNode, Workspace
from workbench.paths import DATABASE_NAME
from workbench.protocol.http import Request
from workbench.protocol.timestamps import iso_from_ms
from workbench.store.database import Transaction

SANDBOX = "inputs"
REFUSED_PATHS = {
    "nul": "a\0b.txt",
    "lone surrogate": "caf\ud800.txt",
    "segment of 256 bytes": "x" * 256,
    "segment of 128 two-byte characters": "é" * 128,
    "path beyond PATH_MAX": "/".join(["d" * 250] * 17),
}
View = dict[str, tuple[str, int, str | None]]
"""absolute path -> (type, size, modifiedAt of a file)."""


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[LocalGateway]:
    opened = open_local_gateway(tmp_path / "data", ttl_ms=0)  # no expiry sweep needed
    try:
        yield opened
    finally:
        opened.close()


async def call(gateway: LocalGateway, method: str, path: str, body: Any = None) -> Any:
    """(status, JSON answer) of one gateway request, as a client would send it."""
    payload = b"" if body is None else json.dumps(body).encode()
    response = await gateway.handle(Request(method, path, payload, {}))
    return response.status, json.loads(response.body)


async def files(gateway: LocalGateway, body: dict[str, Any]) -> Any:
    return await call(gateway, "POST", f"/v1/sandboxes/{SANDBOX}/files", body)


async def memory_view(gateway: LocalGateway) -> View:
    """What the sandbox object holds in memory, through the files API."""
    body = {"op": "list", "path": "/workspace", "recursive": True, "includeHidden": True}
    status, answer = await files(gateway, body)
    assert status == 200, answer
    return {
        entry["absolutePath"]: (
            entry["type"],
            entry["size"],
            entry["modifiedAt"] if entry["type"] == "file" else None,
        )
        for entry in answer["files"]
    }


def stored_view(gateway: LocalGateway) -> View:
    """What SQLite holds, read by a connection of its own."""
    with sqlite3.connect(gateway.store.path) as other:
        rows = other.execute(
            "SELECT path, data, updated_at FROM files WHERE sandbox_id = ?", (SANDBOX,)
        ).fetchall()
    listed = Workspace.from_rows(rows).list_dir("/workspace", recursive=True)
    return {
        entry.path: (
            entry.type,
            entry.size,
            None if entry.type == "directory" else iso_from_ms(entry.updated_at),
        )
        for entry in listed
    }


# ----- paths beyond the limits are refused up front ------------------------------------


@pytest.mark.parametrize("bad", list(REFUSED_PATHS.values()), ids=list(REFUSED_PATHS))
async def test_files_api_refuses_a_path_beyond_the_limits(gateway: LocalGateway, bad: str) -> None:
    status, _ = await files(gateway, {"op": "write", "path": "ok.txt", "content": "fine"})
    assert status == 200
    before = await memory_view(gateway)
    requests = [
        ("path", {"op": "write", "path": bad, "content": "x"}),
        ("path", {"op": "mkdir", "path": bad, "recursive": True}),
        ("path", {"op": "read", "path": bad}),
        ("path", {"op": "exists", "path": bad}),
        ("path", {"op": "delete", "path": bad, "force": True}),
        ("path", {"op": "list", "path": bad}),
        ("path", {"op": "rename", "path": bad, "newPath": "other.txt"}),
        ("newPath", {"op": "move", "path": "ok.txt", "newPath": bad}),
    ]
    for field, body in requests:
        status, answer = await files(gateway, body)
        assert status == 400, (body["op"], answer)
        assert answer["code"] == "VALIDATION_FAILED"
        assert answer["message"].startswith(f"Invalid {field}: "), answer["message"]
    assert await memory_view(gateway) == before == stored_view(gateway)


@pytest.mark.parametrize("bad", list(REFUSED_PATHS.values()), ids=list(REFUSED_PATHS))
async def test_context_cwd_is_checked_like_a_files_path(gateway: LocalGateway, bad: str) -> None:
    status, answer = await call(
        gateway, "POST", f"/v1/sandboxes/{SANDBOX}/contexts", {"binding": "PERL", "cwd": bad}
    )
    assert status == 400, answer
    assert answer["code"] == "VALIDATION_FAILED"
    assert answer["message"].startswith("Invalid path: ")


def test_the_limits_are_exact() -> None:
    assert normalize("s" * 255).name == "s" * 255
    assert normalize("é" * 127 + "s").name == "é" * 127 + "s"  # 255 bytes
    longest = "/workspace" + ("/" + "x" * 100) * 30 + "/" + "y" * 31
    assert len(longest) == MAX_PATH_BYTES
    assert normalize(longest).absolute == longest
    for refused in ("s" * 256, "é" * 127 + "ss", longest + "y"):
        with pytest.raises(InvalidPathError):
            normalize(refused)


async def test_runs_keep_working_after_a_refused_path(
    gateway: LocalGateway, perl_engine: None
) -> None:
    backend = Backend(LocalTransport(gateway, "local"), name="local")
    sandbox = backend.sandbox(SANDBOX)
    for bad in REFUSED_PATHS.values():
        status, _ = await files(gateway, {"op": "write", "path": bad, "content": "x"})
        assert status == 400
    await sandbox.write_file("seen.txt", "yes")
    result = await sandbox.interpreter.run_code(
        'open(my $f, "<", "seen.txt") or die; scalar <$f>', binding="PERL"
    )
    assert result.error is None, result.error
    assert [entry.text for entry in result.results] == ["yes"]


async def test_rows_stored_by_an_older_version_no_longer_break_runs(
    tmp_path: Path, perl_engine: None
) -> None:
    first = open_local_gateway(tmp_path / "data", ttl_ms=0)
    status, _ = await call(
        first,
        "POST",
        f"/v1/sandboxes/{SANDBOX}/files",
        {"op": "write", "path": "good.txt", "content": "kept"},
    )
    assert status == 200
    first.close()
    # What the old, unchecked files API stored (a NUL in a path is legal in SQLite text).
    with sqlite3.connect(tmp_path / "data" / DATABASE_NAME) as other:
        other.execute(
            "INSERT INTO files (sandbox_id, path, data, updated_at) VALUES (?, ?, ?, ?)",
            (SANDBOX, "/workspace/bad\0name", b"x", 1),
        )
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    try:
        assert set(await memory_view(gateway)) == {"/workspace/good.txt"}
        backend = Backend(LocalTransport(gateway, "local"), name="local")
        result = await backend.sandbox(SANDBOX).interpreter.run_code(
            'open(my $f, "<", "good.txt") or die; scalar <$f>', binding="PERL"
        )
        assert result.error is None, result.error
        assert [entry.text for entry in result.results] == ["kept"]
    finally:
        gateway.close()


# ----- a change reaches memory only together with SQLite -------------------------------


async def _populate(gateway: LocalGateway) -> None:
    for body in (
        {"op": "mkdir", "path": "dir"},
        {"op": "write", "path": "dir/a.txt", "content": "alpha"},
        {"op": "mkdir", "path": "dir/sub"},
        {"op": "write", "path": "b.txt", "content": "beta"},
        {"op": "write", "path": "c.txt", "content": "gamma"},
    ):
        status, answer = await files(gateway, body)
        assert status == 200, answer


async def test_a_failing_statement_takes_the_change_back_out_of_memory(
    gateway: LocalGateway,
) -> None:
    await _populate(gateway)
    with sqlite3.connect(gateway.store.path) as other:  # a real SQLite refusal, mid-transaction
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON files WHEN NEW.path LIKE '/workspace/moved%' "
            "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
        )
    before = await memory_view(gateway)  # (re-read: another connection committed)
    status, answer = await files(gateway, {"op": "rename", "path": "dir", "newPath": "moved"})
    assert status == 500, answer
    assert answer["code"] == "INTERNAL_ERROR"
    assert "refused by a trigger" in answer["message"]
    after = await memory_view(gateway)
    assert after == before == stored_view(gateway)
    assert list(after) == list(before)  # the listing order is restored too
    status, _ = await files(gateway, {"op": "delete", "path": "b.txt"})
    assert status == 200
    assert await memory_view(gateway) == stored_view(gateway)


@contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """RLIMIT_FSIZE for this process: a write past `size` bytes fails with EFBIG, as on
    a full disk or an exhausted quota (SIGXFSZ ignored so it is an error, not a kill)."""
    previous_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, previous_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous_limit)
        signal.signal(signal.SIGXFSZ, previous_handler)


async def test_a_failing_commit_takes_the_change_back_out_of_memory(
    gateway: LocalGateway,
) -> None:
    await _populate(gateway)
    before = await memory_view(gateway)
    wal = gateway.store.path.with_name(gateway.store.path.name + "-wal")
    big = base64.b64encode(bytes(range(256)) * 2400).decode()  # 600 KiB: written at COMMIT
    with file_size_limit(wal.stat().st_size + 16384):
        status, answer = await files(
            gateway, {"op": "write", "path": "dir/big.bin", "content": big, "encoding": "base64"}
        )
    assert status == 500, answer
    assert answer["code"] == "INTERNAL_ERROR"
    assert await memory_view(gateway) == before == stored_view(gateway)
    # the store is usable again: the failed transaction did not stay open
    status, _ = await files(gateway, {"op": "write", "path": "dir/big.bin", "content": big})
    assert status == 200
    assert await memory_view(gateway) == stored_view(gateway)


async def test_a_failing_env_commit_leaves_the_env_as_stored(gateway: LocalGateway) -> None:
    env_path = f"/v1/sandboxes/{SANDBOX}/env"
    status, _ = await call(gateway, "POST", env_path, {"envVars": {"KEPT": "1"}})
    assert status == 200
    with sqlite3.connect(gateway.store.path) as other:
        other.execute(
            "CREATE TRIGGER refuse BEFORE UPDATE ON sandboxes WHEN NEW.env_vars LIKE '%LOST%' "
            "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
        )
    status, answer = await call(gateway, "POST", env_path, {"envVars": {"LOST": "2"}})
    assert (status, answer["code"]) == (500, "INTERNAL_ERROR")
    status, info = await call(gateway, "GET", f"/v1/sandboxes/{SANDBOX}")
    assert status == 200
    assert info["envVars"] == {"KEPT": "1"}


async def test_a_run_whose_commit_fails_leaves_the_repl_state_as_stored(tmp_path: Path) -> None:
    """The run's engine holds what it did: the session goes with the failed commit, so
    that the next run restores the stored state, and no later snapshot stores it."""
    require_engine("python")
    backend = open_local_backend(tmp_path / "data", embedded=True)
    interpreter = backend.sandbox(SANDBOX).interpreter
    try:
        context = await interpreter.create_code_context("PYTHON")
        await interpreter.run_code("x = 1", context=context)
        store = tmp_path / "data" / DATABASE_NAME
        wal = store.with_name(store.name + "-wal")
        with (
            file_size_limit(max(wal.stat().st_size, store.stat().st_size) + 65536),
            pytest.raises(SandboxError) as failed,
        ):  # the run's snapshot holds the blob: its COMMIT passes the limit
            await interpreter.run_code("x = 2\nblob = bytes(range(256)) * 8000", context=context)
        assert failed.value.code == ErrorCode.INTERNAL_ERROR
        seen = await interpreter.run_code("(x, 'blob' in globals())", context=context)
        assert [entry.text for entry in seen.results] == ["(1, False)"]
        assert seen.execution_count == 2
    finally:
        await backend.aclose()
    backend = open_local_backend(tmp_path / "data", embedded=True)
    try:
        again = await backend.sandbox(SANDBOX).interpreter.run_code("x", context=context)
        assert [entry.text for entry in again.results] == ["1"]
    finally:
        await backend.aclose()


async def test_any_failure_in_a_run_s_transaction_leaves_the_context_as_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only SQLite's errors: the row's count and snapshot record go back too, so the
    next run does not restore a snapshot that was never stored (nor count past it)."""
    require_engine("python")
    add_history = Transaction.add_history

    def out_of_memory(self: Transaction, *arguments: Any) -> None:
        monkeypatch.setattr(Transaction, "add_history", add_history)  # once
        raise MemoryError

    backend = open_local_backend(tmp_path / "data", embedded=True)
    interpreter = backend.sandbox(SANDBOX).interpreter
    try:
        context = await interpreter.create_code_context("PYTHON")
        monkeypatch.setattr(Transaction, "add_history", out_of_memory)
        with pytest.raises(MemoryError):  # as raised (a daemon answers INTERNAL_ERROR)
            await interpreter.run_code("x = 1", context=context)
        seen = await interpreter.run_code("'x' in globals()", context=context)
        assert [entry.text for entry in seen.results] == ["False"]
        assert seen.execution_count == 1
        assert seen.session is not None and seen.session.boot == "fresh"
        assert not seen.session.notes
    finally:
        await backend.aclose()


# ----- property: any path maps inside /workspace or is refused without a trace ---------

PIECES = st.sampled_from(
    [
        "a",
        "b.txt",
        "/",
        ".",
        "..",
        "workspace",
        "/workspace",
        "\0",
        "\ud800",
        "\udfff",
        "é",
        " ",
        "x" * 200,
        "y" * 56,
        "%2e",
        "\\",
    ]
)
PATHS = st.one_of(
    st.lists(PIECES, max_size=12).map("".join),
    st.text(st.characters(exclude_categories=()), max_size=40),
)
OPS = st.sampled_from(["write", "mkdir", "delete", "rename", "move", "read", "exists", "list"])


def test_any_path_maps_inside_the_workspace_or_is_refused_without_a_trace(
    tmp_path: Path,
) -> None:
    loop = asyncio.new_event_loop()
    gateway = open_local_gateway(tmp_path / "data", ttl_ms=0)
    try:

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(op=OPS, path=PATHS, new_path=PATHS)
        def check(op: str, path: str, new_path: str) -> None:
            body = {"op": op, "path": path, "newPath": new_path, "content": "c", "recursive": True}
            before = loop.run_until_complete(memory_view(gateway))
            status, answer = loop.run_until_complete(files(gateway, body))
            after = loop.run_until_complete(memory_view(gateway))
            assert after == stored_view(gateway)
            if status >= 400:
                assert after == before, answer
                return
            for key in ("path", "newPath"):
                if key in answer:
                    assert normalize(answer[key]).absolute == answer[key]
            # every accepted path can be held by an engine's copy of the tree, and a guest
            # could make it there within the same limits
            tree = Workspace.from_rows(gateway.store.files(SANDBOX))
            engine = VirtualFS(GUEST_LIMITS)
            engine.update(tree.update_since(None)[0])
            stored = {
                path[len(ROOT) + 1 :]: node.data
                for path, node in tree.walk()
                if isinstance(node, FileNode)
            }
            assert engine.files() == stored
            for relative, node in engine.walk():
                if isinstance(node, File):
                    parent = relative.rpartition("/")[0]
                    copy = VirtualFS(GUEST_LIMITS)
                    if parent:
                        copy.update(TreeUpdate((PathState(parent, "directory"),)))
                    copy.create_file(copy.resolve(copy.root, relative))

        check()
    finally:
        gateway.close()
        loop.close()
