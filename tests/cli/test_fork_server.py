"""The CLI fork server the command-line tests run commands with answers as the console
script does: the same output and status, each command with its own environment, working
directory and input, and a command past its timeout killed."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli import ROOT, SCRIPT, cli_env, run_cli
from tests.cli_fork_server import FORK_SERVER, run_cli_forked


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("run", "--bogus"),
        ("daemon", "status"),
        ("files", "ls", "../up"),
        ("run", "-l", "cobol", "-c", "1"),
    ],
)
def test_a_forked_command_answers_as_the_console_script(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    env = cli_env(tmp_path)
    real = subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    forked = run_cli(env, *args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


def test_a_large_environment_reaches_the_command(tmp_path: Path) -> None:
    """A request is longer than one write of a Unix socket (about 32 KiB)."""
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_TEST_PADDING="é" * 100_000)
    completed = run_cli(env, "daemon", "status")
    assert completed.stdout == f"no local daemon runs for {tmp_path / 'data'}\n"


def test_python_m_workbench_is_named_as_such() -> None:
    completed = run_cli_forked(cli_env(Path("/nonexistent")), "run", "--bogus", module=True)
    assert completed.returncode == 2
    assert completed.stderr.startswith("Usage: python -m workbench run ")


def test_each_command_has_its_own_environment_directory_and_input(
    tmp_path: Path, python_engine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_cli(cli_env(tmp_path / "one"), "daemon", "status")
    second = run_cli(cli_env(tmp_path / "two"), "daemon", "status")
    assert first.stdout == f"no local daemon runs for {tmp_path / 'one' / 'data'}\n"
    assert second.stdout == f"no local daemon runs for {tmp_path / 'two' / 'data'}\n"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    embedded = cli_env(tmp_path, SANDBOX_WORKBENCH_NO_DAEMON="1")
    monkeypatch.chdir(tmp_path)  # a relative directory is the test's, not the server's
    read = run_cli_forked(embedded, "--data-dir", "store", "run", "-s", "b", "-l", "python",
                          "-", stdin="6 * 7\n", cwd="elsewhere")  # fmt: skip
    assert (read.returncode, read.stdout) == (0, "42\n"), read.stderr
    assert (elsewhere / "store").is_dir()


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_NO_DAEMON="1")
    FORK_SERVER.start()
    server = FORK_SERVER.pid
    assert server is not None
    children = Path(f"/proc/{server}/task/{server}/children")
    before = set(children.read_text().split())  # a `serve` of this worker's fixtures
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_cli(env, "watch", str(folder), "-s", "box", timeout=3)
    assert raised.value.cmd[0] == str(SCRIPT)
    assert FORK_SERVER.pid == server
    deadline = time.monotonic() + 20
    while set(children.read_text().split()) - before:
        assert time.monotonic() < deadline, "the command outlived its timeout"
        time.sleep(0.05)


def test_a_command_takes_the_tests_umask(tmp_path: Path) -> None:
    """The server started before this test changed its umask; the command still creates
    what it writes with the test's, as the console script would."""
    previous = os.umask(0o027)
    try:
        completed = run_cli(cli_env(tmp_path), "gateway", "init", str(tmp_path / "out"))
    finally:
        os.umask(previous)
    assert completed.returncode == 0, completed.stderr
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o750
