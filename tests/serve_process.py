"""Start a real `sandbox-workbench serve` process on a loopback port for tests: forked
from the worker's CLI fork server (its imports done once), or, for a test that looks for
processes by their command line (`daemon_command`), started as `python -m workbench`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cli_fork_server import DAEMON_COMMAND_ENV, FORK_SERVER, ForkedProcess

TOKEN = "test-token-0123456789"
READY = re.compile(r"listening on (http://\S+)")


@dataclass(frozen=True)
class ServeProcess:
    url: str
    token: str
    process: subprocess.Popen[str] | ForkedProcess


@contextmanager
def serve_process(
    data_dir: Path, *, token: str = TOKEN, env: dict[str, str] | None = None
) -> Iterator[ServeProcess]:
    """`sandbox-workbench serve --port 0` with its own data dir; yields once it is ready."""
    env = {**os.environ, **(env or {}), "SANDBOX_WORKBENCH_TOKEN": token}
    args = ["serve", "--port", "0", "--data-dir", str(data_dir)]
    process: subprocess.Popen[str] | ForkedProcess
    if DAEMON_COMMAND_ENV in env:  # the test looks for processes by their command line
        process = subprocess.Popen(
            [sys.executable, "-m", "workbench", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
    else:
        process = FORK_SERVER.popen(env, *args, module=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        url = None
        lines = []
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = READY.search(line)
            if match:
                url = match.group(1)
                break
        if url is None:
            raise RuntimeError("serve did not start:\n" + "".join(lines))
        yield ServeProcess(url, token, process)
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[Any] | ForkedProcess) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 20 s; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
