"""`POST /v1/sandboxes/:id/files/batch` (an extension, docs/gateway-protocol.md): the same
tests on every backend kind, the Worker gateway in workerd included (there each entry is
its own `/files` call; here it must answer exactly the same)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from tests.api.conftest import fresh_id, raw_call
from workbench.api import Backend, SandboxClient, SandboxError
from workbench.protocol import errors
from workbench.protocol.types import BatchEntry, FilesBatchLimits, FileVersion

BATCH_BYTES = 8 * 1024 * 1024


def without_timestamp(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key != "timestamp"}


async def single_answer(backend: Backend, sandbox_id: str, body: Any) -> tuple[bool, Any]:
    """(ok, answer or ErrorResponse) of `body` sent alone to `POST /files`."""
    try:
        return True, await raw_call(backend, sandbox_id, "POST", "/files", body)
    except SandboxError as error:
        return False, error.to_json()


async def version_of(sandbox: SandboxClient, path: str) -> FileVersion:
    """The file's version as `list` reports it."""
    parent, _, name = path.rpartition("/")
    listing = await sandbox.list_files(parent, include_hidden=True)
    info = next(info for info in listing.files if info.name == name)
    return FileVersion(info.size, info.modified_at)


async def test_health_advertises_the_batch_and_its_limits(
    backend: Backend, sandbox: SandboxClient
) -> None:
    health = await backend.health()
    assert "files-batch" in health["features"]
    limits = await sandbox.files_batch_limits()
    assert limits == FilesBatchLimits(health["filesBatch"]["maxEntries"], BATCH_BYTES)
    assert limits.max_entries in (1000, 400)  # serve and local; the Worker gateway


async def test_each_entry_answers_as_the_same_files_request_alone(
    backend: Backend, sandbox: SandboxClient
) -> None:
    bodies: list[Any] = [
        {"op": "mkdir", "path": "d", "recursive": True},
        {"op": "write", "path": "d/a.txt", "content": "alpha"},
        {"op": "write", "path": "/workspace/d/b.bin", "content": "AAEC/w==", "encoding": "base64"},
        {"op": "write", "path": "d/bad.bin", "content": "!!", "encoding": "base64"},
        {"op": "write", "path": "../escape.txt", "content": "x"},
        {"op": "write", "path": "d", "content": "onto a directory"},
        {"op": "mkdir", "path": "d"},
        {"op": "mkdir", "path": "d/a.txt/sub", "recursive": True},
        {"op": "delete", "path": "missing.txt"},
        {"op": "delete", "path": "missing.txt", "force": True},
        {"op": "delete", "path": "d"},
        {"op": "rename", "path": "d/b.bin", "newPath": "d/c.bin"},
        {"op": "move", "path": "d/c.bin", "newPath": "moved.bin"},
        {"op": "rename", "path": "d/gone", "newPath": "x"},
        {"op": "rename", "path": "d/a.txt"},
        {"op": "write", "path": "d/e.txt", "content": "x", "encoding": "latin-1"},
        {"op": "write", "content": "no path"},
        {"op": "frobnicate", "path": "a"},
        42,
        {"op": "delete", "path": "d", "recursive": True},
        {"op": "write", "path": "d", "content": "a file where the directory was"},
    ]
    batched = await sandbox.files_batch([])  # an empty batch is fine
    assert batched.results == []
    answer = await raw_call(backend, sandbox.id, "POST", "/files/batch", {"entries": bodies})
    alone = backend.sandbox(fresh_id())
    try:
        expected = [await single_answer(backend, alone.id, body) for body in bodies]
        assert [result["ok"] for result in answer["results"]] == [ok for ok, _ in expected]
        for result, (ok, single) in zip(answer["results"], expected, strict=True):
            got = result["result"] if ok else result["error"]
            assert without_timestamp(got) == without_timestamp(single), result
            assert set(result) == {"ok", "result" if ok else "error"}
        batch_tree = await sandbox.list_files(recursive=True, include_hidden=True)
        alone_tree = await alone.list_files(recursive=True, include_hidden=True)
        assert [(f.relative_path, f.size) for f in batch_tree.files] == [
            (f.relative_path, f.size) for f in alone_tree.files
        ]
    finally:
        await alone.destroy()
    assert await sandbox.read_bytes("moved.bin") == b"\x00\x01\x02\xff"
    assert (await sandbox.read_file("d")).content == "a file where the directory was"


async def test_a_batch_holds_only_changing_ops_and_well_formed_preconditions(
    backend: Backend, sandbox: SandboxClient
) -> None:
    good = {"size": 1, "modifiedAt": "2025-01-01T00:00:00.000Z"}
    refused = {
        "op must be write, mkdir, delete, rename or move in a batch": [
            {"op": "read", "path": "a.txt"},
            {"op": "list", "path": "/workspace"},
            {"op": "exists", "path": "a.txt"},
        ],
        "Unknown op": [
            {"op": bad, "path": "a.txt", "ifMatch": good} for bad in ([], {}, 5, None, "copy")
        ],
        "mkdir takes no precondition": [{"op": "mkdir", "path": "d", "ifNoneMatch": "*"}],
        "Pass ifMatch or ifNoneMatch, not both": [
            {"op": "write", "path": "a.txt", "content": "", "ifMatch": good, "ifNoneMatch": "*"}
        ],
        'ifNoneMatch must be "*"': [{"op": "delete", "path": "a.txt", "ifNoneMatch": "a.txt"}],
        "ifMatch must be an object with size (an integer >= 0) and modifiedAt (a string)": [
            {"op": "write", "path": "a.txt", "content": "", "ifMatch": bad}
            for bad in (
                "*",
                [],
                {"size": -1, "modifiedAt": "t"},
                {"size": True, "modifiedAt": "t"},
                {"size": 1},
                {"size": "1", "modifiedAt": "t"},
                {"size": 1, "modifiedAt": 5},
            )
        ],
    }
    entries = [entry for group in refused.values() for entry in group]
    answer = await raw_call(backend, sandbox.id, "POST", "/files/batch", {"entries": entries})
    messages = [message for message, group in refused.items() for _ in group]
    for result, message in zip(answer["results"], messages, strict=True):
        assert result["ok"] is False
        error = result["error"]
        assert (error["code"], error["httpStatus"], error["message"]) == (
            "VALIDATION_FAILED",
            400,
            message,
        )
    assert not (await sandbox.list_files()).files  # nothing was applied


async def test_preconditions_hold_or_fail_their_entry_alone(sandbox: SandboxClient) -> None:
    await sandbox.write_file("a.txt", "one")
    await sandbox.mkdir("dir")
    first = await version_of(sandbox, "/workspace/a.txt")
    result = await sandbox.files_batch(
        [
            BatchEntry.write("a.txt", "two!", if_match=first),  # holds
            BatchEntry.write("a.txt", "lost", if_match=first),  # stale now
            BatchEntry.write("new.txt", b"\x00new", if_absent=True),  # holds
            BatchEntry.write("new.txt", "again", if_absent=True),
            BatchEntry.delete("missing/x.txt", if_match=first),
            BatchEntry.write("dir", "x", if_match=first),
            BatchEntry.rename("/workspace/new.txt", "renamed.txt", if_match=FileVersion(4, "x")),
            BatchEntry.write("../outside.txt", "x", if_match=first),  # left to the op: 403
        ]
    )
    outcomes = [(entry.ok, entry.failure and entry.failure.code) for entry in result.results]
    assert outcomes == [
        (True, None),
        (False, "PRECONDITION_FAILED"),
        (True, None),
        (False, "PRECONDITION_FAILED"),
        (False, "PRECONDITION_FAILED"),
        (False, "PRECONDITION_FAILED"),
        (False, "PRECONDITION_FAILED"),
        (False, "PERMISSION_DENIED"),
    ]
    second = await version_of(sandbox, "/workspace/a.txt")
    new = await version_of(sandbox, "/workspace/new.txt")
    assert second.size == 4
    stale = result.results[1]
    assert stale.current is not None
    assert (stale.current.type, stale.current.size, stale.current.modified_at) == (
        "file",
        second.size,
        second.modified_at,
    )
    failure = stale.failure
    assert isinstance(failure, errors.PreconditionFailedError)
    assert failure.http_status == 412 and failure.operation == "file.write"
    assert failure.message == (
        f"Precondition failed: a.txt changed (size 4, modifiedAt {second.modified_at})"
    )
    assert failure.context == {
        "path": "a.txt",
        "operation": "file.write",
        "current": {"type": "file", "size": 4, "modifiedAt": second.modified_at},
    }
    messages = [entry.failure.message for entry in result.results[3:7] if entry.failure]
    assert messages == [
        "Precondition failed: new.txt already exists",
        "Precondition failed: missing/x.txt does not exist",
        "Precondition failed: dir is a directory",
        "Precondition failed: /workspace/new.txt changed "
        f"(size {new.size}, modifiedAt {new.modified_at})",
    ]
    assert [entry.current for entry in result.results[4:5]] == [None]
    assert result.results[5].current is not None and result.results[5].current.is_directory
    assert result.results[6].failure is not None
    assert result.results[6].failure.operation == "file.rename"
    # Failed entries were not applied.
    assert (await sandbox.read_file("a.txt")).content == "two!"
    assert await sandbox.read_bytes("new.txt") == b"\x00new"
    assert not (await sandbox.exists("renamed.txt")).exists
    assert (await sandbox.list_files("dir")).files == []


async def test_a_batch_is_bounded(backend: Backend, sandbox: SandboxClient) -> None:
    limits = await sandbox.files_batch_limits()
    assert limits is not None
    mkdir = {"op": "mkdir", "path": "d", "recursive": True}
    with pytest.raises(errors.ValidationFailedError) as raised:
        await raw_call(
            backend,
            sandbox.id,
            "POST",
            "/files/batch",
            {"entries": [mkdir] * (limits.max_entries + 1)},
        )
    assert raised.value.http_status == 413
    assert raised.value.message == f"Too many entries: at most {limits.max_entries} per batch"
    full = await raw_call(
        backend, sandbox.id, "POST", "/files/batch", {"entries": [mkdir] * limits.max_entries}
    )
    assert all(result["ok"] for result in full["results"])

    content = base64.b64encode(b"\xff" * 700_000).decode()
    write = {"op": "write", "path": "big.bin", "content": content, "encoding": "base64"}
    with pytest.raises(errors.ValidationFailedError) as raised:  # 9 * 933 KB > 8 MiB
        await raw_call(backend, sandbox.id, "POST", "/files/batch", {"entries": [write] * 9})
    assert (raised.value.http_status, raised.value.message) == (413, "Request too large")
    assert not (await sandbox.exists("big.bin")).exists
    # 8 entries fit: over the 2 MiB cap of /files, within the 8 MiB of a batch.
    answer = await raw_call(backend, sandbox.id, "POST", "/files/batch", {"entries": [write] * 8})
    assert [result["ok"] for result in answer["results"]] == [True] * 8

    for body, message in (
        ({}, "entries must be an array"),
        ({"entries": {"op": "mkdir"}}, "entries must be an array"),
        ([], "Expected an object"),
    ):
        with pytest.raises(errors.ValidationFailedError) as raised:
            await raw_call(backend, sandbox.id, "POST", "/files/batch", body)
        assert (raised.value.http_status, raised.value.message) == (400, message)


async def test_a_batch_answer_says_when_its_sandbox_was_made(sandbox: SandboxClient) -> None:
    """`sandboxCreatedAt`: the sandbox's `createdAt`, the same for every batch until the
    sandbox is destroyed and made again (a folder sync then sends everything again)."""
    first = await sandbox.files_batch([BatchEntry.write("a.txt", "a")])
    info = await sandbox.get_info()
    assert first.sandbox_created_at == info.created_at
    again = await sandbox.files_batch([BatchEntry.write("b.txt", "b")])
    assert again.sandbox_created_at == info.created_at
    await asyncio.sleep(0.002)  # `createdAt` counts milliseconds
    await sandbox.destroy()
    made_again = await sandbox.files_batch([BatchEntry.write("c.txt", "c")])
    assert made_again.sandbox_created_at == (await sandbox.get_info()).created_at
    assert made_again.sandbox_created_at != info.created_at
