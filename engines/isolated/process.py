"""The host's handle on one engine process: start it, exchange frames, end it."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engines.isolated.frames import FrameError, FrameReader, FrameTimeout, write_frame

START_SECONDS = 60.0
"""How long a new process may take to import wasmtime and report ready."""
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from engines.isolated.worker import main; main()"
)
_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT")
"""The only variables an engine process inherits: the user's tokens and secrets stay out
of the process that runs untrusted code."""
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


PIPE_BYTES = 1 << 20
"""Capacity asked for the frame pipes (Linux's default unprivileged maximum): a snapshot
of tens of MiB then crosses in a few dozen wake-ups instead of hundreds."""


def _widen_pipe(fd: int) -> None:
    """Give a pipe `PIPE_BYTES` of capacity where the platform allows it."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is not None:
        with contextlib.suppress(OSError):  # a lower system maximum: keep the default
            fcntl.fcntl(fd, set_size, PIPE_BYTES)


class WorkerDied(Exception):
    """The engine process ended (or answered garbage); the message says how."""


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter: allocations from this size on are mapped, not heap."""


def return_large_buffers() -> None:
    """Make this process's buffers of 1 MiB or more (a guest's memory being restored or
    snapshotted) go back to the system when freed. glibc raises its threshold for that as
    such buffers are freed, after which they stay in the heap and a long-lived process
    only grows (measured: 183 -> 133 MiB for a backend that restored ten contexts)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 20)


def private_bytes(pid: int) -> int:
    """A process's resident memory that is its own (anonymous: resident minus file-backed,
    which processes of one engine share), from `/proc`; 0 where that cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            fields = statm.read().split()
    except OSError:
        return 0
    return max(0, int(fields[1]) - int(fields[2])) * PAGE_SIZE


class WorkerProcess:
    """One engine process (`python -m engines.isolated.worker`) and its frame channel."""

    def __init__(self) -> None:
        # stderr goes to an unlinked temp file: never into the user's terminal or TUI,
        # never a pipe that could fill up, and its tail explains a crash.
        self._stderr = tempfile.TemporaryFile(prefix="sbw-engine-")  # noqa: SIM115 (kept open)
        env = {key: os.environ[key] for key in _ENV_KEEP if key in os.environ}
        self.process = subprocess.Popen(
            [sys.executable, "-E", "-s", "-c", _BOOT, _PACKAGE_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            close_fds=True,
            start_new_session=True,  # the terminal's Ctrl+C is the host's to handle
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in_fd = self.process.stdin.fileno()
        for channel in (self._in_fd, self.process.stdout.fileno()):
            _widen_pipe(channel)
        self._reader = FrameReader(self.process.stdout.fileno())
        self._write_lock = threading.Lock()
        self._ready = False
        self._reap_lock = threading.Lock()
        self.dead = False

    def private_bytes(self) -> int:
        """See `private_bytes` (0 once the process has gone)."""
        return private_bytes(self.process.pid)

    def wait_ready(self) -> None:
        if self._ready:
            return
        header, _ = self.receive(time.monotonic() + START_SECONDS)
        if not header.get("ready"):
            self.kill()
            raise WorkerDied("the engine process did not start")
        self._ready = True

    def send(
        self, header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] | None = None
    ) -> None:
        """Write one frame (thread-safe; a dead process raises `WorkerDied`)."""
        with self._write_lock:
            try:
                write_frame(self._in_fd, header, blobs or [])
            except OSError as error:
                self.dead = True
                raise WorkerDied(self.describe_exit(error)) from None

    def receive(self, deadline: float | None) -> tuple[dict[str, Any], list[memoryview]]:
        """The next frame; `FrameTimeout` at the deadline, `WorkerDied` if the process
        ended or sent garbage."""
        try:
            return self._reader.read(deadline)
        except FrameTimeout:
            raise
        except (EOFError, OSError, FrameError) as error:
            self.dead = True
            raise WorkerDied(self.describe_exit(error)) from None

    def describe_exit(self, cause: BaseException) -> str:
        try:
            status = self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return f"the engine process stopped answering ({cause})"
        tail = self.stderr_tail()
        how = f"signal {-status}" if status < 0 else f"status {status}"
        return f"the engine process exited with {how}" + (f": {tail}" if tail else "")

    def stderr_tail(self, limit: int = 400) -> str:
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(size - limit, 0))
            text = self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return text.splitlines()[-1] if text else ""

    def kill(self) -> None:
        """End the process now (and everything it started). Its exit (unmapping a large
        engine can take a second) is awaited in the background, never by the caller."""
        self.dead = True
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, AttributeError):
                self.process.kill()
        threading.Thread(target=self._reap, name="engine-reaper", daemon=True).start()

    def stop(self, grace: float = 0.5) -> None:
        """Close the channel (the process exits on end of input), killing it if it lingers."""
        self.dead = True
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reap()

    def _reap(self) -> None:
        with self._reap_lock, contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30.0)
        for stream in (self.process.stdout, self.process.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()
