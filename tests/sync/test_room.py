"""A pass reads only what the sandbox can hold: changed files smallest first, within the
room its 16 MiB workspace has left, each file once; what does not fit is reported per
path and in one event naming the files and their total (sparse files count by size)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.sync.conftest import remote_tree
from workbench.api import SandboxClient
from workbench.sync import (
    MAX_FILE_BYTES,
    MAX_WORKSPACE_BYTES,
    EventKind,
    FolderSync,
    SyncEvent,
)
from workbench.sync import local as sync_local
from workbench.sync.local import read_regular_file

FITTING = MAX_WORKSPACE_BYTES // MAX_FILE_BYTES
"""Files of the per-file limit the workspace holds."""


def sparse_files(folder: Path, names: list[str], size: int = MAX_FILE_BYTES) -> None:
    """Files of `size` bytes that take no blocks on disk (as `truncate -s`)."""
    for name in names:
        with open(folder / name, "wb") as stream:
            stream.truncate(size)


class Reads:
    """Every read of a folder file the sync makes: how often per path, and bytes read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count: Counter[str] = Counter()
        self.bytes = 0

        def counted(root: Path, relative: str, limit: int) -> bytes | None:
            data = read_regular_file(root, relative, limit)
            self.count[relative] += 1
            self.bytes += len(data or b"")
            return data

        monkeypatch.setattr(sync_local, "read_regular_file", counted)

    def clear(self) -> None:
        self.count.clear()
        self.bytes = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    return Reads(monkeypatch)


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{index:03}.bin" for index in range(count)]


async def test_a_folder_larger_than_the_workspace_is_read_only_as_far_as_it_fits(
    folder: Path, sandbox: SandboxClient, reads: Reads
) -> None:
    sparse_files(folder, names("f", FITTING + 4))
    (folder / "small.txt").write_text("small files go first")
    sync = FolderSync(folder, sandbox)
    events: list[SyncEvent] = []
    sync.subscribe(events.append)
    report = await sync.initial_sync()

    fitting = sorted(["small.txt", *names("f", FITTING - 1)])
    refused = names("f", FITTING + 4)[FITTING - 1 :]
    assert sorted(report.uploaded) == fitting
    assert [(issue.path, issue.code) for issue in report.errors] == [
        (name, "NO_SPACE") for name in refused
    ]
    assert sorted(await remote_tree(sandbox)) == fitting
    assert set(reads.count) == set(fitting) and set(reads.count.values()) == {1}
    assert reads.bytes <= MAX_WORKSPACE_BYTES
    (announced,) = [event.message for event in events if event.kind is EventKind.ERROR]
    assert announced.startswith(
        f"not uploaded for lack of room: 5 files ({', '.join(refused)}), 5.0 MiB in all; "
    )


async def test_the_room_counts_what_stays_and_frees_what_a_pass_replaces(
    folder: Path, sandbox: SandboxClient, reads: Reads
) -> None:
    sparse_files(folder, names("f", 10))
    sync = FolderSync(folder, sandbox)
    assert len((await sync.initial_sync()).uploaded) == 10

    reads.clear()
    sparse_files(folder, names("g", 10))
    report = await sync.sync_all()
    assert sorted(report.uploaded) == names("g", FITTING - 10)
    assert [issue.path for issue in report.errors] == names("g", 10)[FITTING - 10 :]
    assert sorted(reads.count) == names("g", FITTING - 10)  # the unchanged f's are not read

    # New content for every file in the sandbox: each frees the room of its old version.
    reads.clear()
    for name in names("f", 10) + names("g", FITTING - 10):
        (folder / name).write_bytes(b"x" * MAX_FILE_BYTES)
    for name in names("g", 10)[FITTING - 10 :]:
        (folder / name).unlink()
    report = await sync.sync_all()
    assert len(report.uploaded) == FITTING and not report.errors
    assert reads.bytes == MAX_WORKSPACE_BYTES


async def test_files_over_the_limit_are_never_read_and_named_once(
    folder: Path, sandbox: SandboxClient, reads: Reads
) -> None:
    sparse_files(folder, ["huge.bin"], size=1 << 40)
    sparse_files(folder, ["big.bin"], size=MAX_FILE_BYTES + 1)
    (folder / "ok.txt").write_text("ok")
    sync = FolderSync(folder, sandbox)
    events: list[SyncEvent] = []
    sync.subscribe(events.append)
    report = await sync.initial_sync()
    assert report.uploaded == ["ok.txt"]
    assert sorted((issue.path, issue.code) for issue in report.errors) == [
        ("big.bin", "FILE_TOO_LARGE"),
        ("huge.bin", "FILE_TOO_LARGE"),
    ]
    assert list(reads.count) == ["ok.txt"]
    assert [event.message for event in events if event.kind is EventKind.ERROR] == [
        "not uploaded: 2 files (big.bin, huge.bin), over the sandbox's limit of 1.0 MiB per file"
    ]


async def test_a_file_refused_for_want_of_room_goes_with_a_later_pass(
    folder: Path, sandbox: SandboxClient
) -> None:
    """Room a guest made (its files deleted) let nothing through: a file the sandbox
    refused was sent only once it changed again, while the passes said "synced" (QA).
    Every pass tries the refusals of the one before, whatever it is for."""
    size = MAX_FILE_BYTES - 4096
    sparse_files(folder, names("f", FITTING - 1), size)
    sync = FolderSync(folder, sandbox)
    assert not (await sync.initial_sync()).errors
    # A guest fills the sandbox: the sync's own count of the room does not know it.
    await sandbox.write_file("/workspace/guest.bin", bytes(900_000))
    sparse_files(folder, ["late.bin"], size)
    report = await sync.sync_paths([folder / "late.bin"])
    assert [(issue.path, issue.code) for issue in report.errors] == [("late.bin", "NO_SPACE")]
    await sandbox.delete_file("/workspace/guest.bin")  # and makes room again
    (folder / "other.txt").write_text("a change elsewhere")
    report = await sync.sync_paths([folder / "other.txt"])
    assert sorted(report.uploaded) == ["late.bin", "other.txt"] and not report.errors
    assert "late.bin" in await remote_tree(sandbox)
