"""`sandbox-workbench watch` through the real console script: what it may delete, that it
says where it deletes, `--prune`, hostile `.gitignore` lines, a folder far larger than the
sandbox, bad arguments, and one watch at a time per folder, sandbox and dest."""

from __future__ import annotations

import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.cli_fork_server import run_cli_forked

SCRIPT = str(Path(sys.executable).parent / "sandbox-workbench")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }


def workbench(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    completed = run_cli_forked(env, *args, timeout=timeout)
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


def sandbox_files(env: dict[str, str], sandbox: str) -> list[str]:
    listing = workbench(env, "files", "ls", sandbox, "--all", "--recursive", "--json")
    assert listing.returncode == 0, listing.stderr
    return sorted(info["relativePath"] for info in json.loads(listing.stdout))


def test_watch_deletes_only_what_it_uploaded_and_says_where(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    (folder / "b.txt").write_text("b")
    (tmp_path / "extra.txt").write_text("put by hand")
    assert workbench(env, "files", "put", "proj", str(tmp_path / "extra.txt")).returncode == 0

    first = workbench(env, "watch", str(folder), "--once")
    assert first.returncode == 0, first.stderr
    assert sandbox_files(env, "proj") == ["a.txt", "b.txt", "extra.txt"]

    (folder / "a.txt").unlink()
    second = workbench(env, "watch", str(folder), "--once", "--json")
    assert second.returncode == 0, second.stderr
    assert sandbox_files(env, "proj") == ["b.txt", "extra.txt"]
    lines = [json.loads(line) for line in second.stdout.splitlines()]
    assert [line["event"] for line in lines] == ["synced"] and lines[0]["sync"]["deleted"] == 1
    announced = [json.loads(line) for line in second.stderr.splitlines() if "backend" in line]
    assert announced == [
        {
            "event": "backend",
            "profile": "local",
            "backend": f"local ({tmp_path / 'data'})",
            "sandbox": "proj",
            "dest": "/workspace",
        }
    ]
    (state,) = (tmp_path / "data" / "sync-state").glob("*.json")
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.with_name(f"{state.name}.lock").stat().st_mode) == 0o600

    pruned = workbench(env, "watch", str(folder), "--once", "--prune")
    assert pruned.returncode == 0, pruned.stderr
    assert f"on profile local: local ({tmp_path / 'data'})" in pruned.stderr
    assert sandbox_files(env, "proj") == ["b.txt"]


def test_watch_honours_tricky_gitignore_lines_and_secret_defaults(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "tricky"
    folder.mkdir()
    (folder / ".gitignore").write_text("[]a]\n[]x]*\n")
    for name in ("]", "a", "x1", "keep.txt", ".env", "server.pem", "id_ed25519"):
        (folder / name).write_text(name)
    (folder / ".ssh").mkdir()
    (folder / ".ssh" / "config").write_text("Host *")
    completed = workbench(env, "watch", str(folder), "--once")
    assert completed.returncode == 0, completed.stderr
    assert sandbox_files(env, "tricky") == [".gitignore", "keep.txt"]


def test_watch_is_not_stalled_by_a_backtracking_gitignore_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "stall"
    folder.mkdir()
    (folder / ".gitignore").write_text("*a*a*a*a*a*a*a*a*a*a*a*a*b\n")
    (folder / ("a" * 60)).write_text("not ignored: no b")
    completed = workbench(env, "watch", str(folder), "--once", timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert sandbox_files(env, "stall") == [".gitignore", "a" * 60]


MEASURED = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)
"""Runs a command and prints its peak resident set size (KiB) last."""


def test_watch_on_a_folder_of_sparse_files_stays_small_and_names_what_did_not_fit(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "sparse"
    folder.mkdir()
    for index in range(400):
        with open(folder / f"f{index:03}.bin", "wb") as stream:
            stream.truncate(1_048_576)  # 400 MiB that take no room on disk
    completed = subprocess.run(
        [sys.executable, "-c", MEASURED, SCRIPT, "watch", str(folder), "--once"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    assert completed.returncode == 1  # not everything was synced
    peak_kib = int(completed.stdout.splitlines()[-1])
    assert peak_kib < 256 * 1024  # every file's data at once: over 1 GiB
    (refused,) = [line for line in completed.stderr.splitlines() if "not uploaded" in line]
    assert refused.startswith(
        "error: not uploaded for lack of room: 384 files (f016.bin, f017.bin, f018.bin, "
        "f019.bin, f020.bin and 379 more), 384.0 MiB in all; "
    )
    assert sandbox_files(env, "sparse") == [f"f{index:03}.bin" for index in range(16)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dest", "/etc"], "dest must be /workspace or under it"),
        (["--dest", "/workspace/../etc"], "dest must be /workspace or under it"),
        (["--run", "../outside.py"], "would leave its root"),
    ],
)
def test_watch_rejects_paths_outside_their_roots(
    tmp_path: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (tmp_path / "outside.py").write_text("print('outside')\n")
    completed = workbench(env, "watch", str(folder), "--once", *args)
    assert completed.returncode == 2
    assert message in completed.stderr


class RunningWatch:
    """A `watch --json` in a process of its own; its stdout lines are read on a thread, so
    that the test can wait for them with a timeout."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.process = subprocess.Popen(
            [SCRIPT, "watch", str(folder), "--json", "--debounce", "0.03"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._ended: tuple[int, str] | None = None
        stdout = self.process.stdout
        assert stdout is not None
        self._reader = threading.Thread(target=lambda: list(map(self._lines.put, stdout)))
        self._reader.start()

    def next_event(self, timeout: float = 60) -> dict[str, Any]:
        value = json.loads(self._lines.get(timeout=timeout))
        assert isinstance(value, dict)
        return value

    def stop(self) -> tuple[int, str]:
        """Stop it as Ctrl+C does (unless it ended); its exit code and stderr."""
        if self._ended is not None:
            return self._ended
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(timeout=30)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        with self.process.stderr as stderr:
            self._ended = self.process.returncode, stderr.read()
        return self._ended


@contextmanager
def running_watch(env: dict[str, str], folder: Path) -> Iterator[RunningWatch]:
    watch = RunningWatch(env, folder)
    try:
        yield watch
    finally:
        watch.stop()


def test_a_second_watch_of_one_folder_sandbox_and_dest_is_refused_at_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Two watches of one folder into one sandbox and dest each took the other's uploads
    for a guest's changes and overwrote each other's record of what they created: the
    second one now ends at once (exit 1), naming the first, which goes on."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    with running_watch(env, folder) as first:
        assert first.next_event()["event"] == "synced"
        refusal = (
            f"error: {folder.resolve()} is already being watched into sandbox proj at "
            f"/workspace by process {first.process.pid}\n"
        )
        for once in (["--once"], []):
            second = workbench(env, "watch", str(folder), *once, timeout=60)
            assert (second.returncode, second.stdout, second.stderr) == (1, "", refusal)

        (folder / "b.txt").write_text("b")
        synced = first.next_event()
        assert synced["event"] == "synced" and synced["sync"]["uploaded"] == 1
        assert sandbox_files(env, "proj") == ["a.txt", "b.txt"]

        # Another dest, or another sandbox, is another sync.
        for other in (["--dest", "/workspace/copy"], ["--sandbox", "other"]):
            third = workbench(env, "watch", str(folder), "--once", *other, timeout=60)
            assert third.returncode == 0, third.stderr
        returncode, stderr = first.stop()
    assert returncode == 130, stderr  # stopped by Ctrl+C, as the README's table says
    assert "Traceback" not in stderr
    assert sandbox_files(env, "other") == ["a.txt", "b.txt"]


def test_a_watch_killed_with_sigkill_does_not_block_the_next(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    with running_watch(env, folder) as first:
        assert first.next_event()["event"] == "synced"
        (lock,) = (tmp_path / "data" / "sync-state").glob("*.lock")
        assert lock.read_text() == f"{first.process.pid}\n"  # who holds it, for a refusal
        first.process.kill()
        first.process.wait(timeout=30)
    (folder / "b.txt").write_text("b")
    again = workbench(env, "watch", str(folder), "--once", timeout=60)
    assert again.returncode == 0, again.stderr
    assert sandbox_files(env, "proj") == ["a.txt", "b.txt"]
