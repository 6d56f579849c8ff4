"""One sync at a time per state file, i.e. per (backend, sandbox, dest, folder): a second
one, in this process or another, a watch or a one-shot, fails at once and names the
holder; the lock goes with its holder however that ends. Two at once each took the
other's uploads for a guest's changes (16 spurious conflicts in 150 edits) and overwrote
each other's record of what they created. The local backend (the lock is the host's)."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.sync.conftest import fresh_id
from tests.sync_state_holder import held_by_another_process
from workbench.api import Backend, SandboxClient
from workbench.backends.local import open_local_backend
from workbench.sync import FolderSync, SyncAlreadyRunningError, sync_folder, sync_state_file
from workbench.sync.manifest import state_lock_file


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Backend]:
    opened = open_local_backend(tmp_path / "data", embedded=True)
    try:
        yield opened
    finally:
        await opened.aclose()


def state_of(tmp_path: Path, sandbox: SandboxClient, folder: Path, dest: str) -> Path:
    return sync_state_file(
        tmp_path / "state-data",
        backend="test-backend",
        sandbox_id=sandbox.id,
        dest=dest,
        folder=folder,
    )


async def test_a_second_sync_of_one_state_file_is_refused_until_the_first_closes(
    tmp_path: Path, backend: Backend, folder: Path, sandbox: SandboxClient
) -> None:
    (folder / "a.txt").write_text("a")
    state_file = state_of(tmp_path, sandbox, folder, "/workspace")
    with FolderSync(folder, sandbox, state_file=state_file) as first:
        assert (await first.initial_sync()).uploaded == ["a.txt"]
        with pytest.raises(SyncAlreadyRunningError) as refused:
            FolderSync(folder, sandbox, state_file=state_file)
        assert refused.value.holder_pid == os.getpid()
        assert str(refused.value) == (
            f"{folder.resolve()} is already being watched into sandbox {sandbox.id} at "
            f"/workspace by process {os.getpid()} (this one)"
        )
        with pytest.raises(SyncAlreadyRunningError):  # a one-shot pass as well
            await sync_folder(folder, sandbox, state_file=state_file)
        # Another dest or sandbox is another state file; a sync without one holds none.
        copy = state_of(tmp_path, sandbox, folder, "/workspace/copy")
        copied = await sync_folder(folder, sandbox, dest="/workspace/copy", state_file=copy)
        assert copied.uploaded == ["a.txt"]
        elsewhere = backend.sandbox(fresh_id())  # never used: nothing to destroy
        elsewhere_state = state_of(tmp_path, elsewhere, folder, "/workspace")
        FolderSync(folder, elsewhere, state_file=elsewhere_state).close()
        FolderSync(folder, sandbox).close()
        assert (await first.sync_all()).full  # the first one goes on
    lock_file = state_lock_file(state_file)
    assert stat.S_IMODE(lock_file.stat().st_mode) == 0o600  # kept: it may be in use

    (folder / "a.txt").unlink()
    with FolderSync(folder, sandbox, state_file=state_file) as second:
        assert second.may_delete  # it reads what the first one recorded
        assert (await second.initial_sync()).deleted == ["a.txt"]
    with pytest.raises(RuntimeError):  # closed: it no longer holds the state
        await first.sync_all()


async def test_a_holder_killed_with_sigkill_does_not_block_the_next(
    tmp_path: Path, folder: Path, sandbox: SandboxClient
) -> None:
    (folder / "a.txt").write_text("a")
    state_file = state_of(tmp_path, sandbox, folder, "/workspace")
    with held_by_another_process(state_file) as holder:
        with pytest.raises(SyncAlreadyRunningError) as refused:
            FolderSync(folder, sandbox, state_file=state_file)
        assert refused.value.holder_pid == holder.pid
        assert str(refused.value).endswith(f" by process {holder.pid}")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with FolderSync(folder, sandbox, state_file=state_file) as sync:
            assert (await sync.initial_sync()).uploaded == ["a.txt"]
            assert state_lock_file(state_file).read_text() == f"{os.getpid()}\n"


async def test_a_lock_file_that_is_a_symlink_is_never_followed(
    tmp_path: Path, folder: Path, sandbox: SandboxClient
) -> None:
    state_file = state_of(tmp_path, sandbox, folder, "/workspace")
    state_file.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere.txt"
    target.write_text("not the sync's")
    target.chmod(0o644)
    state_lock_file(state_file).symlink_to(target)
    with pytest.raises(OSError):
        FolderSync(folder, sandbox, state_file=state_file)
    assert target.read_text() == "not the sync's"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not made private either


async def test_a_lock_file_is_0600_whatever_the_umask_and_says_no_pid_once_let_go(
    tmp_path: Path, folder: Path, sandbox: SandboxClient
) -> None:
    """Made under a umask that drops the owner's write bit, it was left 0400: every later
    sync failed to open it. A lock let go keeps no pid: a refusal read between a new
    holder's lock and its pid named the one before."""
    state_file = state_of(tmp_path, sandbox, folder, "/workspace")
    previous = os.umask(0o277)
    try:
        FolderSync(folder, sandbox, state_file=state_file).close()
    finally:
        os.umask(previous)
    lock_file = state_lock_file(state_file)
    assert stat.S_IMODE(lock_file.stat().st_mode) == 0o600
    assert lock_file.read_text() == ""
    with FolderSync(folder, sandbox, state_file=state_file):
        assert lock_file.read_text() == f"{os.getpid()}\n"
    assert lock_file.read_text() == ""


async def test_a_lock_file_that_is_a_fifo_is_refused_at_once(
    tmp_path: Path, folder: Path, sandbox: SandboxClient
) -> None:
    state_file = state_of(tmp_path, sandbox, folder, "/workspace")
    state_file.parent.mkdir(parents=True)
    os.mkfifo(state_lock_file(state_file), 0o600)
    with pytest.raises(OSError, match="not a regular file"):
        FolderSync(folder, sandbox, state_file=state_file)
