"""CLI commands for the tests in processes forked from one that has imported the CLI.

A test's CLI command spent about 0.17 s of CPU starting Python and importing the CLI
before doing anything, and the suite runs some 700 of them. A pytest worker instead
starts this module once as a script; it imports the CLI and every command's module, then
forks a process per command. That process is a real one of its own, as the console
script's: it gets the test's stdin, stdout and stderr as descriptors (and no other), the
test's environment, working directory, import path, umask and resource limits, and
arguments, runs `workbench.cli.main.main`, and exits through the interpreter's own
shutdown, with the status the test sees. The imports are shared, and the CLI reads its
settings at run time, never at import; what the interpreter itself reads at start-up
(other `PYTHON*` variables, the locale) is the worker's at the start of its session.

Tests that need the console script itself (packaging, signals, a process to stop) run it
with `subprocess`, as before.

The server forks the local daemons the tests start too, for the same reason (0.2 s of
CPU importing it, some 110 times a run): a test's process and its CLI commands start a
daemon through `workbench.backends.daemon.client._launch`, which the tests replace with
`start_daemon`. The forked daemon is set up as `_launch` sets up its own (a session of
its own, `/` as its working directory, the client's environment, no stdin or output) and
runs `python -m workbench.daemon`'s `main`. Tests marked `daemon_command`, which look
for the daemon by its command line, keep the real command.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import locale
import os
import resource
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve()
SCRIPT = Path(sys.executable).parent / "sandbox-workbench"
"""The console script `pip install` made for the project."""
MODULE_MAIN = _HERE.parents[1] / "workbench" / "__main__.py"
"""`python -m workbench`'s file (click names the program after it)."""
DAEMON_MAIN = _HERE.parents[1] / "workbench" / "daemon" / "__main__.py"
"""`python -m workbench.daemon`'s file."""
DAEMON_COMMAND_ENV = "SANDBOX_WORKBENCH_TESTS_DAEMON_COMMAND"
"""Set (by the `daemon_command` mark) where daemons start as the real command."""

_HEADER_BYTES = 16
"""A request starts with its length as this many ASCII digits, sent with its three
descriptors; its JSON follows."""
_LIMITS = [
    getattr(resource, name)
    for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE")
]
"""The resource limits a command takes from its test."""


# The server side (this file run as a script).


class _Children:
    """The server's live children, each by a pidfd (a kill never reaches a reused pid)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pidfds: dict[int, int] = {}

    def add(self, pid: int, pidfd: int) -> None:
        with self._lock:
            self._pidfds[pid] = pidfd

    def reaped(self, pid: int) -> None:
        with self._lock:
            os.close(self._pidfds.pop(pid))

    def kill_all(self) -> None:
        with self._lock:
            for pidfd in self._pidfds.values():
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def _read_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    header, descriptors, _, _ = socket.recv_fds(connection, _HEADER_BYTES, 3)
    try:
        if len(header) != _HEADER_BYTES or len(descriptors) != 3:
            raise ValueError("a request starts with its length and three descriptors")
        body = bytearray()
        length = int(header)
        while len(body) < length:
            chunk = connection.recv(length - len(body))
            if not chunk:
                raise ValueError("the request ended early")
            body += chunk
        return json.loads(body), descriptors
    except BaseException:
        for descriptor in descriptors:
            os.close(descriptor)
        raise


def _serve(listener: socket.socket, children: _Children) -> dict[str, Any]:
    """Fork a process per request; return only in such a process, with its request."""
    while True:
        connection, _ = listener.accept()
        try:
            request, descriptors = _read_request(connection)
        except (OSError, ValueError):
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            for target, descriptor in enumerate(descriptors):
                os.dup2(descriptor, target)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as `subprocess`'s close_fds
            return request
        for descriptor in descriptors:
            os.close(descriptor)
        pidfd = os.pidfd_open(pid)
        children.add(pid, pidfd)
        try:
            socket.send_fds(connection, [f"{pid}\n".encode()], [pidfd])
        except OSError:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # its test is gone
        threading.Thread(target=_report_exit, args=(connection, pid, children), daemon=True).start()


def _report_exit(connection: socket.socket, pid: int, children: _Children) -> None:
    _, status = os.waitpid(pid, 0)
    children.reaped(pid)
    with contextlib.suppress(OSError):  # the test gave up on it
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    connection.close()


def _take_context(request: dict[str, Any]) -> list[str]:
    """Take the requester's environment, working directory, umask and limits; return
    the import path entries its PYTHONPATH names."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    for limit, (soft, hard) in zip(_LIMITS, request["limits"], strict=True):
        with contextlib.suppress(OSError, ValueError):  # past the server's hard limit
            resource.setrlimit(limit, (soft, hard))
    return [entry for entry in request["env"].get("PYTHONPATH", "").split(":") if entry]


def _become_daemon(request: dict[str, Any], inherited_path: list[str]) -> None:
    """Turn this forked process into the daemon `_launch` would start."""
    os.setsid()
    python_path = _take_context(request)
    sys.argv = [str(DAEMON_MAIN), *request["args"]]
    sys.path[:] = [request["cwd"], *python_path, *inherited_path]
    from workbench.daemon.__main__ import main

    sys.exit(main())


def _become_cli(request: dict[str, Any], inherited_path: list[str], name: str) -> None:
    """Turn this forked process into the CLI command the request describes."""
    python_path = _take_context(request)
    if DAEMON_COMMAND_ENV not in request["env"]:
        from workbench.backends.daemon import client

        client._launch = functools.partial(start_daemon, name)
    if request["module"]:
        sys.argv = [str(MODULE_MAIN), *request["args"]]
        sys.modules["__main__"].__package__ = "workbench"
        first = request["cwd"]
    else:
        sys.argv = [str(SCRIPT), *request["args"]]
        first = str(SCRIPT.parent)
    sys.path[:] = [first, *python_path, *inherited_path]
    from workbench.cli.main import main

    sys.exit(main())


def _exit_with_parent(parent: int, children: _Children) -> None:
    """The pytest worker holds the other end of `parent` (this process's stdin): when it
    closes (the worker ended, or it stops this server), end with every command still
    running. Read through a descriptor of its own: a thread blocked in `sys.stdin` would
    hold its lock, which a forked process would then never get."""
    while os.read(parent, 1 << 12):
        pass
    children.kill_all()
    os._exit(0)


def _import_the_cli() -> None:
    import importlib

    from workbench.cli.main import COMMANDS

    for command in COMMANDS.values():
        importlib.import_module(command.target.split(":")[0])
    import workbench.api
    import workbench.backends.daemon.client
    import workbench.daemon.__main__  # noqa: F401


def _server_main(name: str) -> None:
    # What a command's import path holds besides its first entry and its PYTHONPATH.
    own_path = {entry for entry in os.environ.get("PYTHONPATH", "").split(":") if entry}
    inherited_path = [entry for entry in sys.path[1:] if entry not in own_path]
    sys.path[0] = str(SCRIPT.parent)
    _import_the_cli()
    gc.collect()
    gc.freeze()  # what the imports made is never collected, in no command
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # abstract: no file to clean up
    listener.listen(socket.SOMAXCONN)
    children = _Children()
    parent = os.dup(0)
    threading.Thread(target=_exit_with_parent, args=(parent, children), daemon=True).start()
    print("ready", flush=True)
    request = _serve(listener, children)
    listener.detach()  # its descriptor went with the others the fork closed
    if request.get("daemon"):
        _become_daemon(request, inherited_path)
    _become_cli(request, inherited_path, name)


# The client side (imported by the tests).


class CliForkServer:
    """One server per pytest worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._name = ""
        self._started = 0

    @property
    def pid(self) -> int | None:
        """The server's process id, while it runs."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the server (again, if it died) with this process's environment."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            self._stop_locked()
            self._started += 1
            self._name = f"sbw-cli-{os.getpid()}-{self._started}"
            self._process = subprocess.Popen(
                [sys.executable, str(_HERE), self._name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert self._process.stdout is not None
            if self._process.stdout.readline() != b"ready\n":
                raise RuntimeError("the CLI fork server did not start")

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._process is None:
            return
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        self._process.stdout.close()
        self._process.wait(timeout=30)
        self._process = None

    def run(
        self,
        env: dict[str, str],
        *args: str,
        stdin: str | None = None,
        timeout: float = 120,
        cwd: Path | str | None = None,
        module: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """As `subprocess.run([SCRIPT, *args], capture_output=True, text=True, ...)`, or
        `[sys.executable, "-m", "workbench", *args]` with `module`; stdin is empty when
        no input is given."""
        command = _command(args, module)
        deadline = time.monotonic() + timeout
        request = _request(env, args, cwd, module)
        self.start()
        ends = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr: (read, write)
        theirs = [ends[0][0], ends[1][1], ends[2][1]]
        ours = [ends[0][1], ends[1][0], ends[2][0]]
        try:
            connection, pidfd, _ = _send(self._name, request, theirs, deadline)
        except BaseException as error:
            for descriptor in ours:
                os.close(descriptor)
            if isinstance(error, TimeoutError):
                raise subprocess.TimeoutExpired(command, timeout) from None
            raise
        finally:
            for descriptor in theirs:
                os.close(descriptor)
        encoding = locale.getpreferredencoding(False)
        try:
            stdout, stderr, finished = _communicate(ours, (stdin or "").encode(encoding), deadline)
            if not finished:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            # Reaped before this returns (its store lock and files let go), as
            # `subprocess.run` waits for what it killed.
            connection.settimeout(max(deadline - time.monotonic(), 30.0))
            with connection.makefile("rb") as answers:
                status = answers.readline()
            if not status:
                raise RuntimeError("the CLI fork server ended before the command did")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            raise
        finally:
            os.close(pidfd)
            connection.close()
        if not finished:
            raise subprocess.TimeoutExpired(
                command, timeout, _text(stdout, encoding), _text(stderr, encoding)
            )
        return subprocess.CompletedProcess(
            command, int(status), _text(stdout, encoding), _text(stderr, encoding)
        )

    def popen(self, env: dict[str, str], *args: str, module: bool = False) -> ForkedProcess:
        """As `subprocess.Popen([SCRIPT, *args], stdin=DEVNULL, stdout=PIPE,
        stderr=STDOUT, text=True, env=env)` (`python -m workbench` with `module`): a
        command that runs until it is stopped, such as `serve`."""
        request = _request(env, args, None, module)
        self.start()
        stdout, theirs = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            connection, pidfd, pid = _send(
                self._name, request, [null, theirs, theirs], time.monotonic() + 30
            )
        except BaseException:
            os.close(stdout)
            raise
        finally:
            os.close(null)
            os.close(theirs)
        return ForkedProcess(_command(args, module), pid, pidfd, connection, stdout)

    def start_daemon(self, arguments: list[str], environment: dict[str, str]) -> ForkedDaemon:
        """`workbench.backends.daemon.client._launch`, forked from this server."""
        self.start()
        return start_daemon(self._name, arguments, environment)


def _command(args: tuple[str, ...], module: bool) -> list[str]:
    """The command line the console script (or `python -m workbench`) would have."""
    return [sys.executable, "-m", "workbench", *args] if module else [str(SCRIPT), *args]


def _request(
    env: dict[str, str], args: tuple[str, ...], cwd: Path | str | None, module: bool
) -> dict[str, Any]:
    """A command's request: its arguments and this process's context for it."""
    return {
        "args": list(args),
        "env": env,
        "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
        "module": module,
        "umask": umask_of(),
        "limits": [resource.getrlimit(limit) for limit in _LIMITS],
    }


class ForkedProcess:
    """A command the server forked, its output (stdout and stderr) on a pipe, with what
    the tests use of a text-mode `subprocess.Popen`; its exit status comes from the
    server, which reaps it."""

    def __init__(
        self, args: list[str], pid: int, pidfd: int, connection: socket.socket, stdout: int
    ) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        # Open while the process runs, as `Popen`'s.
        self.stdout = open(stdout, encoding=locale.getpreferredencoding(False))  # noqa: SIM115
        self._pidfd = pidfd
        self._lock = threading.Lock()
        self._ended = threading.Event()
        connection.settimeout(None)
        threading.Thread(target=self._wait, args=(connection,), daemon=True).start()

    def _wait(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as answers:
            status = answers.readline()
        if not status:
            # The server ended without reaping it (killed): the process may run on. Its
            # pidfd turns readable once it has ended, whatever its parent; its status is
            # then unknown here.
            select.select([self._pidfd], [], [])
        with self._lock:
            self.returncode = int(status) if status else -signal.SIGKILL
            os.close(self._pidfd)  # under the lock: no signal goes to a closed descriptor
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, number: int) -> None:
        with self._lock:
            if self.returncode is None:
                with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                    signal.pidfd_send_signal(self._pidfd, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedDaemon:
    """A daemon the server forked, with what the daemon's client uses of
    `subprocess.Popen`: its exit status, once the server reports it."""

    def __init__(self, connection: socket.socket) -> None:
        self.returncode: int | None = None
        connection.settimeout(None)
        threading.Thread(target=self._wait, args=(connection,), daemon=True).start()

    def _wait(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as answers:
            status = answers.readline()
        if status:
            self.returncode = int(status)

    def poll(self) -> int | None:
        return self.returncode


def start_daemon(name: str, arguments: list[str], environment: dict[str, str]) -> ForkedDaemon:
    """`python -m workbench.daemon ARGUMENTS` as `_launch` starts it, forked from the
    server called `name`."""
    request = {
        "daemon": True,
        "args": arguments,
        "env": environment,
        "cwd": "/",
        "umask": umask_of(),
        "limits": [resource.getrlimit(limit) for limit in _LIMITS],
    }
    null = os.open(os.devnull, os.O_RDWR)
    try:
        connection, pidfd, _ = _send(name, request, [null] * 3, time.monotonic() + 30)
    finally:
        os.close(null)
    os.close(pidfd)
    return ForkedDaemon(connection)


def _send(
    name: str, request: dict[str, Any], descriptors: list[int], deadline: float
) -> tuple[socket.socket, int, int]:
    """Send a request with its stdin, stdout and stderr to the server called `name`;
    return the connection, on which the process's exit status comes, its pidfd and its
    pid."""
    body = json.dumps(request).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect("\0" + name)
        connection.settimeout(max(deadline - time.monotonic(), 0.1))
        header = str(len(body)).zfill(_HEADER_BYTES).encode()
        socket.send_fds(connection, [header], descriptors)
        connection.sendall(body)
        answer, pidfds, _, _ = socket.recv_fds(connection, 64, 1)
        if not pidfds:
            raise RuntimeError(f"the CLI fork server did not take the request: {answer!r}")
    except BaseException:
        connection.close()
        raise
    return connection, pidfds[0], int(answer)


def umask_of(pid: int | None = None) -> int:
    """A process's umask (this one's by default), read without changing it (other
    threads may create files)."""
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise RuntimeError("no umask in /proc/self/status")


def _text(data: bytes, encoding: str) -> str:
    """As `subprocess` decodes in text mode (universal newlines)."""
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


def _communicate(ours: list[int], data: bytes, deadline: float) -> tuple[bytes, bytes, bool]:
    """Write `data` to the command's stdin and read its stdout and stderr to their ends,
    or until the deadline (False: it passed); closes all three."""
    stdin, stdout, stderr = ours
    chunks: dict[int, list[bytes]] = {stdout: [], stderr: []}
    pending = memoryview(data)
    finished = True
    with selectors.DefaultSelector() as selector:
        for descriptor in (stdout, stderr):
            selector.register(descriptor, selectors.EVENT_READ)
        if pending:
            os.set_blocking(stdin, False)
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            os.close(stdin)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    finished = False
                    break
                for key, _ in selector.select(left):
                    if key.fd == stdin:
                        try:
                            pending = pending[os.write(stdin, pending[: 1 << 16]) :]
                        except BrokenPipeError:
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(stdin)
                            os.close(stdin)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        chunks[key.fd].append(chunk)
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
        finally:
            for key in list(selector.get_map().values()):
                os.close(key.fd)
    return b"".join(chunks[stdout]), b"".join(chunks[stderr]), finished


FORK_SERVER = CliForkServer()
run_cli_forked = FORK_SERVER.run
"""A CLI command in a process forked from the worker's CLI fork server."""


if __name__ == "__main__":
    _server_main(sys.argv[1])
