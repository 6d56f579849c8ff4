"""Folder sync over `files/batch`: a pass's changes travel in few requests, a save in one
(its conflict check rides on the write as a precondition), and gateways without the
operation, or refusing a batch, still get everything file by file. Local backend and a
real `serve`; `Gateway` stands in front of either as an older or stricter gateway would."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sync.conftest import eventually, fresh_id, local_tree, remote_tree, watching
from workbench.api import Backend, ErrorCode, SandboxClient, Transport
from workbench.protocol import errors
from workbench.protocol.errors import error_response
from workbench.protocol.http import (
    Response,
    error_json,
    internal_error,
    not_found,
    validation_error,
)
from workbench.sync import (
    EventKind,
    FolderSync,
    SyncConflictError,
    SyncEvent,
    SyncReport,
    TransientSyncError,
)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    """Below the sandbox (`/files`, `/files/batch`, ...), or the whole path elsewhere."""
    body: Any


class Gateway:
    """A `Transport` in front of a real one that records every request and can answer as
    a gateway without the batch (`advertise=False`), with other `limits`, or refusing each
    batch with `refuse` (the status), the first `transient` of them with 503, or one
    entry of a batch with a 500 of its own."""

    def __init__(
        self,
        inner: Transport,
        *,
        advertise: bool = True,
        limits: dict[str, int] | None = None,
        refuse: int | None = None,
        transient: int = 0,
        failing_entry: str | None = None,
    ) -> None:
        self.inner = inner
        self.description = inner.description
        self.advertise = advertise
        self.limits = limits
        self.refuse = refuse
        self.transient = transient
        self.failing_entry = failing_entry
        """An entry whose write fails once with a 500 of its own, the rest applied."""
        self.calls: list[Call] = []

    def of(self, path: str) -> list[Call]:
        return [call for call in self.calls if call.path == path]

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: Any = None,
        headers: Any = None,
    ) -> Response:
        _, _, below = path.partition("/v1/sandboxes/")
        below = below[below.find("/") :] if "/" in below else "/" if below else ""
        self.calls.append(Call(method, below or path, body))
        if path.endswith("/files/batch"):
            if self.transient:
                self.transient -= 1
                return internal_error("Service unavailable", 503)
            if self.refuse == 404:
                return error_json(not_found())
            if self.refuse is not None:
                return error_json(validation_error("Request too large", self.refuse))
        if path.endswith("/files/batch") and self.failing_entry is not None:
            return await self._failing(method, path, body)
        reply = await self.inner.request(
            method, path, body, timeout=timeout, on_event=on_event, headers=headers
        )
        if path != "/v1/health" or (self.advertise and self.limits is None):
            return reply
        health = json.loads(reply.body)
        if not self.advertise:
            del health["features"], health["filesBatch"]
        else:
            health["filesBatch"].update(self.limits or {})
        return Response(200, json.dumps(health).encode())

    async def _failing(self, method: str, path: str, body: Any) -> Response:
        """The batch without `failing_entry`, which answers a 500 of its own instead."""
        entries = body["entries"]
        paths = [entry["path"] for entry in entries]
        if self.failing_entry not in paths:
            return await self.inner.request(method, path, body)
        index = paths.index(self.failing_entry)
        self.failing_entry = None
        rest = {"entries": entries[:index] + entries[index + 1 :]}
        answer = json.loads((await self.inner.request(method, path, rest)).body)
        error = error_response(ErrorCode.INTERNAL_ERROR, "Storage failed", http_status=500)
        answer["results"].insert(index, {"ok": False, "error": error})
        return Response(200, json.dumps(answer).encode())

    async def cancel(self, sandbox_id: str) -> bool:
        return await self.inner.cancel(sandbox_id)

    async def aclose(self) -> None:
        """The real transport is the fixture's to close."""


@pytest.fixture
async def client(backend: Backend) -> AsyncIterator[SandboxClient]:
    """A sandbox reached directly, to check what the sync did."""
    sandbox = backend.sandbox(fresh_id())
    try:
        yield sandbox
    finally:
        await sandbox.destroy()


def through(backend: Backend, sandbox: SandboxClient, gateway: Gateway) -> SandboxClient:
    return Backend(gateway, name=backend.name).sandbox(sandbox.id)


def make_tree(folder: Path, files: int = 60) -> None:
    for index in range(files):
        directory = folder / f"d{index % 6}" / "sub"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index}.txt").write_text(f"file {index}\n" * 40)
    (folder / "d0" / "blob.bin").write_bytes(bytes(range(256)) * 8)


def outcome(report: SyncReport) -> tuple[list[str], list[str], list[str]]:
    return sorted(report.uploaded), sorted(report.created_dirs), sorted(report.deleted)


async def test_an_initial_sync_takes_a_few_requests(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    make_tree(folder)
    batched = Gateway(backend.transport)
    report = await FolderSync(folder, through(backend, client, batched)).initial_sync()
    assert len(report.uploaded) == 61 and len(report.created_dirs) == 12 and not report.errors
    assert await remote_tree(client) == local_tree(folder)
    assert [call.path for call in batched.calls] == [
        "/files",  # mkdir dest
        "/v1/health",  # asked meanwhile, once
        "/",  # and when the sandbox was made
        "/files",  # list dest
        "/files/batch",
    ]

    other = backend.sandbox(fresh_id())
    per_file = Gateway(backend.transport, advertise=False)
    try:
        alone = await FolderSync(folder, through(backend, other, per_file)).initial_sync()
        assert outcome(alone) == outcome(report)
        assert await remote_tree(other) == local_tree(folder)
    finally:
        await other.destroy()
    assert not per_file.of("/files/batch")
    assert len(per_file.of("/files")) == 2 + 12 + 61


async def test_a_save_is_one_request_carrying_the_conflict_check(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    (folder / "edited.txt").write_text("first")
    (folder / "gone.txt").write_text("to be deleted")
    gateway = Gateway(backend.transport)
    sync = FolderSync(folder, through(backend, client, gateway))
    await sync.initial_sync()
    listed = {info.name: info for info in (await client.list_files()).files}
    gateway.calls.clear()
    (folder / "edited.txt").write_text("second save")
    (folder / "gone.txt").unlink()
    report = await sync.sync_paths(["edited.txt", "gone.txt"])
    assert (report.uploaded, report.deleted, report.conflicts) == (
        ["edited.txt"],
        ["gone.txt"],
        [],
    )
    assert [call.path for call in gateway.calls] == ["/files/batch"]
    entries = gateway.calls[0].body["entries"]
    expected = {
        name: {"size": listed[name].size, "modifiedAt": listed[name].modified_at}
        for name in ("edited.txt", "gone.txt")
    }
    assert [(entry["op"], entry["ifMatch"]) for entry in entries] == [
        ("write", expected["edited.txt"]),
        ("delete", expected["gone.txt"]),
    ]
    assert await remote_tree(client) == {"edited.txt": b"second save"}


@pytest.mark.parametrize(
    ("policy", "requests", "content", "verdict"),
    [
        ("local-wins", ["/files/batch", "/files", "/files/batch"], b"local", "local version wins"),
        ("sandbox-wins", ["/files/batch", "/files"], b"guest's", "sandbox version kept"),
    ],
)
async def test_a_guest_change_fails_the_precondition_and_the_policy_decides(
    backend: Backend,
    client: SandboxClient,
    folder: Path,
    policy: str,
    requests: list[str],
    content: bytes,
    verdict: str,
) -> None:
    (folder / "a.txt").write_text("synced")
    (folder / "b.txt").write_text("synced")
    gateway = Gateway(backend.transport)
    sync = FolderSync(folder, through(backend, client, gateway), policy=policy)
    events: list[SyncEvent] = []
    sync.subscribe(events.append)
    await sync.initial_sync()
    await client.write_file("a.txt", "guest's")  # behind the sync's back, another size
    (folder / "a.txt").write_text("local")
    (folder / "b.txt").write_text("also local")
    gateway.calls.clear()
    report = await sync.sync_paths(["a.txt", "b.txt"])
    assert [call.path for call in gateway.calls] == requests  # the read: is it really new?
    assert [issue.path for issue in report.conflicts] == ["a.txt"]
    assert [event.message for event in events if event.kind is EventKind.CONFLICT] == [
        f"a.txt was changed in the sandbox since the last sync; {verdict}"
    ]
    assert await remote_tree(client) == {"a.txt": content, "b.txt": b"also local"}
    gateway.calls.clear()
    (folder / "a.txt").write_text("local, later")  # the new baseline either way
    report = await sync.sync_paths(["a.txt"])
    assert (report.uploaded, report.conflicts) == (["a.txt"], [])
    assert [call.path for call in gateway.calls] == ["/files/batch"]


@pytest.mark.parametrize("refuse", [404, 413], ids=["without the route", "refusing batches"])
async def test_a_gateway_refusing_batches_gets_the_pass_file_by_file(
    backend: Backend, client: SandboxClient, folder: Path, refuse: int
) -> None:
    make_tree(folder, files=12)
    gateway = Gateway(backend.transport, refuse=refuse)
    sync = FolderSync(folder, through(backend, client, gateway))
    report = await sync.initial_sync()
    assert len(report.uploaded) == 13 and not report.errors and not report.incomplete
    assert await remote_tree(client) == local_tree(folder)
    await client.write_file("d1/sub/f1.txt", "guest")  # still checked first
    (folder / "d1" / "sub" / "f1.txt").write_text("local")
    (folder / "d2" / "sub" / "f2.txt").unlink()
    report = await sync.sync_paths(["d1", "d2"])
    assert (report.uploaded, report.deleted) == (["d1/sub/f1.txt"], ["d2/sub/f2.txt"])
    assert [issue.path for issue in report.conflicts] == ["d1/sub/f1.txt"]
    assert await remote_tree(client) == local_tree(folder)
    # A gateway without the route is asked once; one refusing a batch, every pass.
    assert len(gateway.of("/files/batch")) == (1 if refuse == 404 else 3)


async def test_a_gateway_without_the_feature_is_never_sent_a_batch(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    make_tree(folder, files=6)
    gateway = Gateway(backend.transport, advertise=False)
    sync = FolderSync(folder, through(backend, client, gateway))
    await sync.initial_sync()
    (folder / "d3" / "sub" / "f3.txt").write_text("changed")
    (folder / "d4" / "sub" / "f4.txt").rename(folder / "d4" / "moved.txt")
    report = await sync.sync_paths(["d3", "d4"])
    assert (report.uploaded, report.renamed) == (
        ["d3/sub/f3.txt"],
        [("d4/sub/f4.txt", "d4/moved.txt")],
    )
    assert await remote_tree(client) == local_tree(folder)
    assert not gateway.of("/files/batch")
    assert len(gateway.of("/v1/health")) == 1


@pytest.mark.parametrize("batches", [True, False])
async def test_a_directory_another_client_removed_is_made_again(
    backend: Backend, client: SandboxClient, folder: Path, batches: bool
) -> None:
    """The sync made `d1/sub`; another client removes `d1`. A later save under it failed
    with FILE_NOT_FOUND for as long as the watch ran: the manifest still listed the
    directory, so no pass made it again. Now the write makes it and is sent once more."""
    make_tree(folder, files=6)
    sync = FolderSync(
        folder, through(backend, client, Gateway(backend.transport, advertise=batches))
    )
    await sync.initial_sync()
    await client.delete_file("d1", recursive=True)
    (folder / "d1" / "sub" / "f1.txt").write_text("saved after the removal")
    report = await sync.sync_paths([folder / "d1" / "sub" / "f1.txt"])
    assert report.uploaded == ["d1/sub/f1.txt"] and not report.errors, report.errors
    assert (await client.read_file("d1/sub/f1.txt")).content == "saved after the removal"


async def test_small_batches_keep_directories_first_and_deletes_last(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    make_tree(folder, files=12)
    deep = folder / "deep" / "er" / "est"
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("leaf")
    gateway = Gateway(backend.transport, limits={"maxEntries": 3})
    sync = FolderSync(folder, through(backend, client, gateway))
    report = await sync.initial_sync()
    assert not report.errors and len(report.uploaded) == 14
    assert await remote_tree(client) == local_tree(folder)
    batches = [call.body["entries"] for call in gateway.of("/files/batch")]
    assert all(len(entries) <= 3 for entries in batches)
    ops = [entry["op"] for entries in batches for entry in entries]
    assert ops == ["mkdir"] * 15 + ["write"] * 14
    # Files and whole directories gone, others renamed and changed, in 3-entry batches.
    for index in (0, 6):
        (folder / f"d0/sub/f{index}.txt").unlink()
    (folder / "d1" / "sub" / "f1.txt").rename(folder / "d1" / "f1-moved.txt")
    (folder / "d2" / "sub" / "f2.txt").write_text("changed")
    (deep / "leaf.txt").unlink()
    for directory in (deep, deep.parent, deep.parent.parent):
        directory.rmdir()
    gateway.calls.clear()
    report = await sync.sync_all()
    assert not report.errors
    assert sorted(report.deleted) == ["d0/sub/f0.txt", "d0/sub/f6.txt", "deep"]
    assert report.renamed == [("d1/sub/f1.txt", "d1/f1-moved.txt")]
    assert report.uploaded == ["d2/sub/f2.txt"]
    assert await remote_tree(client) == local_tree(folder)


@pytest.mark.parametrize("refuse", [None, 413], ids=["batches", "refusing batches"])
async def test_directories_removed_together_take_one_listing_and_one_batch(
    backend: Backend, client: SandboxClient, folder: Path, refuse: int | None
) -> None:
    """Twenty directories removed at once were each listed and deleted on their own: 40
    requests, 2 s to a gateway 50 ms away. Now one listing of the destination and one
    batch of recursive deletes; a directory holding a guest's file keeps it (and says
    so), and a gateway refusing the batch gets the directories one by one."""
    for index in range(20):
        (folder / f"d{index}" / "sub").mkdir(parents=True)
        (folder / f"d{index}" / "sub" / "f.txt").write_text(f"{index}")
    gateway = Gateway(backend.transport, refuse=refuse)
    sync = FolderSync(folder, through(backend, client, gateway))
    await sync.initial_sync()
    await client.write_file("d7/guest.txt", "the guest's")
    for index in range(20):
        shutil.rmtree(folder / f"d{index}")
    gateway.calls.clear()
    report = await sync.sync_all()
    assert not report.errors, report.errors
    removed = [f"d{index}" for index in sorted(set(range(20)) - {7}, key=str)]
    assert sorted(report.deleted) == sorted([*removed, "d7/sub"])
    assert [issue.code for issue in report.notices] == ["KEPT_DIRECTORY"]
    assert await remote_tree(client) == {"d7": None, "d7/guest.txt": b"the guest's"}
    if refuse is None:
        # The pass's listing, the directories' listing, the batch, d7/sub's delete.
        assert [call.path for call in gateway.calls] == ["/files"] * 2 + ["/files/batch", "/files"]
        (batch,) = [call.body["entries"] for call in gateway.of("/files/batch")]
        assert [(entry["op"], entry["path"], entry.get("recursive")) for entry in batch] == [
            ("delete", f"/workspace/{top}", True) for top in removed
        ]
    else:
        assert len(gateway.of("/files")) == 3 + 2 * 19  # each listed and deleted again


class WritingDuringDelete(Gateway):
    """As the sync deletes `during` (one request), a guest writes `written` first."""

    def __init__(self, inner: Transport, sandbox: SandboxClient, during: str, written: str):
        super().__init__(inner)
        self.sandbox, self.during, self.written = sandbox, during, written
        self.wrote = False

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: Any = None,
        headers: Any = None,
    ) -> Response:
        if isinstance(body, dict) and (body.get("op"), body.get("path")) == ("delete", self.during):
            try:
                await self.sandbox.write_file(self.written, "the guest's output")
                self.wrote = True
            except errors.FileNotFoundError:  # its directory went already
                pass
        return await super().request(
            method, path, body, timeout=timeout, on_event=on_event, headers=headers
        )


async def test_a_guest_file_written_while_directories_are_removed_is_not_lost(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    """The directories wholly the sync's were deleted in one batch only after those
    holding a guest's entry had been cleared entry by entry: a file a guest wrote into one
    of them meanwhile went with it (found by a review). The batch now goes first."""
    for name in ("d0", "d1", "d2"):
        (folder / name / "sub").mkdir(parents=True)
        (folder / name / "sub" / "f.txt").write_text(name)
    gateway = WritingDuringDelete(
        backend.transport, client, "/workspace/d0/sub", "/workspace/d1/guest-output.txt"
    )
    sync = FolderSync(folder, through(backend, client, gateway))
    await sync.initial_sync()
    await client.write_file("d0/guest.txt", "kept")
    for name in ("d0", "d1", "d2"):
        shutil.rmtree(folder / name)
    report = await sync.sync_all()
    assert not report.errors, report.errors
    tree = await remote_tree(client)
    assert tree["d0/guest.txt"] == b"kept"
    if gateway.wrote:  # the guest's file is never the sync's to delete
        assert tree.get("d1/guest-output.txt") == b"the guest's output", tree


async def test_a_batch_failing_in_transit_is_sent_again(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    make_tree(folder, files=4)
    gateway = Gateway(backend.transport, transient=2)
    sync = FolderSync(folder, through(backend, client, gateway), retry_backoff=0.01)
    report = await sync.initial_sync()
    assert not report.incomplete and len(report.uploaded) == 5
    assert len(gateway.of("/files/batch")) == 3
    assert await remote_tree(client) == local_tree(folder)


async def test_an_entry_failing_with_a_5xx_ends_the_pass_for_a_retry(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    make_tree(folder, files=4)
    gateway = Gateway(backend.transport, failing_entry="/workspace/d1/sub/f1.txt")
    sync = FolderSync(folder, through(backend, client, gateway))
    events: list[SyncEvent] = []
    sync.subscribe(events.append)
    with pytest.raises(TransientSyncError, match="Storage failed"):
        await sync.initial_sync()
    assert not any(event.kind is EventKind.ERROR for event in events)  # not a per-file error
    assert "d1/sub/f1.txt" not in await remote_tree(client)
    report = await sync.sync_all()
    assert report.uploaded == ["d1/sub/f1.txt"] and not report.incomplete
    assert await remote_tree(client) == local_tree(folder)


async def test_batches_stay_within_the_gateways_byte_limit(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    for index in range(12):
        (folder / f"f{index}.txt").write_text(f"{index:04d}" * 750)  # 3,000 bytes each
    gateway = Gateway(backend.transport, limits={"maxBytes": 10_000})
    report = await FolderSync(folder, through(backend, client, gateway)).initial_sync()
    assert len(report.uploaded) == 12 and not report.errors
    sizes = [len(json.dumps(call.body).encode()) for call in gateway.of("/files/batch")]
    assert len(sizes) == 4 and max(sizes) <= 10_000  # three files each
    assert await remote_tree(client) == local_tree(folder)


@pytest.mark.parametrize("batches", [True, False], ids=["batches", "file by file"])
@pytest.mark.parametrize("policy", ["local-wins", "sandbox-wins", "fail"])
async def test_a_sandbox_destroyed_under_a_sync_is_filled_again(
    backend: Backend, client: SandboxClient, folder: Path, policy: str, batches: bool
) -> None:
    """Another client destroys the sandbox; the next save makes it again with that one
    file, and a batch's answer (or, file by file and under `fail`, the conflict check's
    question) says it is a new sandbox: the pass sends the whole folder again (it sent
    only the saved file, so a watch-and-run entry found its imports missing). The saved
    file gone with the old sandbox is no conflict."""
    make_tree(folder, files=12)
    gateway = Gateway(backend.transport, advertise=batches)
    sync = FolderSync(folder, through(backend, client, gateway), policy=policy)
    events: list[SyncEvent] = []
    sync.subscribe(events.append)
    await sync.initial_sync()
    await client.destroy()
    events.clear()
    (folder / "d1" / "sub" / "f1.txt").write_text("saved after the destroy")
    report = await sync.sync_paths(["d1/sub/f1.txt"])
    assert await remote_tree(client) == local_tree(folder)
    assert [issue.code for issue in report.notices] == ["SANDBOX_REPLACED"]
    assert len(report.uploaded) == 13 and report.full
    assert not report.conflicts and not report.errors
    kinds = [event.kind for event in events]
    assert EventKind.CONFLICT not in kinds and EventKind.ERROR not in kinds, events
    assert sync.status.conflicts == 0
    # The new sandbox is the one from now on: a save costs what it did.
    gateway.calls.clear()
    (folder / "d2" / "sub" / "f2.txt").write_text("saved again")
    again = await sync.sync_paths(["d2/sub/f2.txt"])
    if batches:
        checked_first = ["/files"] if policy == "fail" else []
        assert [call.path for call in gateway.calls] == [*checked_first, "/files/batch"]
    assert "/" not in [call.path for call in gateway.calls]
    assert not again.notices
    assert await remote_tree(client) == local_tree(folder)


class Unaskable(Gateway):
    """A gateway whose `GET /v1/sandboxes/:id` answers 503 once `unaskable` is set."""

    unaskable = False

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: Any = None,
        headers: Any = None,
    ) -> Response:
        info = method == "GET" and path.startswith("/v1/sandboxes/") and path.count("/") == 3
        if info and self.unaskable:
            self.calls.append(Call(method, "/", body))
            return internal_error("Service unavailable", 503)
        return await super().request(
            method, path, body, timeout=timeout, on_event=on_event, headers=headers
        )


async def test_a_conflict_stays_one_when_the_sandbox_cannot_be_asked_if_it_was_made_again(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    """Under `fail`, a conflict asks whether the sandbox was made again; a gateway that
    cannot answer leaves it a conflict, and the save stays pending."""
    (folder / "a.txt").write_text("synced")
    gateway = Unaskable(backend.transport)
    sync = FolderSync(folder, through(backend, client, gateway), policy="fail", retries=0)
    await sync.initial_sync()
    await client.write_file("a.txt", "guest's")
    (folder / "a.txt").write_text("local")
    gateway.unaskable = True
    with pytest.raises(SyncConflictError):
        await sync.sync_paths(["a.txt"])
    assert "/" in [call.path for call in gateway.calls]  # it did ask
    assert sync.has_pending
    assert await remote_tree(client) == {"a.txt": b"guest's"}


class DestroyingBefore(Gateway):
    """Destroys the sandbox just before the `nth` batch reaches it (another client);
    each batch takes `delay` seconds more."""

    def __init__(self, inner: Transport, sandbox_id: str, nth: int, delay: float = 0) -> None:
        super().__init__(inner)
        self.sandbox_id, self.nth, self.batches, self.delay = sandbox_id, nth, 0, delay

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: Any = None,
        headers: Any = None,
    ) -> Response:
        if path.endswith("/files/batch"):
            self.batches += 1
            await asyncio.sleep(self.delay)
            if self.batches == self.nth:
                await self.inner.request("DELETE", f"/v1/sandboxes/{self.sandbox_id}")
        return await super().request(
            method, path, body, timeout=timeout, on_event=on_event, headers=headers
        )


async def test_a_sandbox_destroyed_again_during_its_refill_is_filled_from_the_start(
    backend: Backend, client: SandboxClient, folder: Path
) -> None:
    """Batches 1 (the initial sync) and 2 (a save after a destroy) go through; the
    sandbox is destroyed again just before 3, the refill's, which makes it again: the
    refill starts over, lists what batch 3 put there, and finds nothing left to send.
    What batch 3 put there is the sync's, and counted as sent."""
    make_tree(folder, files=12)
    gateway = DestroyingBefore(backend.transport, client.id, nth=3, delay=0.2)
    sync = FolderSync(folder, through(backend, client, gateway))
    await sync.initial_sync()
    await client.destroy()
    (folder / "d1" / "sub" / "f1.txt").write_text("saved after the destroy")
    started = time.perf_counter()
    report = await sync.sync_paths(["d1/sub/f1.txt"])
    took = time.perf_counter() - started
    # Both batches' passes (it was only the last pass's, which sent none).
    assert 0.4 <= report.duration_s <= took
    assert gateway.batches == 3
    assert [issue.code for issue in report.notices] == ["SANDBOX_REPLACED"] * 2
    assert not report.incomplete and not report.conflicts and not report.errors
    assert (len(report.uploaded), report.unchanged) == (13, 0)
    assert await remote_tree(client) == local_tree(folder)
    shutil.rmtree(folder / "d1")
    await sync.sync_paths(["d1"])
    assert await remote_tree(client) == local_tree(folder)


async def test_a_save_that_makes_a_destroyed_sandbox_again_is_counted_and_the_syncs(
    client: SandboxClient, folder: Path
) -> None:
    """The watched sandbox is destroyed; the next save is a new file, whose write makes the
    sandbox again, and the batch's answer says so: the pass refills it. The new file's
    write had landed, but its outcome was dropped, so the refill said "2 uploaded" for 3
    files and found the new file there as a stranger's: deleted locally, it stayed."""
    (folder / "a.txt").write_text("a")
    (folder / "b.txt").write_text("b")
    sync = FolderSync(folder, client, debounce=0.03)
    async with watching(sync) as watch:
        await watch.until_idle()
        await client.destroy()
        (folder / "new.txt").write_text("saved after the destroy")

        def refills() -> list[SyncReport]:
            return [
                event.report
                for event in watch.of(EventKind.SYNCED)
                if event.report is not None
                and any(notice.code == "SANDBOX_REPLACED" for notice in event.report.notices)
            ]

        await eventually(lambda: _true(bool(refills())))
        refill = refills()[0]
        assert (sorted(refill.uploaded), refill.unchanged) == (["a.txt", "b.txt", "new.txt"], 0)
        assert await remote_tree(client) == local_tree(folder)

        (folder / "new.txt").unlink()

        async def converged() -> bool:
            return await remote_tree(client) == local_tree(folder)

        await eventually(converged)


async def _true(value: bool) -> bool:
    return value


class ActingBeforeReadBack(Gateway):
    """Runs `before` (another client's work) once, just before a read of `path` goes
    through (the conflict check's read-back)."""

    def __init__(self, inner: Transport, path: str) -> None:
        super().__init__(inner)
        self.path = path
        self.before: Callable[[], Awaitable[object]] | None = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: Any = None,
        headers: Any = None,
    ) -> Response:
        reads = isinstance(body, dict) and body.get("op") == "read"
        if reads and body.get("path") == self.path and self.before is not None:
            before, self.before = self.before, None
            await before()
        return await super().request(
            method, path, body, timeout=timeout, on_event=on_event, headers=headers
        )


@pytest.mark.parametrize("policy", ["local-wins", "sandbox-wins", "fail"])
async def test_a_file_the_other_watch_deleted_before_the_read_back_is_no_conflict(
    backend: Backend, client: SandboxClient, folder: Path, policy: str
) -> None:
    """One folder synced into one sandbox twice at once (two syncs that keep no state
    in common, here the other one with `prune`): a file is edited, its size kept, then
    deleted. The other sync sent the edit; this one, whose pass took both changes, found
    the sandbox's copy changed and read it back to compare, but the other sync had
    deleted it meanwhile: the read found nothing, and that was "changed in the sandbox
    since the last sync" (under `fail`, the watch ended). The pass deletes it, and it is
    gone: no conflict."""
    (folder / "f.txt").write_text("version 1")
    (folder / "kept.txt").write_text("kept")
    gateway = ActingBeforeReadBack(backend.transport, "/workspace/f.txt")
    sync = FolderSync(folder, through(backend, client, gateway), policy=policy)
    await sync.initial_sync()
    other = FolderSync(folder, client, policy=policy, prune=True)
    await other.initial_sync()
    (folder / "f.txt").write_text("version 2")
    assert (await other.sync_paths(["f.txt"])).uploaded == ["f.txt"]
    (folder / "f.txt").unlink()
    gateway.before = lambda: other.sync_paths(["f.txt"])
    report = await sync.sync_paths(["f.txt"])
    assert gateway.before is None  # the other watch deleted it before the read-back
    assert not report.conflicts and not report.errors
    assert await remote_tree(client) == local_tree(folder)


@pytest.mark.parametrize("policy", ["local-wins", "fail"])
async def test_a_file_that_became_a_directory_before_the_read_back_is_said_so(
    backend: Backend, client: SandboxClient, folder: Path, tmp_path: Path, policy: str
) -> None:
    """As above, but another client put a directory where the file was just before the
    read-back: the read fails as for a file gone, and the conflict is that it became a
    directory, not that it was deleted (which the pass's own delete would have hidden)."""
    (folder / "f.txt").write_text("version 1")
    gateway = ActingBeforeReadBack(backend.transport, "/workspace/f.txt")
    sync = FolderSync(folder, through(backend, client, gateway), policy=policy)
    await sync.initial_sync()
    await asyncio.sleep(0.01)  # a later modification time: the check reads the file back
    await client.write_file("/workspace/f.txt", "version 2")  # the sandbox's own change

    async def make_it_a_directory() -> None:
        await client.delete_file("/workspace/f.txt")
        await client.mkdir("/workspace/f.txt/inner", recursive=True)

    (folder / "f.txt").unlink()
    gateway.before = make_it_a_directory
    try:
        report = await sync.sync_paths(["f.txt"])
    except SyncConflictError as error:
        conflicts = error.conflicts
    else:
        conflicts = report.conflicts
    assert gateway.before is None
    assert [issue.message for issue in conflicts] == ["f.txt became a directory in the sandbox"]
    assert "f.txt/inner" in await remote_tree(client)
