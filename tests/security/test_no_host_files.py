"""A guest's files never touch the host: however a run ends, none of them is left anywhere
but where the sandbox commits them (issues 20 and 21).

The guest writes files whose content appears nowhere in its code, then sleeps; the
`run` command, or the daemon that runs it, is stopped with a signal while it waits.
Afterwards no file anywhere below the test's directories (data, temp) or in `/dev/shm`
holds that content, the temp dir is empty, and the sandbox holds only what earlier runs
committed. A client that goes away takes its run with it; a daemon that goes away takes
its engine processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli import ROOT, SCRIPT, cli_env, run_cli

CONTENT = "sbwmarker" + str(12345 * 6789)
"""What the guest writes: built at run time, so no stored code or history holds it."""
GUEST = (
    "import time\n"
    "content = ''.join(['sbw', 'marker', str(12345 * 6789)]) * 100\n"
    "for i in range(20):\n"
    "    open(f'/workspace/m{i}.txt', 'w').write(content)\n"
    "held = open('/workspace/held.txt', 'w')\n"
    "held.write(content)\n"
    "time.sleep(120)"
)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _maps_an_engine(pid: int) -> bool:
    """Whether the process has a compiled engine mapped (a spare and the fork server have
    none)."""
    return ".cwasm" in Path(f"/proc/{pid}/maps").read_text()


def _wait_until_the_guest_sleeps(
    cli: subprocess.Popen[bytes], env: dict[str, str], daemon: int
) -> list[int]:
    """The daemon's engine processes and their fork server once the daemon runs the
    guest and the engine process running it has stopped using CPU (before the run starts,
    the context's process is idle too)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert cli.poll() is None, cli.stderr.read() if cli.stderr else ""
        status = json.loads(run_cli(env, "daemon", "status", "--json").stdout)
        if status.get("executions_in_flight") != 1:
            time.sleep(0.1)
            continue
        try:
            engines = [
                pid
                for child in _children(daemon)
                for pid in (child, *_children(child))
                if b"engines.process.child" in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]
            running = [pid for pid in engines if _maps_an_engine(pid)]
            if running:
                before = _cpu_ticks(running[0])
                time.sleep(0.5)
                if _cpu_ticks(running[0]) == before:
                    return engines
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("the guest never started sleeping")


def _holding(root: Path) -> list[str]:
    """Files below `root` that hold the guest's content."""
    marker = CONTENT.encode()
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and marker in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return found


def _daemon_pid(env: dict[str, str]) -> int:
    status = json.loads(run_cli(env, "daemon", "status", "--json").stdout)
    assert status["running"], status
    return int(status["pid"])


def _start_sleeping_guest(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], list[int]]:
    cli = subprocess.Popen(
        [str(SCRIPT), "run", "-s", "kept", "-b", "PYTHON", "-c", GUEST],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return cli, _wait_until_the_guest_sleeps(cli, env, _daemon_pid(env))


def _no_guest_file_on_the_host(tmp_path: Path, temp: Path, shm_before: set[str]) -> None:
    assert _holding(tmp_path) == []
    assert list(temp.iterdir()) == []  # nothing at all in the temp dir: no scratch folders
    shm = Path("/dev/shm")
    if shm.is_dir():
        for name in set(os.listdir(shm)) - shm_before:
            entry = shm / name
            assert not (entry.is_file() and CONTENT.encode() in entry.read_bytes())
            assert not (entry.is_dir() and _holding(entry))


def _only_what_was_committed(env: dict[str, str]) -> None:
    listed = run_cli(env, "files", "ls", "kept", "/workspace")
    assert listed.returncode == 0, listed.stderr
    assert "seed.txt" in listed.stdout and "m0.txt" not in listed.stdout


def _setup(tmp_path: Path) -> tuple[dict[str, str], Path, set[str]]:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = cli_env(tmp_path, TMPDIR=str(temp))
    seeded = run_cli(
        env, "run", "-s", "kept", "-b", "PYTHON", "-c", "open('seed.txt', 'w').write('s')"
    )
    assert seeded.returncode == 0, seeded.stderr
    shm = Path("/dev/shm")
    return env, temp, set(os.listdir(shm)) if shm.is_dir() else set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"])
def test_a_client_stopped_mid_run_leaves_no_file_and_cancels_the_run(
    tmp_path: Path, stop: str, python_engine: None
) -> None:
    env, temp, shm_before = _setup(tmp_path)
    cli, _ = _start_sleeping_guest(env)
    try:
        cli.send_signal(getattr(signal, stop))
        cli.wait(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    # The daemon gave the run up with its client: the context answers at once, not after
    # the guest's two minutes of sleep.
    started = time.monotonic()
    again = run_cli(env, "run", "-s", "kept", "-b", "PYTHON", "-c", "6 * 7")
    assert (again.returncode, again.stdout) == (0, "42\n"), again.stderr
    assert time.monotonic() - started < 20
    _no_guest_file_on_the_host(tmp_path, temp, shm_before)
    _only_what_was_committed(env)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_daemon_stopped_mid_run_leaves_no_file_and_no_process(
    tmp_path: Path, stop: str, python_engine: None
) -> None:
    env, temp, shm_before = _setup(tmp_path)
    cli, engines = _start_sleeping_guest(env)
    daemon = _daemon_pid(env)
    try:
        os.kill(daemon, getattr(signal, stop))
        _, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode in (1, 3)  # the run's error (SIGTERM: cancelled) or no daemon
    assert b"Traceback" not in stderr
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in [daemon, *engines]):
        assert time.monotonic() < deadline, "a process outlived the daemon"
        time.sleep(0.1)
    _no_guest_file_on_the_host(tmp_path, temp, shm_before)
    _only_what_was_committed(env)  # a new daemon answers
