"""The engine process: hosts one `Session` at a time for its parent, over frames on
stdin/stdout (see `frames.py`), so that a guest blocked in a host call, a crash or a
runaway write can be stopped by ending this process without touching any other.

Requests (one at a time, answered in order, read by the main thread itself):
- `open`: create the session (language, compiled entry path: a module file or a decomposed
  component's directory, the workspace's limits when it has one, limits); its workspace
  starts empty;
- `restore`: give the session just opened a restore point: the blocks that differ from
  the engine's image, as runs, in the memory file the host handed over just before it
  (`memoryFile`, Linux: taken from the memory file socket and mapped), or a block per
  blob, which a thread reads straight into the snapshot's memory (`codec.place_restore`)
  while the main thread opens the session. The host sends it right behind `open`;
- `execute`: run code after bringing the workspace up to date (`update`, file bytes as
  blobs); answered with the `ExecutionReport`, whose workspace changes' bytes are blobs;
- `snapshot`: take the (incremental) snapshot; answered with the changed 4 KiB blocks
  (for a new snapshot, those that differ from the image: `fromImage`);
- `reset`, `close`: as `Session`;
- `run`: open + execute + close in one round trip (stateless runs).
`cancel` comes on a channel of its own (see `main`), read by a thread: it interrupts the
running execution while the main thread is busy with it.

Limits that hold even while the guest is blocked inside a host call (sleep, select,
poll): when the deadline or a cancel is not honoured by the guest within a grace period,
this process answers for it and exits; the parent then starts a new one. A thread of its
own checks that every `WATCH_SECONDS` while an execution runs, woken by an interval timer
the execution arms (`SIGALRM`, which only that thread takes): a short run costs two
`setitimer` calls instead of waking a thread, and an idle process sleeps. The guest's
files live in this process's memory only (`engines.vfs`): its end leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import itertools
import os
import queue
import resource
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import Any

import wasmtime

from engines.language import Artifact
from engines.process import codec
from engines.process.frames import FrameReader, write_frame
from engines.process.handle import PRELOAD_MESSAGE_BYTES, return_large_buffers
from engines.registry import language_engine
from engines.result import CANCELLED
from engines.session import Session
from engines.snapshot import reserve_memory_file
from engines.vfs import VirtualFS

GRACE_SECONDS = 0.25
"""How long a guest may take to honour a deadline or cancel before the process ends."""
WATCH_SECONDS = 0.05
"""How often the backstop checks a running execution's deadline and cancel."""
LOG_BYTES = 1 << 20
"""The only file this process writes is its stderr log (a crash's tail): at most this."""


Request = tuple[dict[str, Any], list[memoryview]]


def _timer_tick() -> None:
    """Wait for the interval timer a running execution arms (`SIGALRM`, blocked in every
    thread of this process: see `main`)."""
    signal.sigwait({signal.SIGALRM})


class Responder:
    """This process's end of the frame channel: answers the parent's requests with one
    `Session` at a time, and enforces deadlines and cancels from threads of their own."""

    def __init__(
        self, out_fd: int, handoff: socket.socket | None = None, *, timed_backstop: bool = False
    ) -> None:
        self._out_fd = out_fd
        self._timed_backstop = timed_backstop
        """Executions arm the interval timer the backstop waits for: only where its signal
        is blocked in every thread (`main`), or it would end the process."""
        self._handoff = handoff
        """Where the host hands over restore points' memory files (one per `restore` that
        says `memoryFile`, sent before it)."""
        self._write_lock = threading.Lock()
        self._answered = True
        """Whether the current request was answered (by the main loop or the backstop)."""
        self.session: Session | None = None
        self._just_opened = False
        """The last request opened the session: a `restore` may follow (only then)."""
        self._backstop = threading.Lock()
        """Guards the execution bookkeeping below (shared with the cancel and the
        backstop threads)."""
        self.current_code = ""
        self._running_seq = 0
        self._done_seq = 0
        self._cancel_seq = 0
        self._interrupt_reason: str | None = None
        self._interrupt_at: float | None = None

    # -- output --------------------------------------------------------------------------
    def answer(
        self, header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] | None = None
    ) -> bool:
        """Send the answer to the current request unless the backstop already did."""
        with self._write_lock:
            if self._answered:
                return False
            self._answered = True
            write_frame(self._out_fd, header, blobs or [])
            return True

    def send(
        self, header: dict[str, Any], blobs: Sequence[bytes | bytearray] | None = None
    ) -> None:
        with self._write_lock:
            write_frame(self._out_fd, header, blobs or [])

    def send_output(self, stream: str, data: bytes) -> None:
        """A piece of the running execution's output, as the guest writes it (never after
        the execution was answered: the parent would take it for the next answer)."""
        with self._write_lock:
            if not self._answered:
                write_frame(self._out_fd, {"output": stream}, [data])

    # -- requests ------------------------------------------------------------------------
    def read_cancels(self, cancels: FrameReader) -> None:
        """Cancel thread: each cancel acts at once, whatever the main thread is doing."""
        while True:
            header, _ = _next_frame(cancels)
            seq = header.get("seq")
            if header.get("op") == "cancel" and isinstance(seq, int):
                self.cancel(seq)

    def cancel(self, seq: int) -> None:
        """Cancel execution `seq`: the running one, or the next one if it has not started
        yet (the cancel channel may overtake the request); a cancel that arrives after its
        execution was answered is dropped. Numbers never repeat within a process."""
        with self._backstop:
            if seq <= self._done_seq:
                return
            self._cancel_seq = seq
            if seq != self._running_seq:
                return
        self.interrupt(CANCELLED)

    def interrupt(self, reason: str) -> None:
        """Stop the execution being handled (before or during its guest call); the first
        reason wins."""
        with self._backstop:
            if not self._running_seq or self._interrupt_reason is not None:
                return
            self._interrupt_reason = reason
            self._interrupt_at = time.monotonic()
        session = self.session
        if session is not None and session.in_call_since is not None:
            session.interrupt(reason)

    def _pending_interrupt(self) -> str | None:
        with self._backstop:
            return self._interrupt_reason

    def serve(self, requests: FrameReader) -> None:
        """Read and answer requests on this (the main) thread, until the parent goes."""
        read_ahead: queue.Queue[Request] | None = None
        while True:
            if read_ahead is None:
                header, blobs = _next_frame(requests)
            else:
                header, blobs = read_ahead.get()
                read_ahead = None
            if header.get("op") == "open":
                read_ahead = _read_ahead(requests)  # a restore point streams in meanwhile
            with self._write_lock:
                self._answered = False
            try:
                self.handle(header, blobs)
            except Exception as error:  # a host-side bug: report it, stay alive
                self.answer(
                    {"ok": False, "kind": "engine", "message": f"{type(error).__name__}: {error}"}
                )

    def handle(self, header: dict[str, Any], blobs: list[memoryview]) -> None:
        op = header.get("op")
        just_opened, self._just_opened = self._just_opened, False
        if op == "open":
            opened = self.open(header, blobs)
            self._just_opened = bool(opened["ok"])
            self.answer(opened)
            if self.session is not None:
                # While a restore point streams in (or the first run is on its way), make
                # the instance it will boot; a failure here meets that run again.
                with contextlib.suppress(Exception):
                    self.session.prepare()
        elif op == "execute":
            self.answer(*self.execute(header, blobs))
        elif op == "run":
            opened = self.open(header, blobs)
            if not opened["ok"]:
                self.answer(opened)
                return
            answer = self.execute(header, [])
            self.close_session()
            self.answer(*answer)
        elif op == "restore":
            self.answer(self.restore(header, blobs, just_opened=just_opened))
        elif op == "snapshot":
            self.snapshot()
        elif op == "reset":
            if self.session is not None:
                self.session.reset()
            self.answer({"ok": True})
        elif op == "close":
            self.close_session()
            self.answer({"ok": True})
        else:
            self.answer({"ok": False, "kind": "engine", "message": f"unknown request {op!r}"})

    def open(self, header: dict[str, Any], blobs: list[memoryview]) -> dict[str, Any]:
        self.close_session()
        workspace = header.get("workspace")
        language, compiled = str(header["language"]), Path(str(header["compiled"]))
        loaded = preloaded(language, compiled)
        try:
            self.session = Session(
                language_engine(language),
                workspace=VirtualFS(codec.vfs_limits_from_json(workspace)) if workspace else None,
                limits=codec.limits_from_json(header["limits"]),
                compiled=compiled,
                loaded=loaded,
            )
        except Exception as error:  # wasmtime refused the compiled module, or a bad request
            self.close_session()
            return {"ok": False, "kind": "load", "message": f"{type(error).__name__}: {error}"}
        return {"ok": True, "preloaded": loaded is not None}

    def restore(
        self, header: dict[str, Any], blobs: list[memoryview], *, just_opened: bool
    ) -> dict[str, Any]:
        """Give the session its restore point, as the request right after `open` (read
        while it opened); later, it would replace state the guest has moved past. One that
        says `memoryFile` takes the file handed over for it, whatever the outcome, so that
        the next one takes its own."""
        memory_file = self._take_memory_file() if header.get("memoryFile") is True else None
        session = self.session
        if session is None or not just_opened:
            if memory_file is not None:
                os.close(memory_file)
            return {"ok": False, "kind": "engine", "message": "no session waits for a restore"}
        if header.get("memoryFile") is True and memory_file is None:
            # Not the restore point's fault (out of descriptors, say): the open fails and
            # the context keeps its snapshot for the next try.
            return {"ok": False, "kind": "engine", "message": "a memory file did not arrive"}
        try:
            if memory_file is None:
                restore_point = codec.restore_from_json(header, blobs)
            elif blobs:
                os.close(memory_file)
                raise ValueError("a restore point both in a memory file and in blobs")
            else:
                restore_point = codec.restore_from_memory_file(header, memory_file)
        except OSError as error:  # mapping it failed here: as above
            return {"ok": False, "kind": "engine", "message": f"{type(error).__name__}: {error}"}
        except Exception as error:  # a malformed restore point: the session starts fresh
            return {"ok": False, "kind": "restore", "message": f"{type(error).__name__}: {error}"}
        if session.language_engine.snapshots:
            session.restore_point = restore_point
        return {"ok": True}

    def _take_memory_file(self) -> int | None:
        """The memory file handed over for this `restore` (sent before it: never waited
        for), None if none came."""
        if self._handoff is None:
            return None
        try:
            message, fds, _, _ = socket.recv_fds(self._handoff, 16, 1)
        except OSError:
            return None
        if message == b"memory" and len(fds) == 1:
            return fds[0]
        for fd in fds:
            os.close(fd)
        return None

    def close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def execute(
        self, header: dict[str, Any], blobs: list[memoryview]
    ) -> tuple[dict[str, Any], list[codec.Blob]]:
        session = self.session
        if session is None:
            return {"ok": False, "kind": "engine", "message": "no session is open"}, []
        update = header.get("update")
        self.current_code = str(header["code"])
        seq = max(int(header.get("seq", 0)), self._done_seq + 1)
        with self._backstop:
            self._running_seq = seq
            self._interrupt_reason = self._interrupt_at = None
            if header.get("cancelled"):
                self._cancel_seq = seq
            cancelled = self._cancel_seq == seq
        try:
            if self._timed_backstop:
                signal.setitimer(signal.ITIMER_REAL, WATCH_SECONDS, WATCH_SECONDS)
            if cancelled:
                self.interrupt(CANCELLED)
            report = session.execute(
                str(header["code"]),
                header.get("env") or {},
                str(header.get("cwd") or "/workspace"),
                session=bool(header.get("session", True)),
                pending_interrupt=self._pending_interrupt,
                update=codec.update_from_json(update, blobs) if update else None,
                timeout=_seconds(header.get("timeout")),
                on_output=self.send_output if header.get("stream") else None,
            )
        finally:
            if self._timed_backstop:
                signal.setitimer(signal.ITIMER_REAL, 0)
            with self._backstop:
                self._interrupt_reason = self._interrupt_at = None
                self._done_seq = seq
                self._running_seq = 0
        answer_blobs: list[codec.Blob] = []
        encoded = codec.report_to_json(report, answer_blobs)
        return {"ok": True, "report": encoded, "alive": session.alive}, answer_blobs

    def snapshot(self) -> None:
        session = self.session
        snapshot = session.take_snapshot() if session is not None else None
        if snapshot is None:
            self.answer({"ok": True, "snapshot": None})
            return
        header, runs = codec.snapshot_delta(snapshot)
        snapshot.changed_blocks.clear()  # the parent holds them now
        snapshot.from_image = False
        try:
            self.answer({"ok": True, "snapshot": header}, runs)
        finally:
            for run in runs:  # the next snapshot may resize the memory they view
                run.release()
        snapshot.keep_written_only()  # the parent had every block it needs

    # -- backstop ------------------------------------------------------------------------
    def watch_deadlines(self, tick: Callable[[], object] = _timer_tick) -> None:
        """End the process for a guest that does not honour a deadline or a cancel
        (blocked in a host call), answering for it first; checks at each `tick`."""
        while True:
            tick()
            with self._backstop:
                seq = self._running_seq
                interrupt_at, reason = self._interrupt_at, self._interrupt_reason
            session = self.session
            started = session.in_call_since if session is not None else None
            if session is None or started is None:
                continue
            now = time.monotonic()
            timeout = session.limits.timeout_seconds
            if reason is not None and interrupt_at is not None:
                if now - max(interrupt_at, started) <= GRACE_SECONDS:
                    continue
                message = reason
            elif timeout is not None and now - started > timeout + GRACE_SECONDS:
                message = session.timeout_message()
            else:
                continue
            report = codec.abandoned_report(session, self.current_code, message)
            with self._backstop:  # the run may have ended meanwhile, and the next begun
                if not seq or self._running_seq != seq:
                    continue  # its own answer went out: this report is not the next one's
                if self.answer({"ok": True, "report": report, "alive": False, "exiting": True}):
                    os._exit(0)


def _next_frame(reader: FrameReader) -> Request:
    """The next frame on a channel from the parent; its end, or garbage on it (nothing
    after it can be trusted), ends this process, whichever thread reads it."""
    try:
        return reader.read()
    except (EOFError, OSError):
        os._exit(0)  # the parent went away: nothing here is worth finishing
    except Exception as error:
        print(f"engine process: a channel from the host is broken: {error}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)


def _read_ahead(requests: FrameReader) -> queue.Queue[Request]:
    """The next request, read by a thread of its own while the main thread is busy."""
    box: queue.Queue[Request] = queue.Queue(maxsize=1)
    threading.Thread(target=lambda: box.put(_next_frame(requests)), daemon=True).start()
    return box


def _seconds(value: object) -> float | None:
    """A request's positive number of seconds (None when absent or not such a number)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _confine() -> None:
    """OS limits for a process that runs untrusted code: no core dumps, no file larger
    than its log (a write past it fails with EFBIG instead of killing the process)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (LOG_BYTES, LOG_BYTES))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(cancel_fd: int, handoff_fd: int = -1) -> None:
    """Serve requests from stdin, answers to stdout, cancels from `cancel_fd`, restore
    points' memory files from the socket `handoff_fd` (-1: none)."""
    # The backstop's timer signal goes to its thread alone (`sigwait`): blocked here,
    # before any thread starts, it is blocked in every thread, and interrupts nothing.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    reserve_memory_file()  # before the file size limit, which sizing the file would pass
    _confine()
    return_large_buffers()  # a whole snapshot, where written pages cannot be told
    # The frame channel is the original stdout; anything else printing goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    handoff = None if handoff_fd < 0 else socket.socket(fileno=handoff_fd)
    if handoff is not None:
        handoff.setblocking(False)  # a file comes before its `restore`, never after
    responder = Responder(out_fd, handoff, timed_backstop=True)
    cancels = FrameReader(cancel_fd)
    threading.Thread(target=responder.read_cancels, args=(cancels,), daemon=True).start()
    threading.Thread(target=responder.watch_deadlines, daemon=True).start()
    responder.send({"ready": True, "pid": os.getpid()})
    responder.serve(FrameReader(0, place=codec.place_restore))


@dataclass(frozen=True)
class _Preloaded:
    """A compiled entry the fork server loaded (`preload`); its children inherit it."""

    compiled: Path
    anchor: int
    """An `O_PATH` descriptor of the entry: which file or directory it is (its inode is
    not reused while held, so a replaced entry never passes for it)."""
    files: frozenset[tuple[int, int]]
    """(device, inode) of the entry and of each file in it."""
    engine: wasmtime.Engine
    artifact: Artifact


_PRELOADED: dict[str, _Preloaded] = {}
"""By language: the entry loaded last."""
_KEPT_FDS: list[int] = []
"""The descriptors a child keeps open: see `_entry_descriptors`."""


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _preload(message: bytes) -> None:
    """In the fork server, for `preload LANGUAGE\0PATH`: load that compiled entry, so that
    the engine processes forked from now on open a session of it without loading it
    (Python's takes 6.5 ms, JavaScript's 3.7). Loading runs no guest code. An entry that
    cannot be loaded is left for the child to load, and to report."""
    try:
        language, path = message.removeprefix(b"preload ").decode().split("\0")
        compiled = Path(path)
        spec = language_engine(language)
        anchor = os.open(compiled, os.O_PATH)
    except Exception:  # the child loads it itself, and says what is wrong
        return
    try:
        members = [compiled / name for name in os.listdir(compiled)] if compiled.is_dir() else []
        files = frozenset(_identity(os.stat(member)) for member in members)
        engine = spec.new_engine()
        artifact = spec.load_compiled(engine, compiled)
    except Exception:
        os.close(anchor)
        return
    entry = _Preloaded(compiled, anchor, files | {_identity(os.fstat(anchor))}, engine, artifact)
    replaced = _PRELOADED.get(language)
    _PRELOADED[language] = entry
    if replaced is not None:  # its module's own descriptors close as it goes
        os.close(replaced.anchor)
    del replaced
    _KEPT_FDS[:] = _entry_descriptors()
    gc.freeze()


def _entry_descriptors() -> list[int]:
    """The server's descriptors of the loaded entries' files, in order, found by what
    they are (not by name: a cache dir reached through a symlink is named otherwise):
    wasmtime keeps a module's file open and maps each new instance's memory image from
    it, so a child keeps them, and every other descriptor of the server's is closed. An
    entry whose file would sit where a child puts its channels (0-3) is not kept loaded."""
    files = frozenset().union(*(entry.files for entry in _PRELOADED.values()))
    kept = []
    for name in os.listdir("/proc/self/fd"):
        try:
            status = os.fstat(int(name))
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if _identity(status) in files and (S_ISREG(status.st_mode) or S_ISDIR(status.st_mode)):
            kept.append(int(name))
    if any(fd < 4 for fd in kept):
        for entry in _PRELOADED.values():
            os.close(entry.anchor)
        _PRELOADED.clear()
        return []
    return sorted(kept)


def preloaded(language: str, compiled: Path) -> tuple[wasmtime.Engine, Artifact] | None:
    """The engine and entry the fork server loaded for `language`, if it is still the
    entry at `compiled` (not one replaced since)."""
    entry = _PRELOADED.get(language)
    if entry is None or entry.compiled != compiled:
        return None
    try:
        same = _identity(os.stat(compiled)) == _identity(os.fstat(entry.anchor))
    except OSError:
        return None
    return (entry.engine, entry.artifact) if same else None


def serve_forks(control_fd: int) -> None:
    """The fork server (the host's end is `process.ForkServer`): it has imported all an
    engine process needs and never runs guest code. Each `fork` request brings the new
    process's stdin, stdout, stderr, cancel channel and, where there is one, memory file
    socket; the child becomes an engine
    process on them and the host gets its pid, then its exit code when it ends. End of the
    control channel (the host is gone) ends the server; its children end as their own
    channels close."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=control_fd)
    gc.collect()
    gc.freeze()  # the collector then leaves the shared pages of these objects alone
    children: dict[int, int] = {}
    """pidfd -> pid of each child not yet reaped."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                try:
                    message, fds, _, _ = socket.recv_fds(control, PRELOAD_MESSAGE_BYTES, 5)
                except OSError:
                    return
                if not message:
                    return
                if message.startswith(b"preload ") and not fds:
                    _preload(message)
                    continue
                if message != b"fork" or len(fds) not in (4, 5):
                    for fd in fds:
                        os.close(fd)
                    continue
                pid = os.fork()
                if pid == 0:
                    _become_engine_process(*fds)
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                selector.register(pidfd, selectors.EVENT_READ)
                control.sendall(b"forked %d" % pid)
            else:
                pid = children.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                control.sendall(b"exited %d %d" % (pid, os.waitstatus_to_exitcode(status)))


def _become_engine_process(
    stdin: int, stdout: int, stderr: int, cancels: int, handoff: int = -1
) -> None:
    """In a child of the fork server: take the given channels (stdin, stdout and stderr
    as 0-2, the cancel pipe and the memory file socket, if there is one, at the lowest
    numbers the preloaded entries' files leave free), drop every other descriptor of the
    server, and serve as an engine process until the host is done (never returns)."""
    status = 1
    try:
        os.setsid()  # the terminal's Ctrl+C is the host's to handle
        channels = [stdin, stdout, stderr, cancels] + ([handoff] if handoff >= 0 else [])
        # The preloaded entries' files keep their numbers (see `_entry_descriptors`).
        free = (number for number in itertools.count(3) if number not in _KEPT_FDS)
        targets = [0, 1, 2] + [next(free) for _ in channels[3:]]
        # Out of the way first: a channel may have come at a number another one takes.
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, max(targets) + 1) for fd in channels]
        for fd, target in zip(moved, targets, strict=True):
            os.dup2(fd, target)
        first = 0
        for kept in sorted({*targets, *_KEPT_FDS}):
            if first < kept:  # `closerange(0, 0)` closes every descriptor (Python 3.11)
                os.closerange(first, kept)
            first = kept + 1
        os.closerange(first, os.sysconf("SC_OPEN_MAX"))
        main(targets[3], targets[4] if handoff >= 0 else -1)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(status)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
