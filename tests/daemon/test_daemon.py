"""The local daemon: one owner of a data dir's live state, started on demand, shared by
every client, replaced when it dies or is of another version (issue 21)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.api.test_execution import UNTIL_GIVEN_UP
from tests.cli import CTRL_C_TAKEN, ROOT, SCRIPT, cli_env, one_error_line, run_cli
from tests.cli_fork_server import run_cli_forked
from tests.conftest import require_engine, wake_ups
from tests.daemon import wait_for_a_run
from workbench.backends.daemon import probe, socket_path, stop_at
from workbench.backends.daemon.client import DaemonBackend
from workbench.backends.daemon.transport import STOP_REASON_HEADER, DaemonIdentity, SocketTransport
from workbench.backends.local import open_local_backend
from workbench.backends.owner import OWNER_FILE, OwnerInfo, StoreOwnedError, current_owner
from workbench.cli import common
from workbench.cli.errors import describe
from workbench.daemon.server import stop_reason
from workbench.protocol.errors import ValidationFailedError

pytestmark = [pytest.mark.slow, pytest.mark.daemon_command]  # it finds daemons by command


def status(env: dict[str, str]) -> dict[str, object]:
    completed = run_cli(env, "daemon", "status", "--json")
    assert completed.returncode == 0, completed.stderr
    answer: dict[str, object] = json.loads(completed.stdout)
    return answer


def daemon_pids(data: Path) -> list[int]:
    """Processes running `python -m workbench.daemon` for `data`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"workbench.daemon" in command and str(data).encode() in command:
                found.append(int(entry.name))
    return found


def test_status_start_logs_and_stop(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    data = tmp_path / "data"
    assert run_cli(env, "daemon", "status").stdout == f"no local daemon runs for {data}\n"
    ran = run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "1")  # starts it on demand
    assert ran.returncode == 0, ran.stderr
    shown = run_cli(env, "daemon", "status").stdout
    assert shown.startswith("local daemon: running\n")
    labels = ("pid", "uptime", "version", "data dir", "socket", "sessions", "requests", "memory")
    for label in (*labels, "log"):
        assert re.search(rf"^  {label} +\S", shown, re.MULTILINE), (label, shown)
    assert f"data dir   {data}\n" in shown and "sessions   1 live" in shown
    info = status(env)
    assert info["running"] is True and info["version"] == "0.1.0"
    runtime = Path(str(info["socket"])).parent
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat(str(info["socket"])).st_mode) == 0o600
    logs = run_cli(env, "daemon", "logs").stdout
    assert f"daemon (pid {info['pid']}) serving {data}" in logs
    stopped = run_cli(env, "daemon", "stop")
    assert stopped.stdout == f"stopped the local daemon (pid {info['pid']})\n"
    assert status(env) == {"running": False}
    assert current_owner(data) is None
    assert "stopped" in run_cli(env, "daemon", "logs", "-n", "1").stdout


def test_clients_starting_at_once_end_with_one_daemon(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    data = tmp_path / "data"
    clients = [
        subprocess.Popen(
            [str(SCRIPT), "run", "-s", f"box{index}", "-b", "PERL", "-c", str(index)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(6)
    ]
    for index, client in enumerate(clients):
        out, err = client.communicate(timeout=120)
        assert (client.returncode, out) == (0, f"{index}\n"), err
    assert len(daemon_pids(data)) == 1
    assert status(env)["pid"] == daemon_pids(data)[0]


STATE = [
    ("PYTHON", "x = 41", "x + 1", "import time\ntime.sleep(60)"),
    ("PERL", "our $x = 41", "$x + 1", "my $t = time; 1 while time - $t < 60"),
    (
        "JAVASCRIPT",
        "var x = 41",
        "x + 1",
        "const t = Date.now(); while (Date.now() - t < 60000) {}",
    ),
    ("RUBY", "$x = 41", "$x + 1", "sleep 60"),
]


@pytest.mark.parametrize(("binding", "define", "use", "busy"), STATE)
def test_a_killed_daemon_is_replaced_and_acknowledged_state_is_intact(
    tmp_path: Path, all_engines: None, binding: str, define: str, use: str, busy: str
) -> None:
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_RUBY_CONTEXTS="1")  # Ruby's are an extension
    defined = run_cli(env, "run", "-s", "k", "-b", binding, "-c", define)
    assert defined.returncode == 0, defined.stderr
    pid = int(str(status(env)["pid"]))
    running = subprocess.Popen(
        [str(SCRIPT), "run", "-s", "k", "-b", binding, "-c", busy],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_a_run(env)  # the run is under way
    os.kill(pid, signal.SIGKILL)
    _, err = running.communicate(timeout=60)
    assert running.returncode == 3, err
    assert "Traceback" not in err and err.startswith("error: the local daemon broke off")
    after = run_cli(env, "run", "-s", "k", "-b", binding, "--json", "-c", use)
    assert after.returncode == 0, after.stderr
    result = json.loads(after.stdout)
    assert result["results"] == [{"text": "42"}]
    assert result["workbench"]["boot"] == "restored"
    assert "started fresh" not in after.stderr
    assert status(env)["pid"] != pid


async def test_a_daemon_answer_that_is_not_http_is_a_broken_off_request_not_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket transport says CONNECTION_FAILED, caused by a ValueError, when the
    daemon's answer is not HTTP; the CLI took every SandboxError caused by a ValueError
    for an answer of the wrong shape and, the backend being local, reported the bare
    ValueError as a bug (exit 1)."""
    socket = tmp_path / "d.sock"

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"garbage\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(garbage, path=str(socket))
    backend = DaemonBackend(SocketTransport(socket, "the local daemon"), execution_timeout=None)
    monkeypatch.setattr(common, "open_backend", lambda *args, **kwargs: backend)
    try:
        with pytest.raises(Exception) as raised:
            await common.with_backend(
                "local", None, lambda backend: backend.sandbox("x").list_files("/workspace")
            )
    finally:
        server.close()
    message, code = describe(raised.value)
    assert code == 3, message
    assert message.startswith("the local daemon broke off"), message


def test_a_stale_socket_and_lock_are_replaced(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "1").returncode == 0
    info = status(env)
    os.kill(int(str(info["pid"])), signal.SIGKILL)
    time.sleep(0.5)
    stale = Path(str(info["socket"]))
    assert stale.exists() and (tmp_path / "data" / OWNER_FILE).exists()  # both left behind
    again = run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "2")
    assert (again.returncode, again.stdout) == (0, "2\n"), again.stderr
    assert status(env)["pid"] != info["pid"]


def test_a_socket_that_is_not_private_is_refused(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "1").returncode == 0
    socket_file = Path(str(status(env)["socket"]))
    os.chmod(socket_file, 0o666)
    try:
        refused = run_cli(env, "sandboxes", "list")
        assert refused.returncode == 3
        assert "is open to other users (mode 666): refusing it" in one_error_line(refused)
    finally:
        os.chmod(socket_file, 0o600)
    runtime = socket_file.parent
    os.chmod(runtime, 0o755)
    try:
        refused = run_cli(env, "sandboxes", "list")
        assert refused.returncode == 3
        assert f"{runtime} is open to other users" in one_error_line(refused)
    finally:
        os.chmod(runtime, 0o700)
    assert run_cli(env, "sandboxes", "list").returncode == 0
    planted = tmp_path / "planted"  # a link where the runtime dir should be: not followed
    planted.symlink_to(runtime)
    refused = run_cli({**env, "SANDBOX_WORKBENCH_RUNTIME_DIR": str(planted)}, "sandboxes", "list")
    assert refused.returncode == 3
    assert (
        f"{planted} is not a directory of this user: refusing it; set "
        "SANDBOX_WORKBENCH_RUNTIME_DIR to a private directory of yours"
    ) in one_error_line(refused)
    under_a_file = tmp_path / "planted-file" / "run"  # cannot be made: named, not the store
    under_a_file.parent.write_text("")
    for command in (("sandboxes", "list"), ("daemon", "stop"), ("daemon", "status")):
        refused = run_cli({**env, "SANDBOX_WORKBENCH_RUNTIME_DIR": str(under_a_file)}, *command)
        assert refused.returncode == 3, (command, refused.stderr)  # `daemon` ones: "a bug"
    assert one_error_line(refused) == (
        f"error: cannot make the runtime directory {under_a_file}: Not a directory; set "
        "SANDBOX_WORKBENCH_RUNTIME_DIR to a private directory of yours"
    )
    # `$XDG_RUNTIME_DIR` is the system's: one that does not exist is not made.
    with tempfile.TemporaryDirectory(prefix="sbw-") as short:  # a socket path fits under it
        gone = Path(short) / "gone" / "user"
        xdg_env = {k: v for k, v in env.items() if k != "SANDBOX_WORKBENCH_RUNTIME_DIR"}
        xdg_env["SANDBOX_WORKBENCH_DATA_DIR"] = str(tmp_path / "no-daemon-yet")
        refused = run_cli({**xdg_env, "XDG_RUNTIME_DIR": str(gone)}, "sandboxes", "list")
        assert refused.returncode == 3
        assert one_error_line(refused) == (
            f"error: cannot make the runtime directory {gone / 'sandbox-workbench'}: No such "
            "file or directory; set SANDBOX_WORKBENCH_RUNTIME_DIR to a private directory of yours"
        )
        assert not gone.parent.exists()


SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's may sit under a home only root can enter


@pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root")
@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no system Python")
def test_a_peer_of_another_user_gets_no_answer(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "1").returncode == 0
    socket_file = Path(str(status(env)["socket"]))
    opened = [socket_file.parent, socket_file.parent.parent]  # the runtime dir and the test's
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in opened}
    os.chmod(socket_file, 0o666)  # as if the mode checks were gone: the uid check holds
    for path in opened:
        os.chmod(path, 0o711)
    probe_code = textwrap.dedent(
        f"""\
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.connect({str(socket_file)!r})
        try:
            s.sendall(b"GET /v1/sandboxes HTTP/1.1\\r\\nhost: x\\r\\n\\r\\n")
            print(repr(s.recv(65536)))
        except (BrokenPipeError, ConnectionResetError):
            print(repr(b""))
        """
    )
    try:
        other = subprocess.run(
            [SYSTEM_PYTHON, "-c", probe_code],
            capture_output=True,
            text=True,
            timeout=30,
            user=65534,
            cwd="/",
        )
    except PermissionError:
        pytest.skip(f"{SYSTEM_PYTHON} cannot run as another user here")
    finally:
        os.chmod(socket_file, 0o600)
        for path, mode in modes.items():
            os.chmod(path, mode)
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == "b''"  # connected, then closed without an answer
    assert "refused a connection from another user" in run_cli(env, "daemon", "logs").stdout


IMPOSTOR = """
import os, socket, sys
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX)
server.bind(path)  # as root: the file is root's and 0600, as a daemon's would be
os.chmod(path, 0o600)
os.setuid(65534)  # but the process that answers is another user's
server.listen()
print("ready", flush=True)
while True:
    connection, _ = server.accept()
    connection.recv(65536)
    connection.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\n{}")
    connection.close()
"""


@pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root")
def test_a_client_refuses_a_daemon_of_another_user(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    path = socket_path(tmp_path / "data")
    impostor = subprocess.Popen(
        [sys.executable, "-c", IMPOSTOR, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "ready\n"
        refused = run_cli(env, "sandboxes", "list")
        assert refused.returncode == 3
        assert "is another user's: refusing it" in one_error_line(refused)
    finally:
        impostor.kill()
        impostor.wait()
        path.unlink()


OLD_DAEMON = """
import json, os, socket, sys
from workbench.backends.owner import OwnerInfo, OwnerLock
from pathlib import Path
data, path = Path(sys.argv[1]), sys.argv[2]
busy = int(sys.argv[3]) if len(sys.argv) > 3 else 0
lock = OwnerLock(data)
lock.acquire(OwnerInfo(os.getpid(), "daemon", "0.0.1", path))
server = socket.socket(socket.AF_UNIX)
server.bind(path)
os.chmod(path, 0o600)
server.listen()
print("ready", flush=True)
while True:
    connection, _ = server.accept()
    request = connection.recv(65536)
    if b"POST /v1/daemon/stop" in request:
        connection.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\n{}")
        connection.close()
        os.unlink(path)
        sys.exit(0)
    body = json.dumps({"pid": os.getpid(), "version": "0.0.1", "dataDir": str(data),
        "socket": path, "startedAt": 0, "liveSessions": 0, "memoryBytes": 0,
        "logFile": "", "idleSeconds": 900, "tcp": None, "executionsInFlight": busy}).encode()
    connection.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: %d\\r\\n\\r\\n%s" % (len(body), body))
    connection.close()
"""


def test_a_daemon_of_another_version_is_replaced(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    path = str(socket_path(data))
    old = subprocess.Popen(
        [sys.executable, "-c", OLD_DAEMON, str(data), path],
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert old.stdout is not None and old.stdout.readline() == "ready\n"
    ran = run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "6 * 7")
    assert (ran.returncode, ran.stdout) == (0, "42\n"), ran.stderr
    assert old.wait(timeout=30) == 0  # it was asked to stop, and it did
    assert f"note: replaced the local daemon of sandbox-workbench 0.0.1 (pid {old.pid})" in (
        ran.stderr
    )
    assert status(env)["version"] == "0.1.0"


def test_a_daemon_of_another_version_running_code_is_not_replaced(tmp_path: Path) -> None:
    """Replacing it would cancel another client's run with no word of why: the command
    is refused (exit 2), and the daemon keeps running."""
    env = cli_env(tmp_path)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    path = str(socket_path(data))
    old = subprocess.Popen(
        [sys.executable, "-c", OLD_DAEMON, str(data), path, "1"],
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert old.stdout is not None and old.stdout.readline() == "ready\n"
        refused = run_cli(env, "sandboxes", "list")
        assert refused.returncode == 2
        assert one_error_line(refused) == (
            f"error: the local daemon (pid {old.pid}) is of sandbox-workbench 0.0.1 and is "
            "running 1 execution for other clients; this command asks for version 0.1.0: "
            "try again when they end, or stop it with `sandbox-workbench daemon stop`"
        )
        assert old.poll() is None
    finally:
        old.kill()
        old.wait()


async def test_a_body_past_what_the_daemon_reads_is_refused_not_a_crash(
    tmp_path: Path, perl_engine: None
) -> None:
    """Past what the daemon reads (its cap and 4 MiB more), it answers 413 without reading
    and closes under the body: the client said the daemon "may have crashed"."""
    data = tmp_path / "data"
    backend = open_local_backend(data)
    try:
        sandbox = backend.sandbox("box")
        with pytest.raises(ValidationFailedError) as refused:
            await sandbox.interpreter.run_code("#" * 5_000_000, binding="PERL")
        assert (refused.value.http_status, refused.value.message) == (413, "Request too large")
        await sandbox.write_file("a.txt", "fits")  # the next request is served
    finally:
        await backend.aclose()
        stop_at(socket_path(data))


async def test_an_embedded_owner_and_the_daemon_never_share_a_store(
    tmp_path: Path, perl_engine: None
) -> None:
    data = tmp_path / "data"
    embedded = open_local_backend(data, embedded=True)
    try:
        with pytest.raises(StoreOwnedError) as second:
            open_local_backend(data, embedded=True)
        assert f"is in use by an embedded backend (pid {os.getpid()}" in str(second.value)
        env = cli_env(tmp_path)
        refused = run_cli(env, "sandboxes", "list")  # a daemon cannot take it either
        assert refused.returncode == 3
        assert "in use by an embedded backend" in one_error_line(refused)
    finally:
        await embedded.aclose()
    daemon = open_local_backend(data)  # now it can
    try:
        assert await daemon.list_sandboxes() == []
        with pytest.raises(StoreOwnedError) as owned:
            open_local_backend(data, embedded=True)
        assert "is in use by the local daemon (pid" in str(owned.value)
        no_daemon = run_cli(cli_env(tmp_path), "--no-daemon", "sandboxes", "list")
        assert no_daemon.returncode == 3
        assert "sandbox-workbench daemon stop" in one_error_line(no_daemon)
    finally:
        await daemon.aclose()


async def test_a_long_lived_client_outlives_its_daemon(tmp_path: Path, perl_engine: None) -> None:
    data = tmp_path / "data"
    backend = open_local_backend(data)  # as the TUI or `watch` holds it
    try:
        sandbox = backend.sandbox("kept")
        await sandbox.interpreter.run_code("our $kept = 41", binding="PERL")
        first = probe(socket_path(data))
        assert first is not None and backend.served_by == f"daemon pid {first.pid}"
        stop_at(socket_path(data))  # as an idle exit or `daemon stop` does
        result = await sandbox.interpreter.run_code("$kept + 1", binding="PERL")
        assert result.results[0].text == "42"  # a new daemon, from the snapshot
        second = probe(socket_path(data))
        assert second is not None and second.pid != first.pid
    finally:
        await backend.aclose()


@pytest.mark.parametrize("embedded", [False, True], ids=["daemon", "embedded"])
async def test_a_timeout_is_the_executions_own_deadline(
    tmp_path: Path, python_engine: None, embedded: bool
) -> None:
    backend = open_local_backend(tmp_path / "data", embedded=embedded)
    try:
        sandbox = backend.sandbox("deadline")
        await sandbox.interpreter.run_code("1", binding="PYTHON")
        started = time.monotonic()
        result = await sandbox.interpreter.run_code(
            "import time\ntime.sleep(60)", binding="PYTHON", timeout=2
        )
        assert result.error is not None
        assert result.error.message == "Execution timed out after 2 s"
        assert time.monotonic() - started < 10
        quick = await sandbox.interpreter.run_code("6 * 7", binding="PYTHON")
        assert quick.results[0].text == "42"
    finally:
        await backend.aclose()


@pytest.mark.parametrize("embedded", [False, True], ids=["daemon", "embedded"])
async def test_a_call_given_up_cancels_its_execution(
    tmp_path: Path, python_engine: None, embedded: bool
) -> None:
    backend = open_local_backend(tmp_path / "data", embedded=embedded)
    try:
        sandbox = backend.sandbox("given-up")
        await sandbox.interpreter.run_code("x = 1", binding="PYTHON")
        call = asyncio.create_task(
            sandbox.interpreter.run_code("import time\ntime.sleep(60)", binding="PYTHON")
        )
        await asyncio.sleep(1.5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        started = time.monotonic()
        after = await sandbox.interpreter.run_code("x + 41", binding="PYTHON")
        assert after.results[0].text == "42"  # not behind the abandoned minute
        assert time.monotonic() - started < 5
        history = await sandbox.interpreter.history(
            (await sandbox.interpreter.list_code_contexts())[0]
        )
        cancelled = history[-2].result
        assert cancelled.error is not None and cancelled.error.message == "Execution cancelled"
    finally:
        await backend.aclose()


def test_ctrl_c_in_run_cancels_the_execution(tmp_path: Path, python_engine: None) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "c", "-b", "PYTHON", "-c", "x = 1").returncode == 0
    running = subprocess.Popen(
        [
            *CTRL_C_TAKEN,
            str(SCRIPT),
            "run",
            "-s",
            "c",
            "-b",
            "PYTHON",
            "-c",
            "import time\ntime.sleep(60)",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_a_run(env)
    running.send_signal(signal.SIGINT)
    running.communicate(timeout=30)
    assert running.returncode == 130
    started = time.monotonic()
    after = run_cli(env, "run", "-s", "c", "-b", "PYTHON", "-c", "x + 41")
    assert (after.returncode, after.stdout) == (0, "42\n")
    assert time.monotonic() - started < 10


def test_a_stateless_run_given_up_is_cancelled(tmp_path: Path, python_engine: None) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "daemon", "start").returncode == 0
    running = subprocess.Popen(
        [
            *CTRL_C_TAKEN,
            str(SCRIPT),
            "run",
            "-b",
            "PYTHON",
            "--timeout",
            "600",
            "-c",
            "import time\ntime.sleep(600)",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_a_run(env)
    running.send_signal(signal.SIGINT)
    running.communicate(timeout=30)
    assert running.returncode == 130
    socket = socket_path(tmp_path / "data")
    deadline = time.monotonic() + 10
    while (info := probe(socket)) is not None and info.executions_in_flight > 0:
        assert time.monotonic() < deadline, "the abandoned run still holds the daemon"
        time.sleep(0.05)


def test_ctrl_c_stops_a_client_waiting_for_a_daemon_that_does_not_answer(
    tmp_path: Path, python_engine: None
) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "daemon", "start").returncode == 0
    pid = int(str(status(env)["pid"]))
    os.kill(pid, signal.SIGSTOP)  # the client's probe waits, then it waits for a start
    try:
        running = subprocess.Popen(
            [*CTRL_C_TAKEN, str(SCRIPT), "run", "-b", "PYTHON", "-c", "1"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)  # past its imports: in the probe, which blocks the event loop
        started = time.monotonic()
        running.send_signal(signal.SIGINT)
        running.communicate(timeout=30)
        assert running.returncode == 130
        assert time.monotonic() - started < 10
    finally:
        os.kill(pid, signal.SIGCONT)


def test_the_daemon_exits_when_idle_and_keeps_every_state(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_DAEMON_IDLE_S="1")
    assert run_cli(env, "run", "-s", "idle", "-b", "PERL", "-c", "our $n = 41").returncode == 0
    # From /proc: asking the daemon would keep it busy, and on a loaded machine it may
    # already be gone by the time `daemon status` asks for its pid.
    deadline = time.monotonic() + 20
    while daemon_pids(tmp_path / "data"):
        assert time.monotonic() < deadline, "the daemon did not exit when idle"
        time.sleep(0.2)
    assert "stopping: no client for" in run_cli(env, "daemon", "logs").stdout
    again = run_cli(env, "run", "-s", "idle", "-b", "PERL", "-c", "$n + 1")
    assert (again.returncode, again.stdout) == (0, "42\n"), again.stderr


def test_serve_is_the_daemon_or_a_front_of_it(tmp_path: Path, perl_engine: None) -> None:
    from tests.serve_process import serve_process

    env = cli_env(tmp_path)
    data = tmp_path / "data"
    with serve_process(data, env=env) as served:  # no daemon yet: serve is the owner
        info = probe(socket_path(data))
        assert info is not None and info.pid == served.process.pid and info.tcp is not None
        through_socket = run_cli(env, "run", "-s", "shared", "-b", "PERL", "-c", "our $v = 1")
        assert through_socket.returncode == 0, through_socket.stderr
        assert _remote_run(served.url, served.token, "$v + 1") == "2"
        _assert_no_daemon_routes(served.url, served.token)
        # `daemon stop` ends serve too: both say so (QA: it ended silently).
        stopped = run_cli(env, "daemon", "stop")
        assert stopped.stdout == f"stopped the local daemon (pid {info.pid})\n"
        assert f"the daemon was `serve` on {info.tcp}: its remote clients" in stopped.stderr
        assert served.process.stdout is not None
        assert "sandbox-workbench serve: stopped (`daemon stop`)" in served.process.stdout.read()
    assert probe(socket_path(data)) is None
    assert run_cli(env, "run", "-s", "shared", "-b", "PERL", "-c", "$v").stdout == "1\n"
    daemon = int(str(status(env)["pid"]))
    with serve_process(data, env=env) as front:  # a daemon runs: serve is a front of it
        assert _remote_run(front.url, front.token, "$v + 10") == "11"
        _assert_no_daemon_routes(front.url, front.token)
        assert probe(socket_path(data)) is not None
        assert int(str(status(env)["pid"])) == daemon
    assert int(str(status(env)["pid"])) == daemon  # the daemon outlives its front


def _remote_run(url: str, token: str, code: str) -> str:
    import httpx

    answer = httpx.post(
        f"{url}/v1/sandboxes/shared/execute",
        json={"code": code, "binding": "PERL"},
        headers={"authorization": f"Bearer {token}"},
        timeout=60,
    ).json()
    return str(answer["results"][0]["text"])


def _assert_no_daemon_routes(url: str, token: str) -> None:
    """The daemon's own routes are not for TCP clients, token or not."""
    import httpx

    headers = {"authorization": f"Bearer {token}"}
    for method, path in (
        ("GET", "/v1/daemon"),
        ("POST", "/v1/daemon/stop"),
        ("GET", "/v1/engines"),
        ("GET", "/v1/daemon?x=1"),
    ):
        answer = httpx.request(method, f"{url}{path}", headers=headers, timeout=30)
        assert answer.status_code == 404, (method, path, answer.text)


def test_stopping_cancels_runs_and_the_next_command_starts_a_new_daemon(
    tmp_path: Path, python_engine: None
) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "s", "-b", "PYTHON", "-c", "x = 41").returncode == 0
    pid = int(str(status(env)["pid"]))
    long_run = subprocess.Popen(
        [str(SCRIPT), "run", "-s", "s", "-b", "PYTHON", "--timeout", "600", "--json", "-c",
         "import time\ntime.sleep(600)"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_a_run(env)
    queued = subprocess.Popen(
        [str(SCRIPT), "run", "-s", "s", "-b", "PYTHON", "-c", "x = 99"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_a_run(env, 2)  # waiting for its turn behind the long run
    time.sleep(1)  # told that it waits (after half a second): its answer streams
    started = time.monotonic()
    stopping = subprocess.Popen(
        [str(SCRIPT), "daemon", "stop"], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    socket = socket_path(Path(env["SANDBOX_WORKBENCH_DATA_DIR"]))
    deadline = time.monotonic() + 30
    while socket.exists() and time.monotonic() < deadline:  # it goes first when stopping
        time.sleep(0.02)
    after = run_cli(env, "run", "-s", "s", "-b", "PYTHON", "-c", "x + 1")
    assert (after.returncode, after.stdout) == (0, "42\n"), after.stderr
    assert stopping.communicate(timeout=60)[0] == f"stopped the local daemon (pid {pid})\n"
    out, _ = long_run.communicate(timeout=60)
    message = json.loads(out)["error"]["message"]  # why, not a bare "Execution cancelled"
    assert message == "Execution cancelled: the local daemon stopped (`daemon stop`)"
    # The run queued behind it is not carried out (it ran as the daemon shut down, or one
    # longer died at its grace with an HTTP 500): x stayed 41 above.
    _, queued_error = queued.communicate(timeout=60)
    assert queued.returncode == 1
    waited, queued_error = queued_error.split("\n", 1)  # the stream began with the wait
    assert waited.startswith("note: sandbox s is busy with another client's run")
    assert queued_error.startswith(
        "error: Not carried out: the local daemon stopped (`daemon stop`) before this "
        "request's turn"
    ), queued_error
    assert time.monotonic() - started < 30  # not the run's 600 s
    assert int(str(status(env)["pid"])) != pid


def test_a_run_in_a_context_named_whole_keeps_its_place_in_the_queue(
    tmp_path: Path, all_engines: None
) -> None:
    """`run --context ID` with a whole id and every engine ready sends its run alone: a
    listing first (to find the id or the engine's language) waited its turn too, and a
    command of another client given after it went before its run."""
    env = cli_env(tmp_path)
    try:
        created = run_cli(env, "contexts", "create", "-s", "s", "-b", "PERL")
        context = created.stdout.strip()
        assert created.returncode == 0 and len(context) == 36, created.stderr
        # Busy until it is given up, once both runs wait behind it (a run of two seconds
        # ended before a loaded machine had started the next client: a flake).
        busy = run_in_context(env, context, UNTIL_GIVEN_UP)
        wait_for_a_run(env)
        mine = run_in_context(env, context, 'our $step = "mine"')
        wait_for_a_run(env, 2)  # its run is in the queue, behind the busy one
        later = run_in_context(env, context, '"$step, later"')
        wait_for_a_run(env, 3)
        busy.send_signal(signal.SIGINT)
        assert busy.communicate(timeout=60)[0] == "started\n"
        assert later.communicate(timeout=60)[0] == "mine, later\n"
        assert mine.communicate(timeout=60)[0] == "mine\n"
    finally:
        run_cli(env, "daemon", "stop")


def run_in_context(env: dict[str, str], context: str, code: str) -> subprocess.Popen[str]:
    """`run` of `code` in sandbox s's `context`, as a client that Ctrl-C stops."""
    return subprocess.Popen(
        [*CTRL_C_TAKEN, str(SCRIPT), "run", "-s", "s", "--context", context, "-c", code],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_relative_data_dir_names_one_store_wherever_clients_run(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path)
    del env["SANDBOX_WORKBENCH_DATA_DIR"]
    (tmp_path / "elsewhere").mkdir()
    here = run_cli_in(tmp_path, env, "--data-dir", "store", "run", "-s", "b", "-b", "PERL",
                      "-c", "our $v = 7")  # fmt: skip
    assert here.returncode == 0, here.stderr
    info = json.loads(
        run_cli_in(tmp_path / "elsewhere", env, "--data-dir", "../store", "daemon", "status",
                   "--json").stdout
    )  # fmt: skip
    assert info["data_dir"] == str(tmp_path / "store")
    assert os.readlink(f"/proc/{info['pid']}/cwd") == "/"  # holds no client's directory busy
    again = run_cli_in(tmp_path / "elsewhere", env, "--data-dir", "../store", "run", "-s", "b",
                       "-b", "PERL", "-c", "$v")  # fmt: skip
    assert again.stdout == "7\n", again.stderr


def run_cli_in(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_forked(env, *args, cwd=cwd)


def test_a_daemon_whose_socket_was_removed_can_still_be_stopped(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "s", "-b", "PERL", "-c", "our $kept = 5").returncode == 0
    info = status(env)
    Path(str(info["socket"])).unlink()  # as a cleaner of the runtime dir would
    stopped = run_cli(env, "daemon", "stop")
    assert stopped.stdout == f"stopped the local daemon (pid {info['pid']})\n", stopped.stderr
    after = run_cli(env, "run", "-s", "s", "-b", "PERL", "-c", "$kept")
    assert (after.returncode, after.stdout) == (0, "5\n"), after.stderr


async def test_a_reconnect_given_up_stops_waiting_for_a_daemon_start(tmp_path: Path) -> None:
    """A long-lived client (the TUI, `watch`) whose daemon is gone starts one in a thread;
    given up (the app quits), that thread stops polling at once instead of holding the
    process for up to a minute."""
    from workbench.backends.daemon.location import spawn_lock_path
    from workbench.backends.daemon.transport import SocketTransport
    from workbench.paths import private_data_dir

    data = private_data_dir(tmp_path / "data").absolute()
    lock = os.open(spawn_lock_path(data), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another client is starting the daemon
        transport = SocketTransport(socket_path(data), "test", data_dir=data)
        request = asyncio.ensure_future(transport.request("GET", "/v1/health"))
        await asyncio.sleep(0.5)  # in `ensure_daemon`, waiting for that client
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request
        started = time.monotonic()
        await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 30)
        assert time.monotonic() - started < 2
    finally:
        os.close(lock)
    assert not daemon_pids(data)


WHOLE_NUMBER = "must be a whole number from 1 to 2,147,483,647"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("SANDBOX_WORKBENCH_DAEMON_IDLE_S", "abc", "must be a number of seconds (0 or more)"),
        ("SANDBOX_WORKBENCH_MAX_RESIDENT", "0", WHOLE_NUMBER),
        ("SANDBOX_WORKBENCH_HISTORY_LIMIT", "-3", WHOLE_NUMBER),
        ("SANDBOX_WORKBENCH_MEMORY_BUDGET_MIB", "1.5", WHOLE_NUMBER),
        # Past SQLite's integers: the run failed with HTTP 500 and its state was lost.
        ("SANDBOX_WORKBENCH_HISTORY_LIMIT", "99999999999999999999999", WHOLE_NUMBER),
        ("SANDBOX_WORKBENCH_MAX_RESIDENT", "2147483648", WHOLE_NUMBER),
    ],
)
def test_a_bad_daemon_setting_is_a_usage_error_before_any_daemon_starts(
    tmp_path: Path, variable: str, value: str, expected: str
) -> None:
    """The daemon reads these when it starts, where a bad value was only a log line (or
    silently the default): the command that would start it refuses it instead."""
    env = cli_env(tmp_path)
    refused = run_cli({**env, variable: value}, "sandboxes", "list")
    assert refused.returncode == 2
    assert one_error_line(refused) == f"error: {variable} {expected}, not {value!r}"
    assert "no local daemon runs" in run_cli(env, "daemon", "status").stdout


def test_a_file_where_the_daemon_wants_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    """It was "the daemon exited at start", exit 3, or "Not a directory", exit 1, with a
    daemon left running."""
    env = cli_env(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for variable in ("SANDBOX_WORKBENCH_CACHE_DIR", "SANDBOX_WORKBENCH_STATE_DIR"):
        refused = run_cli({**env, variable: str(a_file)}, "sandboxes", "list")
        assert refused.returncode == 2, refused.stderr
        assert one_error_line(refused) == (
            f"error: {variable} must name a directory, not the file {a_file}"
        )
    assert "no local daemon runs" in run_cli(env, "daemon", "status").stdout


def _tree_kib(pid: int, name: str, key: str) -> int:
    """`key` of `/proc/P/NAME` summed over `pid` and every process below it."""
    members, total = [pid], 0
    while members:
        member = members.pop()
        proc = Path(f"/proc/{member}")
        for task in (proc / "task").iterdir():
            members += [int(child) for child in (task / "children").read_text().split()]
        for line in (proc / name).read_text().splitlines():
            if line.startswith(key):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux PSS")
def test_daemon_status_memory_counts_shared_pages_once(tmp_path: Path) -> None:
    """Engine processes share their image's pages (forked from one server): the memory
    shown is their PSS, not their RSS summed (which counted those pages once in each)."""
    require_engine("python")
    env = cli_env(tmp_path)
    try:
        for number in range(3):
            ran = run_cli(env, "run", "-s", f"box{number}", "-l", "python", "-c", "v = 1")
            assert ran.returncode == 0, ran.stderr
        shown = status(env)
        pid = int(str(shown["pid"]))
        pss, rss = _tree_kib(pid, "smaps_rollup", "Pss:"), _tree_kib(pid, "status", "VmRSS:")
        assert rss > 1.5 * pss  # what summing RSS overstated
        assert 0.75 * pss < int(str(shown["memory_bytes"])) / 1024 < 1.25 * pss
        # A client connecting does not ask for it: it costs the daemon a read per process.
        socket = socket_path(Path(env["SANDBOX_WORKBENCH_DATA_DIR"]))
        brief, full = probe(socket), probe(socket, memory=True)
        assert brief is not None and brief.pid == pid and brief.memory_bytes is None
        assert full is not None and full.memory_bytes is not None and full.memory_bytes > 0
    finally:
        run_cli(env, "daemon", "stop")


def test_status_from_another_runtime_dir_names_the_daemon_that_runs(
    tmp_path: Path, perl_engine: None
) -> None:
    """It said "no local daemon runs" for a daemon that runs, reached through another
    runtime dir's socket."""
    env = cli_env(tmp_path)
    try:
        assert run_cli(env, "run", "-s", "box", "-b", "PERL", "-c", "1").returncode == 0
        shown = status(env)
        with tempfile.TemporaryDirectory(prefix="sbw-") as other:
            elsewhere = run_cli({**env, "SANDBOX_WORKBENCH_RUNTIME_DIR": other}, "daemon", "status")
        assert elsewhere.returncode == 0
        assert elsewhere.stdout == (
            f"the local daemon of {shown['data_dir']} (pid {shown['pid']}) runs, listening on "
            f"{shown['socket']}: another runtime dir than this shell's ($XDG_RUNTIME_DIR or "
            "$SANDBOX_WORKBENCH_RUNTIME_DIR); use the same one to reach it\n"
        )
    finally:
        run_cli(env, "daemon", "stop")


def test_the_daemon_s_own_routes_name_their_method_on_a_wrong_one(
    tmp_path: Path,
) -> None:
    """`DELETE /v1/daemon` on the socket: 405 with `Allow: GET` (it was the gateway's 404),
    and the daemon still runs."""
    import socket as unix

    env = cli_env(tmp_path)
    assert run_cli(env, "sandboxes", "list").returncode == 0  # starts the daemon
    path = socket_path(Path(env["SANDBOX_WORKBENCH_DATA_DIR"]))
    try:
        for method, route, allowed in (
            ("DELETE", "/v1/daemon", "GET"),
            ("GET", "/v1/daemon/stop", "POST"),
            ("POST", "/v1/engines", "GET"),
        ):
            with unix.socket(unix.AF_UNIX, unix.SOCK_STREAM) as connection:
                connection.settimeout(30)
                connection.connect(str(path))
                connection.sendall(
                    f"{method} {route} HTTP/1.1\r\nhost: daemon\r\ncontent-length: 0\r\n"
                    "connection: close\r\n\r\n".encode()
                )
                answer = b""
                while chunk := connection.recv(65536):
                    answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                name.lower(): value
                for name, _, value in (line.partition(": ") for line in lines[1:])
            }
            assert lines[0].split()[1] == "405", answer
            assert headers["allow"] == allowed
            assert json.loads(body)["message"] == "Method not allowed"
        assert status(env)["running"] is True
    finally:
        assert run_cli(env, "daemon", "stop").returncode == 0


def _process_tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat_line = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat_line.rsplit(")", 1)[1].split()[1])
    tree, index = [pid], 0
    while index < len(tree):
        tree += [child for child, parent in parents.items() if parent == tree[index]]
        index += 1
    return tree


def test_an_idle_daemon_and_its_engine_processes_sleep(tmp_path: Path, perl_engine: None) -> None:
    """A workbench kept open all day costs next to no CPU between runs: the daemon's
    servers tick once a second (uvicorn's loop ticks ten times), and no thread of an engine
    process wakes up while it waits (its deadline backstop polled twenty times a second)."""
    env = cli_env(tmp_path)
    for box in ("one", "two", "three"):
        ran = run_cli(env, "run", "-s", box, "-b", "PERL", "-c", "1")
        assert ran.returncode == 0, ran.stderr
    (daemon,) = daemon_pids(tmp_path / "data")
    tree = _process_tree(daemon)
    assert len(tree) >= 5  # the fork server, three engine processes and a spare
    time.sleep(0.5)
    before = wake_ups(tree)
    time.sleep(3.0)
    assert wake_ups(tree) - before <= 12  # was over 250: 10 a second plus 20 per process
    stopped = run_cli(env, "daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr


def test_serve_in_front_of_a_daemon_sleeps_while_idle(tmp_path: Path, perl_engine: None) -> None:
    """`serve` in front of a daemon ticks once a second, as the daemon does, and a
    SIGTERM still ends it at once."""
    from tests.serve_process import serve_process

    env = cli_env(tmp_path)
    ran = run_cli(env, "run", "-s", "shared", "-b", "PERL", "-c", "1")  # a daemon runs
    assert ran.returncode == 0, ran.stderr
    with serve_process(tmp_path / "data", env=env) as front:
        assert _remote_run(front.url, front.token, "1 + 1") == "2"
        time.sleep(0.5)
        before = wake_ups([front.process.pid])
        time.sleep(3.0)
        assert wake_ups([front.process.pid]) - before <= 8  # uvicorn's own loop: over 30
        front.process.terminate()
        started = time.monotonic()
        # uvicorn shuts down gracefully, then ends by the signal it took, as it would have
        assert front.process.wait(timeout=20) == -signal.SIGTERM
        assert time.monotonic() - started < 5


def test_identities_nested_past_python_s_parser_are_unreadable_not_a_crash(
    tmp_path: Path,
) -> None:
    """The owner file and the daemon's identity header are JSON another process wrote:
    nested 2,000 deep (4 KiB), Python's parser raised RecursionError through both."""
    deep = "[" * 2048 + "]" * 2048
    assert DaemonIdentity.from_header(deep) is None
    owner = tmp_path / OWNER_FILE
    owner.write_text(deep)
    with owner.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a live owner holds it
        assert current_owner(tmp_path) == OwnerInfo(0, "unknown", "")


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, nearest first."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop(0)
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in map(int, children.read_text().split()):
                    found.append(child)
                    pending.append(child)
    return found


def test_a_daemon_stops_even_with_an_engine_process_that_stopped_reading(
    tmp_path: Path, python_engine: None
) -> None:
    """SIGSTOP stands in for a wedged engine process (a deadlock, a stuck host call): the
    run's thread blocks writing the context's snapshot into its pipe while the session
    is opened. The daemon said "stopped" and never exited, as the interpreter's exit
    waits for that thread before the hook that kills engine processes runs. Two things
    end it now, either enough: the client giving up kills the process being opened
    (`tests/security/test_engine_isolation.py` has the run's side), and the stop kills
    every engine process once the sessions are closed."""
    env = cli_env(tmp_path)
    context_id = run_cli(env, "contexts", "create", "-s", "wedged", "-l", "python").stdout.strip()
    where = ("-s", "wedged", "--context", context_id)
    # A snapshot larger than a pipe's buffer, restored by the next daemon.
    made = run_cli(env, "run", *where, "-c", "blob = bytes(range(256)) * 8000; n = 1")
    assert made.returncode == 0, made.stderr
    assert run_cli(env, "daemon", "stop").returncode == 0
    assert run_cli(env, "run", "-l", "python", "-c", "1").returncode == 0  # a spare waits
    info = probe(socket_path(tmp_path / "data"))
    assert info is not None
    stopped = descendants(info.pid)[1:]  # the fork server's children: the engine processes
    assert stopped
    try:
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        client = subprocess.Popen(
            [str(SCRIPT), "run", *where, "-c", "n"], env=env, stderr=subprocess.DEVNULL
        )
        try:
            wait_for_a_run(env)
            time.sleep(0.5)  # its thread is in the write by now
        finally:
            client.kill()
            client.wait()
        assert run_cli(env, "daemon", "stop", timeout=60).returncode == 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and Path(f"/proc/{info.pid}").exists():
            time.sleep(0.05)
        gone = not Path(f"/proc/{info.pid}").exists() or (
            Path(f"/proc/{info.pid}/stat").read_text().split()[2] == "Z"
        )
        assert gone, "the daemon is still alive after its stop"
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_stop_reason_is_logged_only_as_short_printable_text() -> None:
    """A client's reason for stopping the daemon goes into its log and into cancelled runs'
    errors: anything but printable ASCII up to 200 characters is `daemon stop`."""
    assert stop_reason({STOP_REASON_HEADER: " replaced by a client "}) == "replaced by a client"
    assert stop_reason({}) == "`daemon stop`"
    for hostile in ["a\nb", "\x1b[2Jcleared", "é", "x" * 201, "   "]:
        assert stop_reason({STOP_REASON_HEADER: hostile}) == "`daemon stop`", hostile
