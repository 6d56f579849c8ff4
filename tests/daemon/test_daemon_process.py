"""The process a client starts the local daemon in, as `python -m workbench.daemon` and as
the tests fork it (`tests.cli_fork_server`): both must set it up alike, or the tests that
use the fork would stop telling how the real command behaves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli import cli_env
from tests.cli_fork_server import FORK_SERVER, run_cli_forked, umask_of
from workbench.backends.daemon import log_path


def _check_the_daemon_process(tmp_path: Path) -> tuple[int, bytes]:
    """Start a daemon from a CLI command run in `tmp_path` and check how its process is
    set up; return its pid and command line."""
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_DATA_DIR="data")  # relative to its cwd
    completed = run_cli_forked(
        env, "--no-file-api", "run", "-s", "box", "-b", "PERL", "-c", "1", cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stderr
    status = run_cli_forked(env, "daemon", "status", "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    status_answer = json.loads(status.stdout)
    pid = status_answer["pid"]
    assert os.getsid(pid) == pid  # a session of its own: the terminal's Ctrl+C is not its
    assert os.readlink(f"/proc/{pid}/cwd") == "/"
    assert os.readlink(f"/proc/{pid}/fd/0") == os.readlink(f"/proc/{pid}/fd/1") == os.devnull
    assert os.readlink(f"/proc/{pid}/fd/2") == str(log_path(tmp_path / "data"))  # its own
    assert status_answer["data_dir"] == str(tmp_path / "data")  # made absolute
    assert status_answer["settings"]["file_api"] is False  # as the client resolved it
    assert umask_of(pid) == umask_of()
    return pid, Path(f"/proc/{pid}/cmdline").read_bytes()


@pytest.mark.daemon_command
def test_the_daemon_command_runs_detached_in_root_with_the_client_s_settings(
    tmp_path: Path, perl_engine: None
) -> None:
    _, command = _check_the_daemon_process(tmp_path)
    assert b"workbench.daemon" in command.split(b"\0")


def test_a_daemon_forked_for_a_test_is_set_up_as_the_command_sets_up_its_own(
    tmp_path: Path, perl_engine: None
) -> None:
    pid, command = _check_the_daemon_process(tmp_path)
    assert b"workbench.daemon" not in command.split(b"\0")
    assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(
        FORK_SERVER.pid
    )  # the fork server's child
