"""The host's handle on one engine process: start it, exchange frames, end it."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import itertools
import mmap
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from engines.process.frames import FrameError, FrameReader, FrameTimeout, write_frame
from engines.snapshot import BLOCK_BYTES

START_SECONDS = 60.0
"""How long a new process may take to import wasmtime and report ready."""
CANCEL_SECONDS = 1.0
"""How long a cancel may wait for room in its pipe (a process whose cancel thread stopped
reading is killed instead: a cancel must not hang its caller)."""
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from engines.process.child import main; main(int(sys.argv[1]), int(sys.argv[2]))"
)
_FORK_SERVER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from engines.process.child import serve_forks; serve_forks(int(sys.argv[1]))"
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


class EngineProcessDied(Exception):
    """The engine process ended (or answered garbage); the message says how."""


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
    """A process's resident memory that is its own, from `/proc`: anonymous pages and its
    memory files (a snapshot's kept blocks, see `engines.snapshot.BlockMemory`), not the
    files that processes of one engine share; 0 where that cannot be read. A kept block
    that a restored guest maps and has not written counts twice: it errs on the safe side."""
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return 0
    kib = 0
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssShmem"):
            kib += int(value.split()[0])
    return kib * 1024


def _interpreter(boot: str) -> list[str]:
    """The command line of a new interpreter that runs `boot` with this package on its path."""
    return [sys.executable, "-E", "-s", "-c", boot, _PACKAGE_ROOT]


def _clean_environment() -> dict[str, str]:
    return {key: os.environ[key] for key in _ENV_KEEP if key in os.environ}


FORK_SERVER = hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")
"""Whether engine processes are forked from a fork server (Linux) rather than started as
new interpreters (elsewhere)."""


MEMORY_FILES = (
    hasattr(os, "memfd_create") and hasattr(socket, "send_fds") and mmap.PAGESIZE == BLOCK_BYTES
)
"""Whether a restore point reaches an engine process as a memory file the host wrote
(Linux with 4 KiB pages: a restore maps the file's blocks one by one), rather than as
blocks through its pipe."""


def _handoff_pair() -> tuple[socket.socket, socket.socket] | None:
    """The host's and the engine process's ends of a memory file socket, None where there
    can be none. The host's end is shut for reading: a process that sends it descriptors
    gets EPIPE, so none sit unread in the host's socket counting against the user's
    limit of descriptors in flight (which would stop the host handing any over)."""
    if not MEMORY_FILES:
        return None
    try:
        host, engine = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:  # out of descriptors: the pipe carries restore points instead
        return None
    try:
        host.shutdown(socket.SHUT_RD)
    except OSError:
        host.close()
        engine.close()
        return None
    return host, engine


class ChildProcess(Protocol):
    """What the host uses of an engine process's OS process (`subprocess.Popen` has it)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


PRELOAD_MESSAGE_BYTES = 8192
"""The longest message to the fork server: `preload LANGUAGE\0PATH` (a path is at most
4,096 bytes on Linux)."""


class ForkServer:
    """The host's end of a fork server (`child.serve_forks`): a process started once,
    with the clean environment, that imported everything an engine process needs and never
    runs guest code. A new engine process is a fork of it: about a millisecond instead of
    an interpreter start and 0.3 s of imports, and the imported modules' pages stay shared
    between engine processes (copy-on-write) instead of each holding its own (issue 23)."""

    def __init__(self) -> None:
        host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._stderr = tempfile.TemporaryFile(prefix="sbw-fork-server-")  # noqa: SIM115
        with server_end:
            self.process = subprocess.Popen(
                [*_interpreter(_FORK_SERVER_BOOT), str(server_end.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                env=_clean_environment(),
                close_fds=True,
                pass_fds=(server_end.fileno(),),
                start_new_session=True,
            )
        self._control = host_end
        self._fork_lock = threading.Lock()
        self.preloads = 0
        """Entries the server was asked to load so far (see `preload`)."""
        self._asked: set[tuple[str, Path]] = set()
        self._forked: queue.Queue[int | None] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._exited = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, name="engine-fork-server", daemon=True).start()

    def _read(self) -> None:
        """Reader thread: fork answers go to the waiting `fork`, exit codes are kept."""
        while True:
            try:
                message = self._control.recv(128)
            except OSError:
                message = b""
            words = message.split()
            if not words:
                break
            if words[0] == b"forked" and len(words) == 2:
                self._forked.put(int(words[1]))
            elif words[0] == b"exited" and len(words) == 3:
                with self._exited:
                    self._exits[int(words[1])] = int(words[2])
                    self._exited.notify_all()
        with self._exited:
            self.closed = True
            self._exited.notify_all()
        self._forked.put(None)

    def fork(
        self, stdin: int, stdout: int, stderr: int, cancels: int, handoff: int
    ) -> ForkedProcess:
        """A new engine process reading frames from `stdin` (cancels from `cancels`, memory
        files from the socket `handoff`, -1 for none) and writing them to `stdout`."""
        with self._fork_lock:
            if self.closed:
                raise EngineProcessDied(self._describe_end())
            try:
                channels = [stdin, stdout, stderr, cancels] + ([handoff] if handoff >= 0 else [])
                socket.send_fds(self._control, [b"fork"], channels)
                pid = self._forked.get(timeout=START_SECONDS)
            except (OSError, queue.Empty):
                pid = None
            if pid is None:
                self.close()
                raise EngineProcessDied(self._describe_end())
            return ForkedProcess(self, pid, self.preloads)

    def preload(self, language: str, compiled: Path) -> None:
        """Have the server load `language`'s compiled entry (once), so that the engine
        processes forked after it open a session of it without loading it (see
        `child.preloaded`). A server that is gone, or a path too long, loses nothing: they
        load it."""
        message = b"preload " + f"{language}\0{compiled}".encode()
        if len(message) > PRELOAD_MESSAGE_BYTES:
            return
        with self._fork_lock, contextlib.suppress(OSError):
            if (language, compiled) in self._asked:
                return
            self._asked.add((language, compiled))
            self._control.send(message)
            self.preloads += 1

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit code of a child known to have ended, as the server reports it (None if
        the server ended first)."""
        deadline = time.monotonic() + timeout
        with self._exited:
            while pid not in self._exits and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._exited.wait(remaining)
            return self._exits.pop(pid, None)

    def _describe_end(self) -> str:
        try:
            self._stderr.seek(0)
            tail = self._stderr.read()[-400:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            tail = ""
        last = tail.splitlines()[-1] if tail else ""
        return "the engine fork server ended" + (f": {last}" if last else "")

    def close(self) -> None:
        """End the server (its children, each with its own channel to the host, end when
        the host closes that channel or kills them)."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5.0)
        self._control.close()
        self._stderr.close()


EXIT_UNKNOWN = 256
"""The exit code of a forked process whose fork server ended before reporting it."""


class ForkedProcess:
    """A child of the fork server, with the part of `subprocess.Popen` the host uses. Its
    pidfd makes every signal reach this process and never one that reused its pid."""

    def __init__(self, server: ForkServer, pid: int, preloads: int) -> None:
        self.pid = pid
        self.preloads = preloads
        """The server's `preloads` when it forked this process: the entries it has."""
        self.server = server
        self._pidfd = os.pidfd_open(pid)
        # Closed when the handle goes, never while another thread may use it (nor at exit,
        # when the pool's own exit hook still kills through it).
        weakref.finalize(self, os.close, self._pidfd).atexit = False
        self.returncode: int | None = None
        self._ended = False
        self._lock = threading.Lock()

    def _has_ended(self, timeout: float | None) -> bool:
        if not self._ended:
            readable, _, _ = select.select([self._pidfd], [], [], timeout)
            if not readable:
                return False
            with self._lock:
                if not self._ended:
                    code = self.server.exit_code(self.pid, timeout=2.0)
                    self.returncode = EXIT_UNKNOWN if code is None else code
                    self._ended = True
        return True

    def poll(self) -> int | None:
        """The exit code once ended, None while running."""
        self._has_ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._has_ended(timeout):
            raise subprocess.TimeoutExpired(f"engine process {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class _Channel:
    """The host's end of a pipe into an engine process: whole frames, one writer at a
    time, closed once (a write after that fails with `OSError`)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()

    def write(
        self,
        header: dict[str, Any],
        blobs: Sequence[bytes | bytearray | memoryview],
        deadline: float | None,
    ) -> None:
        with self._lock:
            write_frame(self.fd, header, blobs, deadline)

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self.fd)
                self.fd = -1


class EngineProcess:
    """One engine process and its channels: frames both ways, a pipe of its own for
    cancels (read by a thread of the process while its main thread runs the guest, so that
    the main thread reads requests itself, with no hand-over between threads), and where
    the platform has memory files, a socket that hands it a restore point's memory file
    (`hand_over`). A fork of `fork_server` where there is one, else a new interpreter."""

    def __init__(self, fork_server: ForkServer | None = None) -> None:
        # stderr goes to an unlinked temp file: never into the user's terminal or TUI,
        # never a pipe that could fill up, and its tail explains a crash.
        self._stderr = tempfile.TemporaryFile(prefix="sbw-engine-")  # noqa: SIM115 (kept open)
        pipes: list[tuple[int, int]] = []
        handoff: tuple[socket.socket, socket.socket] | None = None
        try:
            for _ in range(3):  # a failure (out of descriptors) closes those made before it
                pipes.append(os.pipe())
            handoff = _handoff_pair()
        except BaseException:
            for fd in itertools.chain.from_iterable(pipes):
                os.close(fd)
            self._stderr.close()
            raise
        (child_stdin, in_fd), (self._out_fd, child_stdout) = pipes[0], pipes[1]
        child_cancels, cancel_fd = pipes[2]
        self._handoff: socket.socket | None
        self._handoff, child_handoff = handoff or (None, None)
        self._handoff_lock = threading.Lock()
        """Held to send on and to close `_handoff` (a descriptor number closed and reused
        under a send would take a context's memory to another socket)."""
        child_handoff_fd = -1 if child_handoff is None else child_handoff.fileno()
        try:
            for channel in (in_fd, self._out_fd):
                _widen_pipe(channel)
            self.process: ChildProcess
            if fork_server is not None:
                self.process = fork_server.fork(
                    child_stdin,
                    child_stdout,
                    self._stderr.fileno(),
                    child_cancels,
                    child_handoff_fd,
                )
            else:
                self.process = subprocess.Popen(
                    [*_interpreter(_BOOT), str(child_cancels), str(child_handoff_fd)],
                    stdin=child_stdin,
                    stdout=child_stdout,
                    stderr=self._stderr,
                    env=_clean_environment(),
                    close_fds=True,
                    pass_fds=(child_cancels,)
                    if child_handoff_fd < 0
                    else (child_cancels, child_handoff_fd),
                    start_new_session=True,  # the terminal's Ctrl+C is the host's to handle
                )
        except BaseException:
            for fd in (in_fd, self._out_fd, cancel_fd):
                os.close(fd)
            if self._handoff is not None:
                self._handoff.close()
            self._stderr.close()
            raise
        finally:
            for fd in (child_stdin, child_stdout, child_cancels):
                os.close(fd)
            if child_handoff is not None:
                child_handoff.close()
        self._reader = FrameReader(self._out_fd)
        for fd in (in_fd, cancel_fd):  # a write waits for the process up to its deadline
            os.set_blocking(fd, False)
        self._requests, self._cancels = _Channel(in_fd), _Channel(cancel_fd)
        self.handed_over = 0
        """Bytes of the memory files handed over to its current session (`hand_over`)."""
        self._last_seq = 0
        self._ready = False
        self._reap_lock = threading.Lock()
        self.dead = False

    def next_seq(self) -> int:
        """A number for the next execution, never used before in this process (a cancel
        that arrives late cannot name an execution of a later session)."""
        self._last_seq += 1
        return self._last_seq

    def has_every_preload(self) -> bool:
        """It was forked with every entry its fork server has loaded (a process that is not
        a fork has none to miss)."""
        process = self.process
        return not isinstance(process, ForkedProcess) or process.preloads == process.server.preloads

    def private_bytes(self) -> int:
        """See `private_bytes` (0 once the process has gone), and the memory files handed
        over to its session: their pages count only once mapped in (then twice, as a kept
        block a guest maps does: on the safe side)."""
        held = private_bytes(self.process.pid)
        return held + self.handed_over if held else 0

    def wait_ready(self) -> None:
        if self._ready:
            return
        header, _ = self.receive(time.monotonic() + START_SECONDS)
        if not header.get("ready"):
            self.kill()
            raise EngineProcessDied("the engine process did not start")
        self._ready = True

    def send(
        self,
        header: dict[str, Any],
        blobs: Sequence[bytes | bytearray | memoryview] | None = None,
        *,
        deadline: float | None,
    ) -> None:
        """Write one frame (thread-safe). A dead process, or one that has not read it all
        by `deadline` (None: no limit), raises `EngineProcessDied`; the latter is killed
        (it stopped reading: it cannot be trusted with the next request either)."""
        self._write(self._requests, header, blobs or [], deadline)

    def send_cancel(self, seq: int) -> None:
        """Cancel execution `seq` (thread-safe; it acts even while the guest runs)."""
        self._write(
            self._cancels, {"op": "cancel", "seq": seq}, [], time.monotonic() + CANCEL_SECONDS
        )

    @property
    def takes_memory_files(self) -> bool:
        """A restore point can be handed to it as a memory file (`hand_over`)."""
        return self._handoff is not None

    def hand_over(self, memory_file: int, deadline: float) -> bool:
        """Hand the process a copy of the descriptor `memory_file` (for the `restore` frame
        sent next, which says so). False if it could not be sent (nothing was: the
        restore point goes through the pipe instead); `EngineProcessDied` if the process
        is gone or took nothing by `deadline` (then it is killed)."""
        gone: OSError | None = None
        with self._handoff_lock:  # never a wait for the process under it: see `_close_input`
            handoff = self._handoff
            if handoff is None:
                return False
            try:
                handoff.settimeout(max(deadline - time.monotonic(), 0.001))
                socket.send_fds(handoff, [b"memory"], [memory_file])
                return True
            except TimeoutError:
                pass
            except (BrokenPipeError, ConnectionResetError) as error:
                gone = error
            except OSError:  # descriptors in flight, memory: a datagram is sent whole or not
                return False
        if gone is not None:
            self.dead = True
            raise EngineProcessDied(self.describe_exit(gone))
        self.kill()
        raise EngineProcessDied("the engine process stopped taking memory files")

    def _write(
        self,
        channel: _Channel,
        header: dict[str, Any],
        blobs: Sequence[bytes | bytearray | memoryview],
        deadline: float | None,
    ) -> None:
        try:
            channel.write(header, blobs, deadline)
        except FrameTimeout:
            self.kill()
            raise EngineProcessDied("the engine process stopped reading its requests") from None
        except OSError as error:
            self.dead = True
            raise EngineProcessDied(self.describe_exit(error)) from None

    def receive(self, deadline: float | None) -> tuple[dict[str, Any], list[memoryview]]:
        """The next frame; `FrameTimeout` at the deadline, `EngineProcessDied` if the process
        ended or sent garbage."""
        try:
            return self._reader.read(deadline)
        except FrameTimeout:
            raise
        except (EOFError, OSError, FrameError) as error:
            self.dead = True
            raise EngineProcessDied(self.describe_exit(error)) from None

    def describe_exit(self, cause: BaseException) -> str:
        try:
            status = self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return f"the engine process stopped answering ({cause})"
        tail = self.stderr_tail()
        how = "the engine process exited"
        if status != EXIT_UNKNOWN:
            how += f" with signal {-status}" if status < 0 else f" with status {status}"
        return how + (f": {tail}" if tail else "")

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
        """End the process now. Its exit (unmapping a large engine can take a second) is
        awaited in the background, never by the caller."""
        self.dead = True
        # No poll first: a forked process's waits up to 2 s for its fork server's word on
        # an exit, and a cancel kills under its session's lock. Either kind of handle
        # signals an ended process safely (a pidfd; Popen checks its own exit first).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self.process.kill()
        threading.Thread(target=self._reap, name="engine-reaper", daemon=True).start()

    def stop(self, grace: float = 0.5) -> None:
        """Close the channel (the process exits on end of input), killing it if it lingers."""
        self.dead = True
        self._close_input()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reap()

    def _close_input(self) -> None:
        self._requests.close()
        self._cancels.close()
        with self._handoff_lock:
            if self._handoff is not None:
                self._handoff.close()
                self._handoff = None

    def _reap(self) -> None:
        with self._reap_lock:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30.0)
            self._close_input()
            if self._out_fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._out_fd)
                self._out_fd = -1
            with contextlib.suppress(OSError, ValueError):
                self._stderr.close()
