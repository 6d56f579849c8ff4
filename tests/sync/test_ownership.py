"""The sync deletes only what it created: sandbox-only files and guest output survive,
what it uploaded is deleted even by a later run (the saved state), `prune` mirrors
exactly, and the conflict policy covers deletes. Local backend and a real `serve`."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.sync.conftest import remote_tree
from workbench.api import SandboxClient
from workbench.sync import (
    EventKind,
    FolderSync,
    SyncConflictError,
    SyncEvent,
    sync_folder,
    sync_state_file,
)


@pytest.fixture
def state_file(tmp_path: Path, folder: Path, sandbox: SandboxClient) -> Path:
    return sync_state_file(
        tmp_path / "state-data",
        backend="test-backend",
        sandbox_id=sandbox.id,
        dest="/workspace",
        folder=folder,
    )


async def test_sandbox_only_entries_survive_and_what_we_uploaded_goes_in_a_later_run(
    folder: Path, sandbox: SandboxClient, state_file: Path
) -> None:
    (folder / "app").mkdir()
    (folder / "app" / "main.py").write_text("print(1)\n")
    (folder / "notes.txt").write_text("mine")
    await sandbox.write_file("/workspace/put.txt", "put with `files put`")
    await sandbox.mkdir("/workspace/results", recursive=True)
    await sandbox.write_file("/workspace/results/out.csv", "guest output")

    first = await sync_folder(folder, sandbox, state_file=state_file)
    assert sorted(first.uploaded) == ["app/main.py", "notes.txt"] and not first.deleted
    tree = await remote_tree(sandbox)
    assert tree["put.txt"] == b"put with `files put`"
    assert tree["results/out.csv"] == b"guest output"

    # A guest writes into a directory the sync created; then the folder loses it.
    await sandbox.write_file("/workspace/app/generated.txt", "guest output in our dir")
    (folder / "notes.txt").unlink()
    (folder / "app" / "main.py").unlink()
    (folder / "app").rmdir()

    with FolderSync(folder, sandbox, state_file=state_file) as second:  # a new `watch` run
        assert second.may_delete
        events: list[SyncEvent] = []
        second.subscribe(events.append)
        report = await second.initial_sync()
    assert sorted(report.deleted) == ["app/main.py", "notes.txt"]
    assert await remote_tree(sandbox) == {
        "put.txt": b"put with `files put`",
        "results": None,
        "results/out.csv": b"guest output",
        "app": None,
        "app/generated.txt": b"guest output in our dir",
    }
    assert [notice.code for notice in report.notices] == ["KEPT_DIRECTORY"]
    assert any(
        event.kind is EventKind.NOTICE and "app/generated.txt" in event.message for event in events
    )


async def test_without_saved_state_nothing_is_deleted(
    folder: Path, sandbox: SandboxClient, state_file: Path
) -> None:
    (folder / "a.txt").write_text("a")
    await sync_folder(folder, sandbox, state_file=state_file)
    (folder / "a.txt").unlink()
    for broken in (b"{not json", b'{"version": 1, "entries": []}', b"\xff\xfe", b""):
        state_file.write_bytes(broken)
        with FolderSync(folder, sandbox, state_file=state_file) as sync:
            assert not sync.may_delete
            assert not (await sync.initial_sync()).deleted
        assert (await sandbox.read_bytes("/workspace/a.txt")) == b"a"
    state_file.unlink()
    assert not (await sync_folder(folder, sandbox, state_file=state_file)).deleted
    assert (await sandbox.read_bytes("/workspace/a.txt")) == b"a"


async def test_state_file_is_private_and_cannot_point_outside_dest(
    tmp_path: Path, folder: Path, sandbox: SandboxClient
) -> None:
    state_file = sync_state_file(
        tmp_path / "data",
        backend="test-backend",
        sandbox_id=sandbox.id,
        dest="/workspace/app",
        folder=folder,
    )
    (folder / "a.txt").write_text("a")
    await sync_folder(folder, sandbox, dest="/workspace/app", state_file=state_file)
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(state_file.parent.stat().st_mode) == 0o700
    saved = json.loads(state_file.read_text())
    assert saved["sandbox"] == sandbox.id and saved["dest"] == "/workspace/app"
    assert list(saved["entries"]) == ["a.txt"]

    # A tampered state claims files outside dest; the next run must not touch them.
    await sandbox.write_file("/workspace/precious.txt", "outside dest")
    entry = saved["entries"]["a.txt"]
    saved["entries"] = {"../precious.txt": entry, "/workspace/precious.txt": entry, "": entry}
    saved["seenInSync"] = {"../precious.txt": {**entry, "localStat": [1, 2]}}
    state_file.write_text(json.dumps(saved))
    report = await sync_folder(folder, sandbox, dest="/workspace/app", state_file=state_file)
    assert not report.deleted
    assert (await sandbox.read_bytes("/workspace/precious.txt")) == b"outside dest"

    # A state nested past what Python's parser recurses through is damaged: no state.
    state_file.write_text("[" * 100_000 + "]" * 100_000)
    report = await sync_folder(folder, sandbox, dest="/workspace/app", state_file=state_file)
    assert not report.deleted and not report.errors


async def test_prune_mirrors_exactly_but_keeps_ignored_paths(
    folder: Path, sandbox: SandboxClient
) -> None:
    (folder / "keep.txt").write_text("k")
    (folder / ".gitignore").write_text("cache/\n")
    await sandbox.write_file("/workspace/stray.txt", "sandbox only")
    await sandbox.mkdir("/workspace/old/deep", recursive=True)
    await sandbox.write_file("/workspace/old/deep/x.txt", "sandbox only")
    await sandbox.mkdir("/workspace/cache", recursive=True)
    await sandbox.write_file("/workspace/cache/blob", "ignored: stays")
    await sandbox.mkdir("/workspace/mixed", recursive=True)
    await sandbox.write_file("/workspace/mixed/a.txt", "sandbox only")
    await sandbox.mkdir("/workspace/mixed/cache", recursive=True)
    await sandbox.write_file("/workspace/mixed/cache/b", "ignored: stays")

    report = await FolderSync(folder, sandbox, prune=True).initial_sync()
    assert "stray.txt" in report.deleted
    assert await remote_tree(sandbox) == {
        ".gitignore": b"cache/\n",
        "keep.txt": b"k",
        "cache": None,
        "cache/blob": b"ignored: stays",
        "mixed": None,
        "mixed/cache": None,
        "mixed/cache/b": b"ignored: stays",
    }


async def test_a_local_file_never_replaces_a_sandbox_directory_we_did_not_create(
    folder: Path, sandbox: SandboxClient
) -> None:
    await sandbox.mkdir("/workspace/out", recursive=True)
    await sandbox.write_file("/workspace/out/result.txt", "guest output")
    (folder / "out").write_text("a local file named like the guest's directory")
    (folder / "other.txt").write_text("synced")
    report = await FolderSync(folder, sandbox).initial_sync()
    assert [(issue.path, issue.code) for issue in report.errors] == [("out", "SANDBOX_ENTRY_KEPT")]
    assert (await sandbox.read_bytes("/workspace/out/result.txt")) == b"guest output"
    assert (await sandbox.read_bytes("/workspace/other.txt")) == b"synced"


async def guest_changed(sandbox: SandboxClient, folder: Path, state_file: Path) -> None:
    """Sync `a.txt`, change it in the sandbox behind the sync's back, delete it locally."""
    (folder / "a.txt").write_text("from the folder")
    await sync_folder(folder, sandbox, state_file=state_file)
    await sandbox.write_file("/workspace/a.txt", "changed in the sandbox")
    (folder / "a.txt").unlink()


async def test_delete_conflict_fail_refuses(
    folder: Path, sandbox: SandboxClient, state_file: Path
) -> None:
    await guest_changed(sandbox, folder, state_file)
    with pytest.raises(SyncConflictError) as raised:
        await sync_folder(folder, sandbox, state_file=state_file, policy="fail")
    assert [issue.path for issue in raised.value.conflicts] == ["a.txt"]
    assert (await sandbox.read_bytes("/workspace/a.txt")) == b"changed in the sandbox"


async def test_delete_conflict_sandbox_wins_keeps_the_file_for_good(
    folder: Path, sandbox: SandboxClient, state_file: Path
) -> None:
    await guest_changed(sandbox, folder, state_file)
    with FolderSync(folder, sandbox, state_file=state_file, policy="sandbox-wins") as sync:
        report = await sync.initial_sync()
        assert [issue.path for issue in report.conflicts] == ["a.txt"] and not report.deleted
        assert not (await sync.sync_all()).deleted  # no longer the sync's to delete
    again = await sync_folder(folder, sandbox, state_file=state_file)
    assert not again.deleted and not again.conflicts
    assert (await sandbox.read_bytes("/workspace/a.txt")) == b"changed in the sandbox"


async def test_delete_conflict_local_wins_deletes_with_a_notice(
    folder: Path, sandbox: SandboxClient, state_file: Path
) -> None:
    await guest_changed(sandbox, folder, state_file)
    with FolderSync(folder, sandbox, state_file=state_file) as sync:
        events: list[SyncEvent] = []
        sync.subscribe(events.append)
        report = await sync.initial_sync()
    assert report.deleted == ["a.txt"] and [issue.path for issue in report.conflicts] == ["a.txt"]
    conflicts = [event.message for event in events if event.kind is EventKind.CONFLICT]
    assert conflicts == [
        "a.txt was changed in the sandbox since the last sync; deleted anyway (local-wins)"
    ]
    assert not (await sandbox.exists("/workspace/a.txt")).exists


async def test_deleting_a_local_folder_keeps_guest_output_while_watching(
    folder: Path, sandbox: SandboxClient
) -> None:
    (folder / "build").mkdir()
    (folder / "build" / "input.txt").write_text("in")
    sync = FolderSync(folder, sandbox)
    await sync.initial_sync()
    await sandbox.write_file("/workspace/build/output.txt", "guest output")
    (folder / "build" / "input.txt").unlink()
    (folder / "build").rmdir()
    report = await sync.sync_paths([folder / "build"])
    assert report.deleted == ["build/input.txt"]
    assert await remote_tree(sandbox) == {"build": None, "build/output.txt": b"guest output"}
