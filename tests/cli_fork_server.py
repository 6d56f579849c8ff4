"""CLI commands for the tests in processes forked from one that has imported the CLI.

A test's CLI command spent about 0.17 s of CPU starting Python and importing the CLI
before doing anything, and the suite runs some 500 of them. A pytest worker instead
starts this module once as a script; it imports the CLI and every command's module, then
forks a process per command. That process is a real one of its own, as the console
script's: it gets the test's stdin, stdout and stderr as descriptors, the test's
environment, working directory and arguments, runs `workbench.cli.main.main`, and exits
through the interpreter's own shutdown, with the status the test sees. Only the imports
are shared, and the CLI reads its settings at run time, never at import; what the
interpreter itself reads at start-up (`PYTHON*` variables, the locale) is the worker's.

Tests that need the console script itself (packaging, signals, a process to stop) run it
with `subprocess`, as before.
"""

from __future__ import annotations

import contextlib
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve()
_ROOT = _HERE.parents[1]
SCRIPT = Path(sys.executable).parent / "sandbox-workbench"
"""The console script `pip install` made for the project."""
MODULE_MAIN = _ROOT / "workbench" / "__main__.py"
"""`python -m workbench`'s file (click names the program after it)."""

_REQUEST_BYTES = 1 << 20


# The server side (this file run as a script).


def _serve(listener: socket.socket, parent: int) -> dict[str, Any]:
    """Fork a process per request; return only in such a process, with its request."""
    server_pid = os.getpid()
    while True:
        connection, _ = listener.accept()
        try:
            message, descriptors, _, _ = socket.recv_fds(connection, _REQUEST_BYTES, 3)
            request = json.loads(message)
        except (OSError, ValueError):
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            connection.close()
            os.close(parent)
            for target, descriptor in enumerate(descriptors):
                os.dup2(descriptor, target)
                os.close(descriptor)
            return dict(request)
        assert os.getpid() == server_pid
        for descriptor in descriptors:
            os.close(descriptor)
        connection.sendall(f"{pid}\n".encode())
        threading.Thread(target=_report_exit, args=(connection, pid), daemon=True).start()


def _report_exit(connection: socket.socket, pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):  # the test gave up on it
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    connection.close()


def _become_cli(request: dict[str, Any]) -> None:
    """Turn this forked process into the CLI command the request describes."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    main_module = sys.modules["__main__"]
    if request["module"]:
        sys.argv = [str(MODULE_MAIN), *request["args"]]
        main_module.__package__ = "workbench"
    else:
        sys.argv = [str(SCRIPT), *request["args"]]
        main_module.__package__ = None
    from workbench.cli.main import main

    sys.exit(main())


def _exit_with_parent(parent: int) -> None:
    """The pytest worker holds the other end of `parent` (this process's stdin): end
    when it closes (the worker ended, or it stops this server). Read through a
    descriptor of its own: a thread blocked in `sys.stdin` would hold its lock, which a
    forked process would then never get."""
    while os.read(parent, 1 << 12):
        pass
    os._exit(0)


def _import_the_cli() -> None:
    import importlib

    from workbench.cli.main import COMMANDS

    for command in COMMANDS.values():
        importlib.import_module(command.target.split(":")[0])
    import workbench.api
    import workbench.backends.daemon.client  # noqa: F401


def _server_main(socket_path: str) -> None:
    # The console script's first import path is its own directory, not this file's.
    sys.path[0] = str(SCRIPT.parent)
    _import_the_cli()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    parent = os.dup(0)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    print("ready", flush=True)
    request = _serve(listener, parent)
    _become_cli(request)


# The client side (imported by the tests).


class CliForkServer:
    """One server per pytest worker, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: str | None = None

    def _socket_path(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._directory = tempfile.mkdtemp(prefix="sbw-cli-")
                path = os.path.join(self._directory, "cli.sock")
                self._process = subprocess.Popen(
                    [sys.executable, str(_HERE), path],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd=_ROOT,
                    env={**os.environ, "PYTHONPATH": str(_ROOT)},
                )
                assert self._process.stdout is not None
                if self._process.stdout.readline() != b"ready\n":
                    raise RuntimeError("the CLI fork server did not start")
            assert self._directory is not None
            return os.path.join(self._directory, "cli.sock")

    @property
    def pid(self) -> int | None:
        """The server's process id, while it runs."""
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        with self._lock:
            if self._process is not None:
                assert self._process.stdin is not None
                self._process.stdin.close()
                self._process.wait(timeout=30)
                self._process = None
            if self._directory is not None:
                for name in os.listdir(self._directory):
                    os.unlink(os.path.join(self._directory, name))
                os.rmdir(self._directory)
                self._directory = None

    def run(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        stdin: str | None = None,
        timeout: float = 120,
        cwd: Path | str | None = None,
        module: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """As `subprocess.run([SCRIPT, *args], capture_output=True, text=True, ...)`, or
        `[sys.executable, "-m", "workbench", *args]` with `module`; stdin is empty when
        no input is given."""
        command = [sys.executable, "-m", "workbench", *args] if module else [str(SCRIPT), *args]
        request = {
            "args": args,
            "env": env,
            "cwd": str(cwd if cwd is not None else os.getcwd()),
            "module": module,
        }
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            connection.connect(self._socket_path())
            socket.send_fds(
                connection,
                [json.dumps(request).encode()],
                [stdin_read, stdout_write, stderr_write],
            )
            answers = connection.makefile("rb")
            pid = int(answers.readline())
        except BaseException:
            for descriptor in (stdin_write, stdout_read, stderr_read):
                os.close(descriptor)
            connection.close()
            raise
        finally:
            for descriptor in (stdin_read, stdout_write, stderr_write):
                os.close(descriptor)
        encoding = locale.getpreferredencoding(False)
        try:
            stdout, stderr = _communicate(
                stdin_write,
                (stdin or "").encode(encoding),
                stdout_read,
                stderr_read,
                deadline,
            )
            connection.settimeout(max(0.0, deadline - time.monotonic()))
            returncode = int(answers.readline())
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(command, timeout) from None
        finally:
            answers.close()
            connection.close()
        return subprocess.CompletedProcess(
            command, returncode, _text(stdout, encoding), _text(stderr, encoding)
        )


def _text(data: bytes, encoding: str) -> str:
    """As `subprocess` decodes in text mode (universal newlines)."""
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


def _communicate(
    stdin: int, data: bytes, stdout: int, stderr: int, deadline: float
) -> tuple[bytes, bytes]:
    """Write `data` to `stdin` and read `stdout` and `stderr` to their ends (closes all
    three); TimeoutError past the deadline."""
    chunks: dict[int, list[bytes]] = {stdout: [], stderr: []}
    pending = memoryview(data)
    with selectors.DefaultSelector() as selector:
        for descriptor in (stdout, stderr):
            selector.register(descriptor, selectors.EVENT_READ)
        if pending:
            os.set_blocking(stdin, False)
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            os.close(stdin)
        try:
            while len(selector.get_map()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in selector.select(left):
                    descriptor = int(key.fd)
                    if descriptor == stdin:
                        try:
                            pending = pending[os.write(stdin, pending[: 1 << 16]) :]
                        except BrokenPipeError:
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(stdin)
                            os.close(stdin)
                        continue
                    chunk = os.read(descriptor, 1 << 16)
                    if chunk:
                        chunks[descriptor].append(chunk)
                    else:
                        selector.unregister(descriptor)
                        os.close(descriptor)
        finally:
            for key in list(selector.get_map().values()):
                os.close(int(key.fd))
    return b"".join(chunks[stdout]), b"".join(chunks[stderr])


FORK_SERVER = CliForkServer()


def run_cli_forked(
    env: dict[str, str],
    *args: str,
    stdin: str | None = None,
    timeout: float = 120,
    cwd: Path | str | None = None,
    module: bool = False,
) -> subprocess.CompletedProcess[str]:
    """A CLI command in a process forked from the worker's CLI fork server."""
    return FORK_SERVER.run(
        list(args), env=env, stdin=stdin, timeout=timeout, cwd=cwd, module=module
    )


if __name__ == "__main__":
    _server_main(sys.argv[1])
