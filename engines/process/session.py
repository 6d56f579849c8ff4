"""`ProcessSession`: a `Session` that lives in an engine process of its own.

It is the `GuestSession` the sandbox layer drives (execute, cancel, take_snapshot,
collect_snapshot, reset, close, alive), mostly the surface of `engines.session.Session`,
which only the engine process itself uses; its snapshots are
the blocks that differ from the engine's image (`unstored`, `restore_source`). What the
process boundary adds:
- a deadline or cancel holds even while the guest is blocked in a host call: the engine
  process answers for the guest and exits, and the host kills it as a last resort;
- a crash, an abort or a runaway of the engine ends only that process;
- the snapshot after a run is taken by the engine process after the answer was sent,
  and collected by the host before the next request (off the critical path);
- the workspace lives in the engine process (`engines.vfs`): each execution carries
  what changed in the owner's tree since the process last saw it, and its answer carries
  what the run changed. `workspace_version` records what the process holds; a new
  process holds nothing (the next execution sends the whole tree).
After the process ended, the next execution starts a new one from the last snapshot
(the owner's, or the blocks the session kept) or fresh, exactly as after a trap.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from engines.cache import EngineCache
from engines.host import WORKSPACE
from engines.language import LanguageEngine, PrepareError, Progress
from engines.process import codec
from engines.process.frames import FrameTimeout
from engines.process.handle import EngineProcess, EngineProcessDied
from engines.process.pool import EngineProcessPool
from engines.registry import language_engine
from engines.result import (
    CANCELLED,
    ENGINE_ERROR,
    HOST_MESSAGE_CHARS,
    LIMIT_ERROR,
    STREAMS,
    TIMED_OUT,
    Boot,
    ExecutionError,
    ExecutionReport,
    ExecutionResult,
    Limits,
    OutputListener,
    reset_note,
)
from engines.snapshot import BLOCK_BYTES, SnapshotDelta
from engines.vfs import TreeUpdate, VfsLimits

BACKSTOP_SECONDS = 10.0
"""Past the timeout (plus the engine process's own grace), the host kills the process."""
REQUEST_SECONDS = 120.0
"""Deadline of requests other than executions (opening with a large snapshot, ...)."""
CANCEL_GRACE_SECONDS = 2.0
"""How long a cancel lets a snapshot being collected for its run come in before it kills
the engine process (a snapshot takes milliseconds; a process that hangs in one would hold
the run up to `REQUEST_SECONDS`)."""


class _Collection:
    """One wait for a snapshot, and the kill a cancel armed for it, if any."""

    def __init__(self, engine_process: EngineProcess) -> None:
        self.engine_process = engine_process
        self.killer: threading.Timer | None = None


class WorkspaceSource(Protocol):
    """The owner of the tree an engine process's `/workspace` copies."""

    def update_since(self, version: Hashable | None) -> tuple[TreeUpdate, Hashable]:
        """What changed in the tree since `version` (None: nothing is known, the whole
        tree), and the name of the tree's state now."""
        ...


class GuestSession(Protocol):
    """What the workbench drives one guest through (`ProcessSession` implements it): the
    in-process `engines.session.Session` stays inside the engine process."""

    workspace_version: Hashable | None
    """The owner's name for the state of its tree the guest holds (None: unknown)."""
    unstored: SnapshotDelta | None
    """Snapshot blocks taken since the owner last stored one; the owner sets None."""
    build_identity: str
    """The identity (`EngineBuild.identity`) of the engine build the guest runs: what its
    snapshots are valid for, even if the engine is prepared again meanwhile."""

    @property
    def snapshots(self) -> bool:
        """Whether the guest's engine takes snapshots at all."""
        ...

    @property
    def alive(self) -> bool:
        """A live instance is resident (its state is in memory, not only in a snapshot)."""
        ...

    @property
    def private_bytes(self) -> int:
        """The memory the guest's engine process holds of its own."""
        ...

    def execute(
        self,
        code: str,
        env: Mapping[str, str] | None = None,
        cwd: str = WORKSPACE,
        *,
        session: bool = True,
        workspace: WorkspaceSource | None = None,
        timeout: float | None = None,
        cancellation: Cancellation | None = None,
        on_output: OutputListener | None = None,
    ) -> ExecutionReport:
        """Run `code`; `session`: in the persistent REPL scope (else a fresh one)."""
        ...

    def cancel(self) -> None:
        """Interrupt the running execution (from any thread; no-op when idle)."""
        ...

    def take_snapshot(self) -> None:
        """Ask for the snapshot of the state the last run left."""
        ...

    def collect_snapshot(self, cancellation: Cancellation | None = None) -> None:
        """Add the snapshot asked for to `unstored` (a cancel gives it a short grace)."""
        ...

    def reset(self) -> None:
        """Forget all state: the next execution starts a fresh interpreter."""
        ...

    def close(self) -> None:
        """End the session (a running execution is stopped at once)."""
        ...


class Cancellation:
    """A cancel for one execution, safe from any thread, whenever it comes: before the
    execution reaches its engine process (it starts cancelled) or while it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requested = False
        self.reason: str | None = None
        """Why, when the first cancel said (`explained`)."""
        self._actions: list[Callable[[], None]] = []

    def cancel(self, reason: str | None = None) -> None:
        with self._lock:
            if not self.requested:
                self.reason = reason
            self.requested = True
            actions = list(self._actions)
        for action in actions:
            action()

    def explained(self, result: ExecutionResult) -> ExecutionResult:
        """`result`, its "Execution cancelled" followed by the reason the cancel gave (a
        run cancelled because the daemon stopped should say so)."""
        error = result.error
        if self.reason is None or error is None or error.message != CANCELLED:
            return result
        return replace(result, error=replace(error, message=f"{CANCELLED}: {self.reason}"))

    def on_cancel(self, action: Callable[[], None]) -> Callable[[], None]:
        """Call `action` on cancel (at once if it came already); returns the undo."""
        with self._lock:
            self._actions.append(action)
            already = self.requested
        if already:
            action()

        def undo() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._actions.remove(action)

        return undo


def _timeout_message(timeout: float | None) -> str:
    return f"{TIMED_OUT} after {timeout:g} s"


def _no_progress(label: str, fraction: float) -> None:
    del label, fraction


class ProcessSession:
    """One REPL context (or stateless runs) in its own engine process."""

    def __init__(
        self,
        language: str | LanguageEngine,
        *,
        pool: EngineProcessPool,
        workspace: VfsLimits | None = None,
        limits: Limits | None = None,
        restore_source: Callable[[str], SnapshotDelta | None] | None = None,
        cache: EngineCache | None = None,
        progress: Progress | None = None,
        cancellation: Cancellation | None = None,
    ) -> None:
        """`workspace`: the limits of the guest's `/workspace` (None: it has none).
        `progress` hears about preparing the engine, when it is not prepared yet.
        The host never holds a copy of the guest's memory, only snapshots' blocks that
        differ from the engine's image. `restore_source`: where an owner keeps the last
        snapshot it stored (`from_image`) usable by the given engine build (the session's
        `build_identity`), read whenever an engine process is opened; the session then
        keeps only the blocks taken since (`unstored`), which the owner stores. Without a
        source the session keeps them all, and restores from them. `cancellation`: that
        of the execution the session is made for, which cuts its opening short (a
        `PrepareError`; the restore point stays where it is)."""
        self.language_engine = (
            language if isinstance(language, LanguageEngine) else language_engine(language)
        )
        self.workspace = workspace
        self.workspace_version: Hashable | None = None
        """The owner's name for the state of its tree that the engine process holds (the
        owner moves it past the changes of a run it committed; None: the process holds
        nothing yet, or something the owner does not know)."""
        self.limits = limits or Limits()
        self._restore_source = restore_source if self.language_engine.snapshots else None
        self._restorable = False
        """The engine process holds (or a new one would read) a snapshot, so a lost
        instance comes back restored rather than fresh."""
        self._refused_restore: str | None = None
        """Why the engine process refused the restore point it was sent (malformed): the
        next report says the snapshot was dropped, and the session runs fresh."""
        self.unstored: SnapshotDelta | None = None
        """The blocks of snapshots taken since the owner last stored one (it sets this
        to None once they are stored); without an owner, all of them."""
        self._pool = pool
        self._cache = cache or EngineCache(self.language_engine)
        build = self._cache.ready_build(progress or _no_progress)
        self._compiled = self._cache.compiled_path(build)
        self.build_identity = build.identity
        self.preloaded = False
        """Its engine process had the compiled entry loaded before it was forked."""
        pool.preload(self.language_engine.language, self._compiled)
        self._process: EngineProcess | None = None
        self._alive = False
        self._call_lock = threading.Lock()
        self._flags = threading.Lock()
        """Guards the five fields below, which `cancel` reads from another thread."""
        self._executing = False
        self._in_call = False
        self._cancel_pending = False
        self._opening: EngineProcess | None = None
        """The engine process the session is being opened in (a cancel kills it)."""
        self._collecting: _Collection | None = None
        """The snapshot the session waits for (a cancel kills its engine process if it
        is not in within `CANCEL_GRACE_SECONDS`)."""
        self._seq = 0
        """Number of the last execution sent (a cancel names the one it means)."""
        self._snapshot_pending = False
        self._closed = False
        undo = None if cancellation is None else cancellation.on_cancel(self._cancel_opening)
        try:
            self._open()
        finally:
            if undo is not None:
                undo()

    # -- state ---------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """A live instance is resident (its state is in the engine process's memory)."""
        return self._alive and self._process is not None and not self._process.dead

    @property
    def snapshots(self) -> bool:
        return self.language_engine.snapshots

    @property
    def private_bytes(self) -> int:
        """The memory its engine process holds of its own (0 without one)."""
        engine_process = self._process
        return (
            0 if engine_process is None or engine_process.dead else engine_process.private_bytes()
        )

    # -- process -------------------------------------------------------------------------
    def _open_request(self) -> dict[str, Any]:
        return {
            "op": "open",
            "language": self.language_engine.language,
            "compiled": str(self._compiled),
            "workspace": None
            if self.workspace is None
            else codec.vfs_limits_to_json(self.workspace),
            "limits": codec.limits_to_json(self.limits),
        }

    def _send_restore(self, engine_process: EngineProcess, deadline: float) -> int | None:
        """Send `restore` with the restore point, if there is one (right behind `open`):
        as a memory file where the process takes one, else as blocks through its pipe.
        None if there was none, else the bytes handed over in a memory file (0: none)."""
        restore_point = self.unstored
        if self._restore_source is not None:
            self.unstored = None  # the source holds what is stored; the rest is lost
            restore_point = self._restore_source(self.build_identity)
        self._restorable = restore_point is not None
        if restore_point is None:
            return None
        if engine_process.takes_memory_files:
            try:
                header, memory_file = codec.restore_memory_file(restore_point)
            except (OSError, OverflowError, ValueError):  # no memory file to be had (out of
                # descriptors or memory, a stored block past any memory): the pipe takes it,
                # and the engine process judges it as it judges any
                pass
            else:
                try:
                    handed = engine_process.hand_over(memory_file, deadline)
                finally:
                    os.close(memory_file)
                if handed:
                    engine_process.send({"op": "restore", **header}, deadline=deadline)
                    return len(restore_point.blocks) * BLOCK_BYTES
        header, blobs = codec.restore_to_json(restore_point)
        engine_process.send({"op": "restore", **header}, blobs, deadline=deadline)
        return 0

    def _open(self) -> EngineProcess:
        """Start (or reuse) an engine process and open the session in it; a compiled
        module that wasmtime refuses is compiled again once. The restore point is read
        and sent while the engine process opens the session, so that its blocks stream
        in meanwhile."""
        for attempt in range(2):
            engine_process = self._pool.acquire()
            deadline = time.monotonic() + REQUEST_SECONDS
            with self._flags:
                cancelled = self._cancel_pending
                self._opening = None if cancelled else engine_process
            if cancelled:  # before there was a process to kill: this one serves another
                self._pool.release(engine_process)
                raise PrepareError("cancelled")
            try:
                engine_process.send(self._open_request(), deadline=deadline)
                handed_over = self._send_restore(engine_process, deadline)
                answers = [
                    engine_process.receive(deadline)[0]
                    for _ in range(1 if handed_over is None else 2)
                ]
            except (EngineProcessDied, FrameTimeout) as error:
                engine_process.kill()
                reason = str(error) or f"no answer within {REQUEST_SECONDS:g} s"
                raise PrepareError(
                    f"{self.language_engine.language} engine process failed: {reason}"
                ) from None
            except BaseException:
                engine_process.kill()  # its answers are unread: it cannot serve another
                raise
            finally:
                with self._flags:
                    self._opening = None
            # What its session now holds (its last session's went with that session).
            accepted = all(answer.get("ok") for answer in answers)
            engine_process.handed_over = (handed_over or 0) if accepted else 0
            if answers[0].get("ok") and answers[-1].get("kind") == "restore":
                self._restorable = False  # a malformed restore point: run fresh, say so
                self._refused_restore = str(answers[-1].get("message"))
                answers.pop()
            answer = next((answer for answer in answers if not answer.get("ok")), answers[0])
            if answer.get("ok"):
                self.preloaded = answers[0].get("preloaded") is True
                self._process = engine_process
                self._alive = False
                self.workspace_version = None
                return engine_process
            self._pool.release(engine_process)
            if answer.get("kind") == "load" and attempt == 0:
                self._cache.recompile()
                continue
            raise PrepareError(f"{self.language_engine.language} engine: {answer.get('message')}")
        raise AssertionError("unreachable")

    def _live_process(self) -> EngineProcess:
        engine_process = self._process
        if engine_process is None or engine_process.dead:
            if engine_process is not None:
                engine_process.kill()
            engine_process = self._open()
        return engine_process

    def _lost(self) -> None:
        """The process is gone (or must go): kill it; its state is lost."""
        engine_process, self._process = self._process, None
        self._alive = False
        self._snapshot_pending = False
        self.workspace_version = None
        if engine_process is not None:
            engine_process.kill()

    def _collect_snapshot(self, cancellation: Cancellation | None = None) -> None:
        """Apply the snapshot the engine process sent after the last run (call locked);
        a cancel of `cancellation` gives it `CANCEL_GRACE_SECONDS`, then kills the
        process."""
        if not self._snapshot_pending:
            return
        self._snapshot_pending = False
        engine_process = self._process
        if engine_process is None:
            return
        collection = _Collection(engine_process)
        with self._flags:
            self._collecting = collection
        undo = None if cancellation is None else cancellation.on_cancel(self._give_up_collection)
        try:
            answer, blobs = engine_process.receive(time.monotonic() + REQUEST_SECONDS)
        except (EngineProcessDied, FrameTimeout):
            self._lost()
            return
        finally:
            if undo is not None:
                undo()
            with self._flags:
                self._collecting = None
                if collection.killer is not None:
                    collection.killer.cancel()
        delta = answer.get("snapshot")
        if not (answer.get("ok") and isinstance(delta, dict)):
            return
        self.unstored = codec.merge_delta(self.unstored, delta, blobs)
        self._restorable = True

    # -- the Session surface -------------------------------------------------------------
    def execute(
        self,
        code: str,
        env: Mapping[str, str] | None = None,
        cwd: str = WORKSPACE,
        *,
        session: bool = True,
        workspace: WorkspaceSource | None = None,
        timeout: float | None = None,
        cancellation: Cancellation | None = None,
        on_output: OutputListener | None = None,
    ) -> ExecutionReport:
        """Run `code` (see `engines.session.Session.execute`), first bringing the engine
        process's workspace up to date from `workspace`; `timeout` is this run's
        wall-clock limit instead of the session's; `cancellation` cancels it, even when
        it was cancelled before this call; `on_output` is told of the guest's output as
        the engine process forwards it (on the calling thread)."""
        if self._closed:
            raise RuntimeError("session is closed")
        # Executing from before the wait for the call lock (a snapshot may be on its way
        # in): a cancel in that wait is kept for the request, not dropped as "idle".
        with self._flags:
            self._executing, self._cancel_pending = True, False
        undo = None if cancellation is None else cancellation.on_cancel(self.cancel)
        try:
            with self._call_lock:
                return self._execute_locked(code, env, cwd, session, workspace, timeout, on_output)
        finally:
            if undo is not None:
                undo()
            with self._flags:
                self._executing = self._in_call = self._cancel_pending = False

    def _execute_locked(
        self,
        code: str,
        env: Mapping[str, str] | None,
        cwd: str,
        session: bool,
        workspace: WorkspaceSource | None,
        timeout: float | None,
        on_output: OutputListener | None,
    ) -> ExecutionReport:
        self._collect_snapshot()
        try:
            engine_process = self._live_process()
        except PrepareError as error:
            if self._cancel_pending:  # the open was cut short: the state stays where it was
                return self._failure(code, LIMIT_ERROR, CANCELLED, cwd, self._expected_boot())
            return self._failure(code, ENGINE_ERROR, str(error), cwd)
        blobs: list[codec.Blob] = []
        update: TreeUpdate | None = None
        version: Hashable | None = None
        if workspace is not None:  # asked now: the process may be new since the last run
            update, version = workspace.update_since(self.workspace_version)
        boot = self._expected_boot()
        if timeout is None:
            timeout = self.limits.timeout_seconds
        deadline = None if timeout is None else time.monotonic() + timeout + BACKSTOP_SECONDS
        with self._flags:
            self._seq = engine_process.next_seq()
            self._in_call = True
            request = {
                "op": "execute",
                "seq": self._seq,
                "code": code,
                "env": dict(env or {}),
                "cwd": cwd,
                "session": session,
                "timeout": timeout,
                "cancelled": self._cancel_pending,  # cancelled before it was even sent
                "stream": on_output is not None,
            }
            if update is not None:
                request["update"] = codec.update_to_json(update, blobs)
        try:
            engine_process.send(request, blobs, deadline=deadline)
            answer, answer_blobs = engine_process.receive(deadline)
            while "output" in answer:  # streamed output comes before the answer
                if on_output is not None and answer["output"] in STREAMS and answer_blobs:
                    on_output(answer["output"], bytes(answer_blobs[0]))
                answer, answer_blobs = engine_process.receive(deadline)
        except FrameTimeout:
            self._lost()
            return self._failure(code, LIMIT_ERROR, _timeout_message(timeout), cwd, boot)
        except EngineProcessDied as error:
            self._lost()
            if self._cancel_pending:  # killed by a cancel that came as it was opened
                return self._failure(code, LIMIT_ERROR, CANCELLED, cwd, boot)
            return self._failure(code, ENGINE_ERROR, str(error), cwd, boot)
        if not answer.get("ok"):
            self._lost()
            return self._failure(code, ENGINE_ERROR, str(answer.get("message")), cwd, boot)
        try:
            report = codec.report_from_json(answer["report"], answer_blobs)
        except (KeyError, TypeError, ValueError) as error:
            self._lost()
            return self._failure(code, ENGINE_ERROR, f"malformed answer: {error}", cwd, boot)
        if answer.get("exiting"):  # the engine process answered for a stuck guest
            self._lost()
            report.boot, report.cwd = boot, cwd
        else:
            self._alive = bool(answer.get("alive"))
            self.workspace_version = version
        if self._refused_restore is not None:
            report.restore_point_dropped = True
            report.notes.append(
                f"the context's memory snapshot could not be restored "
                f"({self._refused_restore}); it started fresh"
            )
            self._refused_restore = None
        if report.restore_point_dropped:
            self._restorable = False
            if self._restore_source is None:
                self.unstored = None
            engine_process.handed_over = 0  # it let go of a memory file it was handed
        return report

    def _expected_boot(self) -> Boot:
        """Where the next execution's instance comes from, as the engine process will
        decide it (used when the process cannot tell: it was killed)."""
        if self.alive:
            return Boot.RESIDENT
        return Boot.RESTORED if self._restorable else Boot.FRESH

    def _failure(
        self, code: str, name: str, message: str, cwd: str, boot: Boot = Boot.FRESH
    ) -> ExecutionReport:
        result = ExecutionResult(
            code=code,
            language=self.language_engine.language,
            engine=self.language_engine.engine,
            duration_ms=0.0,
            error=ExecutionError(name, message[:HOST_MESSAGE_CHARS], []),
        )
        notes = [reset_note(restorable=self._restorable)]
        return ExecutionReport(result, cwd, boot, invalidated=True, notes=notes)

    def cancel(self) -> None:
        """Interrupt the running execution, even one still being prepared (safe from any
        thread; no-op when idle)."""
        with self._flags:
            if not self._executing:
                return
            sent = self._in_call
            if not sent:  # set with the check: the request takes it, or the open ends
                self._cancel_pending = True
            seq, engine_process = self._seq, self._process
            if not sent and self._opening is not None:
                # Killed under the lock: once the open lets go of the process (to the pool
                # or to the session) no kill of this cancel can land on it.
                self._opening.kill()  # an engine process that hangs would hold it long
            if not sent:
                self._arm_collection_kill()
        if not sent:
            return
        if engine_process is not None and not engine_process.dead:
            with contextlib.suppress(EngineProcessDied):
                engine_process.send_cancel(seq)

    def _give_up_collection(self) -> None:
        """The run a snapshot is collected for was cancelled (from any thread)."""
        with self._flags:
            self._arm_collection_kill()

    def _arm_collection_kill(self) -> None:
        """Kill the engine process of the snapshot being collected, if it has not come
        in `CANCEL_GRACE_SECONDS` from now (called under `_flags`)."""
        collection = self._collecting
        if collection is None or collection.killer is not None:
            return
        collection.killer = threading.Timer(
            CANCEL_GRACE_SECONDS, self._kill_if_collecting, (collection,)
        )
        collection.killer.daemon = True
        collection.killer.start()

    def _kill_if_collecting(self, collection: _Collection) -> None:
        """Kill the engine process if the session still waits for that snapshot: the
        state of the run it was taken after is lost, as in a crash between an answer and
        its snapshot."""
        with self._flags:  # under the lock, as in `cancel`: never a later collection
            if self._collecting is collection:
                collection.engine_process.kill()

    def _cancel_opening(self) -> None:
        """Cancel the opening of the session for its first execution: the process it is
        opened in is killed (an engine process that hangs would hold the open up to its
        deadline), and the constructor raises `PrepareError`."""
        with self._flags:  # killed under the lock, as in `cancel`
            self._cancel_pending = True
            if self._opening is not None:
                self._opening.kill()

    def take_snapshot(self) -> None:
        """Ask for the snapshot of the state the last run left; it is taken after the
        answer went out and collected before the next request (`unstored`)."""
        if not self.language_engine.snapshots or not self.alive:
            return
        with self._call_lock:
            engine_process = self._process
            if engine_process is None or self._snapshot_pending:
                return
            try:
                engine_process.send({"op": "snapshot"}, deadline=time.monotonic() + REQUEST_SECONDS)
            except EngineProcessDied:
                self._lost()
                return
            self._snapshot_pending = True

    def collect_snapshot(self, cancellation: Cancellation | None = None) -> None:
        """Receive the snapshot `take_snapshot` asked for and add it to `unstored` (one
        not collected is received before the next request instead); a cancel of
        `cancellation` waits `CANCEL_GRACE_SECONDS` for it, then kills the engine process
        (the run's state is lost, as in a crash)."""
        with self._call_lock:
            self._collect_snapshot(cancellation)

    def reset(self) -> None:
        """Forget all state: the next execution starts a fresh interpreter."""
        with self._call_lock:
            self._collect_snapshot()
            self.unstored = None
            self._restorable = False
            engine_process = self._process
            if engine_process is None:
                return
            try:
                deadline = time.monotonic() + REQUEST_SECONDS
                engine_process.send({"op": "reset"}, deadline=deadline)
                engine_process.receive(deadline)
            except (EngineProcessDied, FrameTimeout):
                self._lost()
            engine_process.handed_over = 0  # the restore point went with the state
            self._alive = False

    def close(self) -> None:
        """End the session; a running execution is stopped at once (its process killed)."""
        if self._closed:
            return
        self._closed = True
        if not self._call_lock.acquire(blocking=False):
            self._lost()  # an execution is running: do not wait for it
            return
        try:
            self._collect_snapshot()
            engine_process, self._process = self._process, None
            if engine_process is None or engine_process.dead:
                return
            try:
                deadline = time.monotonic() + 2.0
                engine_process.send({"op": "close"}, deadline=deadline)
                answer, _ = engine_process.receive(deadline)
            except (EngineProcessDied, FrameTimeout):
                engine_process.kill()
                return
            if answer.get("ok"):
                self._pool.release(engine_process)
            else:
                engine_process.kill()
        finally:
            self._call_lock.release()

    def __enter__(self) -> ProcessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_stateless(
    pool: EngineProcessPool,
    language: str | LanguageEngine,
    code: str,
    env_vars: Mapping[str, str] | None = None,
    *,
    limits: Limits | None = None,
    progress: Progress | None = None,
    cancellation: Cancellation | None = None,
) -> ExecutionResult:
    """Stateless execution (spec 9.4) in an engine process: one round trip (`progress`
    hears about preparing the engine first, when needed). `cancellation` ends the
    process (it holds nothing else) and the result says "Execution cancelled"."""
    spec = language if isinstance(language, LanguageEngine) else language_engine(language)
    limits = limits or Limits()
    compiled = EngineCache(spec).ready_compiled_path(progress or _no_progress)
    pool.preload(spec.language, compiled)
    request = {
        "op": "run",
        "language": spec.language,
        "compiled": str(compiled),
        "workspace": None,
        "limits": codec.limits_to_json(limits),
        "code": code,
        "env": dict(env_vars or {}),
        "session": False,
    }
    timeout = limits.timeout_seconds
    engine_process = pool.acquire()
    deadline = None if timeout is None else time.monotonic() + timeout + BACKSTOP_SECONDS
    undo = None if cancellation is None else cancellation.on_cancel(engine_process.kill)
    try:
        engine_process.send({**request, "seq": engine_process.next_seq()}, deadline=deadline)
        answer, _ = engine_process.receive(deadline)
    except FrameTimeout:
        engine_process.kill()
        message = _timeout_message(timeout)
        return ExecutionResult(
            code, spec.language, spec.engine, 0.0, error=ExecutionError(LIMIT_ERROR, message, [])
        )
    except EngineProcessDied as error:
        if cancellation is not None and cancellation.requested:
            failure = ExecutionError(LIMIT_ERROR, CANCELLED, [])
        else:
            failure = ExecutionError(ENGINE_ERROR, str(error), [])
        return ExecutionResult(code, spec.language, spec.engine, 0.0, error=failure)
    finally:
        if undo is not None:
            undo()
    if answer.get("exiting") or not answer.get("ok") or engine_process.dead:
        engine_process.kill()  # it answered for a stuck guest, failed or was cancelled: not reused
    else:
        pool.release(engine_process)
    if not answer.get("ok"):
        message = f"{spec.language} engine: {answer.get('message')}"
        if answer.get("kind") == "load":
            raise PrepareError(message)
        failure = ExecutionError(ENGINE_ERROR, message[:HOST_MESSAGE_CHARS], [])
        return ExecutionResult(code, spec.language, spec.engine, 0.0, error=failure)
    return codec.report_from_json(answer["report"]).result
