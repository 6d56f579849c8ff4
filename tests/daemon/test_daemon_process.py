"""The process a client starts the local daemon in, as `python -m workbench.daemon` and as
the tests fork it (`tests.cli_fork_server`): both must set it up alike, or the tests that
use the fork would stop telling how the real command behaves."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli import cli_env
from tests.cli_fork_server import DAEMON_COMMAND_ENV, FORK_SERVER, run_cli_forked, umask_of
from workbench.backends.daemon import log_path

PROFILE_FIELDS = ("SigBlk", "SigIgn", "SigCgt", "NoNewPrivs", "Seccomp", "Umask")


def _check_the_daemon_process(tmp_path: Path, **extra: str) -> tuple[int, dict[str, str]]:
    """Start a daemon from a CLI command run in `tmp_path` and check how its process is
    set up; return its pid and what else of its set-up the kernel shows."""
    tmp_path.mkdir()
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_DATA_DIR="data", **extra)  # relative to its cwd
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
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    profile = {name: fields[name].strip() for name in PROFILE_FIELDS}
    profile["limits"] = Path(f"/proc/{pid}/limits").read_text()
    return pid, profile


def test_a_daemon_forked_for_a_test_is_set_up_as_the_command_sets_up_its_own(
    tmp_path: Path, perl_engine: None
) -> None:
    forked, forked_profile = _check_the_daemon_process(tmp_path / "forked")
    command, command_profile = _check_the_daemon_process(
        tmp_path / "command", **{DAEMON_COMMAND_ENV: "1"}
    )
    assert b"workbench.daemon" in Path(f"/proc/{command}/cmdline").read_bytes().split(b"\0")
    assert _parent(forked) == FORK_SERVER.pid  # and not `python -m workbench.daemon`
    assert forked_profile == command_profile


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
