"""Executions on a live guest: stateful sessions and stateless runs.

A `Session` owns one wasmtime engine (so interrupting it never touches another session),
one store and at most one live guest instance. Each execution gets a fresh fuel budget,
an epoch deadline enforced by the watchdog, and is cancellable from any thread. After any
trap the instance is discarded; the next execution restores the last snapshot where the
engine supports snapshots, otherwise it starts fresh, and the report says which.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final

import wasmtime

from engines.cache import EngineCache
from engines.components.wasi.abi import MemoryUser
from engines.host import IDLE_EPOCH_DEADLINE, WORKSPACE, OutputCapture
from engines.language import Artifact, GuestInstance, LanguageEngine
from engines.proto import envelope_pb2
from engines.registry import language_engine
from engines.result import (
    CANCELLED,
    ENGINE_ERROR,
    FUEL_EXHAUSTED,
    HOST_MESSAGE_CHARS,
    LIMIT_ERROR,
    TIMED_OUT,
    Boot,
    ExecutionError,
    ExecutionReport,
    ExecutionResult,
    JsonValue,
    Limits,
    OutputListener,
    ResultEntry,
    Usage,
    reset_note,
    well_formed,
)
from engines.snapshot import MemorySnapshot
from engines.vfs import TreeUpdate, VirtualFS
from engines.watchdog import WATCHDOG

MAX_RESULT_NESTING: Final = 512
"""Levels of nesting of a result's `json` passed on; a deeper value is given as its JSON
text. Every hop after this one (the engine process's answer, the daemon's or `serve`'s,
a client, the TUI) encodes or decodes the value with Python's `json`, which recurses once
per level from wherever it runs: a Python guest's 975 levels made the daemon answer 500.
The reference's guests nest at most about 1,000 levels (their own encoders stop there)."""


def _nesting(value: JsonValue) -> int:
    """The levels of lists and objects in `value` (a stack, not recursion)."""
    deepest = 0
    pending: list[tuple[JsonValue, int]] = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Iterable[JsonValue] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        pending.extend((child, level + 1) for child in children)
    return deepest


def _json_result(text: str) -> ResultEntry:
    """A JSON result, or its text where Python's parser refuses it (an integer of more than
    4,300 digits) or it nests deeper than `MAX_RESULT_NESTING`: never an error of the
    host's."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return ResultEntry(text=text)
    # Only a text with that many brackets can nest that deep (counting them is C speed).
    if text.count("[") + text.count("{") > MAX_RESULT_NESTING and (
        _nesting(value) > MAX_RESULT_NESTING
    ):
        return ResultEntry(text=text)
    return ResultEntry(json=value, is_json=True)


def _close_store(store: wasmtime.Store) -> None:
    """Close a store and its WASI host's handles."""
    host = store.data()
    if isinstance(host, MemoryUser):
        host.close()
    store.close()


def _host_message(error: BaseException) -> str:
    return str(error).strip()[:HOST_MESSAGE_CHARS]


_MOZ_CRASH = re.compile(r"MOZ_CRASH\((.*)\)")


def _trap_message(trap: BaseException, stderr: str) -> str:
    """A trap's cause, without wasmtime's backtrace of unnamed functions (`<wasm function
    7555>` tells a user nothing), and with SpiderMonkey's reason when it crashed (its
    heap is full: `MOZ_CRASH([unhandlable oom] …)` on the guest's stderr)."""
    text = str(trap).strip()
    _, caused, cause = text.partition("Caused by:")
    message = cause.strip() if caused else text
    crash = _MOZ_CRASH.search(stderr)
    if crash is not None:
        message += f" (SpiderMonkey crashed: {crash.group(1)})"
    return message[:HOST_MESSAGE_CHARS]


def _up_to(budget: int, listener: OutputListener) -> OutputListener:
    """`listener`, told of at most `budget` bytes in all: output past the limit would only
    be dropped from the result, so it is not streamed either."""
    told = 0

    def limited(stream: str, data: bytes) -> None:
        nonlocal told
        room = budget - told
        if room > 0:
            told += min(len(data), room)
            listener(stream, data[:room])

    return limited


def _split_lines(data: bytes) -> list[str]:
    """Spec 3.4: concatenated writes split on newline, a trailing empty piece dropped."""
    if not data:
        return []
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class Session:
    """One live guest interpreter for one language (a REPL context, or stateless runs)."""

    def __init__(
        self,
        language: str | LanguageEngine,
        *,
        workspace: VirtualFS | None = None,
        limits: Limits | None = None,
        restore_point: MemorySnapshot | None = None,
        cache: EngineCache | None = None,
        compiled: Path | None = None,
        loaded: tuple[wasmtime.Engine, Artifact] | None = None,
    ) -> None:
        """`workspace`: the tree the guest sees at `/workspace` (None: it has none, as a
        stateless run). `compiled`: load this prepared, compiled entry instead of asking
        the cache (an engine process is handed the path by its parent, which prepares
        engines). `loaded`: that entry already loaded into its engine (an engine process
        forked after its fork server loaded it)."""
        self.language_engine = (
            language if isinstance(language, LanguageEngine) else language_engine(language)
        )
        self.workspace = workspace
        self.limits = limits or Limits()
        self.restore_point = restore_point if self.language_engine.snapshots else None
        self._engine: wasmtime.Engine
        self._artifact: Artifact
        if loaded is not None:
            self._engine, self._artifact = loaded
        else:
            self._engine = self.language_engine.new_engine()
            self._artifact = (
                self.language_engine.load_compiled(self._engine, compiled)
                if compiled is not None
                else (cache or EngineCache(self.language_engine)).load(self._engine)
            )
        self._wake = threading.Event()
        """Set with the epoch when an execution is interrupted: wakes a guest that waits
        in its WASI host (a sleep, a poll) so that it traps at once."""
        self._output = OutputCapture()
        self._store: wasmtime.Store | None = None
        self._instance: GuestInstance | None = None
        self._prepared: tuple[wasmtime.Store, GuestInstance] | None = None
        """A fresh instance made ahead of the first execution (`prepare`)."""
        self._lock = threading.Lock()
        self._interrupted: str | None = None
        """Why the running execution was interrupted (None: the wall-clock deadline)."""
        self.in_call_since: float | None = None
        """`time.monotonic()` when the guest call now running started (None when idle)."""
        self._pending_notes: list[str] = []
        self._restore_dropped = False
        self._closed = False

    @property
    def fuel_limit(self) -> int:
        return self.language_engine.fuel if self.limits.fuel is None else self.limits.fuel

    @property
    def alive(self) -> bool:
        """A live instance is resident (its state is in memory)."""
        return self._instance is not None

    def prepare(self) -> None:
        """Make the instance the next execution boots, ahead of it, where that instance
        does not depend on the restore point (`restores_into_fresh_instance`): an engine
        process does so while a context's restore point is still on its way in."""
        if not self.language_engine.restores_into_fresh_instance:
            return
        with self._lock:
            if self._closed or self._instance is not None or self._prepared is not None:
                return
            store = self._new_store()
            try:
                instance = self.language_engine.instantiate(self._engine, self._artifact, store)
            except BaseException:
                _close_store(store)
                raise
            self._prepared = (store, instance)

    def _new_store(self) -> wasmtime.Store:
        self._output = OutputCapture()
        return self.language_engine.new_store(
            self._engine,
            self._output,
            workspace=self.workspace,
            memory_bytes=self.limits.memory_bytes,
            wake=self._wake,
        )

    def _drop_instance(self) -> None:
        """Forget the instance; its WASI host's handles close (an unlinked file they held
        open stops counting against the workspace)."""
        store, self._store, self._instance = self._store, None, None
        if store is not None:
            _close_store(store)

    def _boot(self) -> Boot:
        """Make an instance resident: restore the restore point if there is one, else fresh."""
        if self._instance is not None:
            return Boot.RESIDENT
        prepared, self._prepared = self._prepared, None
        store, fresh = prepared if prepared is not None else (self._new_store(), None)
        try:
            if self.restore_point is not None:
                try:
                    if fresh is not None:
                        self.language_engine.load_snapshot(store, fresh, self.restore_point)
                        instance = fresh
                    else:
                        instance = self.language_engine.restore(
                            self._engine, self._artifact, store, self.restore_point
                        )
                    boot = Boot.RESTORED
                except Exception as error:  # a snapshot that cannot be loaded: start fresh
                    _close_store(store)  # and the files its host took back go again
                    self._drop_restore_point(
                        f"the context's memory snapshot could not be restored "
                        f"({_host_message(error)}); it started fresh"
                    )
                    return self._boot()
            else:
                instance = fresh or self.language_engine.instantiate(
                    self._engine, self._artifact, store
                )
                boot = Boot.FRESH
        except BaseException:
            _close_store(store)
            raise
        self._store, self._instance = store, instance
        return boot

    def _drop_restore_point(self, note: str) -> None:
        self.restore_point = None
        self._restore_dropped = True
        self._pending_notes.append(note)

    def cancel(self) -> None:
        """Interrupt the running execution (safe from any thread; no-op when idle)."""
        self.interrupt(CANCELLED)

    def interrupt(self, message: str) -> None:
        """Stop the running execution with `message` as its `ExecutionLimitError` (safe
        from any thread; no-op when idle)."""
        if self._interrupted is None:
            self._interrupted = message
        self._stop_guest()

    def _stop_guest(self) -> None:
        """Trap the running guest at its next epoch check, waking it from a host wait."""
        self._engine.increment_epoch()
        self._wake.set()

    def execute(
        self,
        code: str,
        env: Mapping[str, str] | None = None,
        cwd: str = WORKSPACE,
        *,
        session: bool = True,
        pending_interrupt: Callable[[], str | None] | None = None,
        update: TreeUpdate | None = None,
        timeout: float | None = None,
        on_output: OutputListener | None = None,
    ) -> ExecutionReport:
        """Run `code` with exactly `env` as the guest's environment (`timeout`: this run's
        wall-clock limit instead of the session's).

        `on_output` is told of the guest's stdout and stderr writes as they happen (up to
        the output limit; only what the host captures: JavaScript's console travels in
        the answer), on the thread that runs the guest. The result holds them all anyway.

        `pending_interrupt`: asked once the guest call is armed, for a reason to stop it
        that arrived before the guest started (a cancel while the instance booted); an
        `interrupt()` after that point interrupts the call itself. `update` brings the
        workspace up to date first. The run's workspace changes are kept and returned
        unless it ends with an error: then they are taken back (spec 6.6)."""
        if self._closed:
            raise RuntimeError("session is closed")
        with self._lock, self._limited(timeout):
            self._pending_notes, self._restore_dropped = [], False
            workspace = self.workspace
            if workspace is not None:
                if update is not None:
                    workspace.update(update)
                workspace.begin()
            try:
                report = self._execute(
                    code, dict(env or {}), cwd, session, pending_interrupt, on_output
                )
            except BaseException:
                if workspace is not None:
                    workspace.finish(keep=False)
                raise
            if workspace is not None:
                report.changes = workspace.finish(keep=report.result.error is None)
            report.notes[:0] = self._pending_notes
            report.restore_point_dropped = self._restore_dropped
            return report

    @contextlib.contextmanager
    def _limited(self, timeout: float | None) -> Iterator[None]:
        """`limits` with `timeout` as the wall-clock limit while one run lasts."""
        if timeout is None:
            yield
            return
        session_limits = self.limits
        self.limits = replace(session_limits, timeout_seconds=timeout)
        try:
            yield
        finally:
            self.limits = session_limits

    def _execute(
        self,
        code: str,
        env: dict[str, str],
        cwd: str,
        session: bool,
        pending_interrupt: Callable[[], str | None] | None,
        on_output: OutputListener | None,
    ) -> ExecutionReport:
        started = time.perf_counter()
        cpu_started = time.thread_time()
        self._interrupted = None
        self._wake.clear()
        try:
            boot = self._boot()
        except (wasmtime.WasmtimeError, wasmtime.Trap, wasmtime.ExitTrap, RuntimeError) as error:
            return self._failure(code, ENGINE_ERROR, _host_message(error), cwd, Boot.FRESH)
        store, instance = self._store, self._instance
        assert store is not None and instance is not None
        fuel_limit = self.fuel_limit
        self._output.reset()
        if on_output is not None:
            self._output.listener = _up_to(self.limits.output_bytes, on_output)
        instance.meter.remaining = fuel_limit
        request = envelope_pb2.ExecuteRequest(
            code=well_formed(code),
            env={well_formed(key): well_formed(value) for key, value in env.items()},
            session=session,
            cwd=well_formed(cwd) if session else "",
            result_limit=self.limits.result_bytes,
            console_limit_units=self.limits.output_bytes,
            console_limit_entries=self.limits.output_writes,
            restored=boot is Boot.RESTORED,
        )
        payload = request.SerializeToString()
        token = None
        store.set_epoch_deadline(1)
        if self.limits.timeout_seconds is not None:
            token = WATCHDOG.arm(self._stop_guest, self.limits.timeout_seconds)
        trap: BaseException | None = None
        raw = b""
        self.in_call_since = time.monotonic()
        reason = pending_interrupt() if pending_interrupt is not None else None
        if reason is not None:
            self.interrupt(reason)  # traps at the guest's first instruction
        try:
            raw = instance.call(payload)
        except Exception as error:  # traps, guest exits, adapter failures: never the caller's
            trap = error
        finally:
            self.in_call_since = None
            self._output.listener = None
            if token is not None:
                WATCHDOG.disarm(token)
            store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
        duration_ms = (time.perf_counter() - started) * 1000
        usage = Usage(
            fuel_consumed=fuel_limit - instance.meter.remaining,
            fuel_limit=fuel_limit,
            memory_bytes=self._memory_bytes(instance),
        )
        if trap is not None:
            report = self._trapped(code, trap, duration_ms, usage, cwd, boot, session)
        else:
            report = self._completed(code, raw, duration_ms, usage, cwd, boot, session)
        report.cpu_ms = (time.thread_time() - cpu_started) * 1000
        return report

    def _memory_bytes(self, instance: GuestInstance) -> int:
        size = getattr(instance, "memory_size", None)
        return int(size()) if callable(size) else 0

    def _trapped(
        self,
        code: str,
        trap: BaseException,
        duration_ms: float,
        usage: Usage,
        cwd: str,
        boot: Boot,
        session: bool,
    ) -> ExecutionReport:
        trap_code = getattr(trap, "trap_code", None)
        if trap_code == wasmtime.TrapCode.UNREACHABLE and usage.fuel_consumed == usage.fuel_limit:
            name, text = LIMIT_ERROR, FUEL_EXHAUSTED
        elif trap_code == wasmtime.TrapCode.INTERRUPT:  # not a message: guests write those
            name, text = LIMIT_ERROR, self._interrupted or self.timeout_message()
        elif isinstance(trap, wasmtime.ExitTrap):
            stderr = self._output.stderr.decode("utf-8", errors="replace").strip()
            detail = f": {stderr.splitlines()[0]}" if stderr else ""
            name, text = ENGINE_ERROR, f"guest exited with status {trap.code}{detail}"
        else:
            stderr = self._output.stderr.decode("utf-8", errors="replace")
            name, text = ENGINE_ERROR, _trap_message(trap, stderr)
        stdout, stderr_lines = self._logs(session)
        self._drop_instance()
        if (
            boot is Boot.RESTORED
            and name == ENGINE_ERROR
            and not isinstance(trap, wasmtime.ExitTrap)
        ):
            # The instance restored from the snapshot failed in the host adapter or the
            # interpreter at once (a guest exiting, e.g. out of memory, is its own doing):
            # do not restore it again.
            self._drop_restore_point(
                "the interpreter restored from the context's memory snapshot failed; "
                "the snapshot was dropped and the next run starts fresh"
            )
        result = ExecutionResult(
            code=code,
            language=self.language_engine.language,
            engine=self.language_engine.engine,
            duration_ms=duration_ms,
            stdout=stdout,
            stderr=stderr_lines,
            error=ExecutionError(name, text, []),
            usage=usage if session else None,
        )
        note = reset_note(restorable=self.restore_point is not None)
        return ExecutionReport(result, cwd, boot, invalidated=True, notes=[note])

    def captured_logs(self) -> tuple[list[str], list[str]]:
        """The running execution's stdout and stderr lines so far (within the limits)."""
        return self._logs(True)

    def timeout_message(self) -> str:
        return f"{TIMED_OUT} after {self.limits.timeout_seconds:g} s"

    def _logs(self, session: bool) -> tuple[list[str], list[str]]:
        """Captured WASI output so far: kept for sessions, dropped for stateless runs."""
        if not session:
            return [], []
        cap = self.limits.output_bytes
        return _split_lines(bytes(self._output.stdout[:cap])), _split_lines(
            bytes(self._output.stderr[: max(cap - len(self._output.stdout), 0)])
        )

    def _completed(
        self,
        code: str,
        raw: bytes,
        duration_ms: float,
        usage: Usage,
        cwd: str,
        boot: Boot,
        session: bool,
    ) -> ExecutionReport:
        response = envelope_pb2.ExecuteResponse()
        try:
            response.ParseFromString(raw)
        except Exception as decode_error:  # protobuf's DecodeError; a guest bug, not user error
            self._drop_instance()
            return self._failure(
                code, ENGINE_ERROR, f"invalid guest response: {decode_error}", cwd, boot
            )
        results: list[ResultEntry] = []
        if response.HasField("result"):
            if response.result.WhichOneof("value") == "json":
                results.append(_json_result(response.result.json))
            else:
                results.append(ResultEntry(text=response.result.text))
        error = None
        if response.HasField("error"):
            error = ExecutionError(
                response.error.name, response.error.message, list(response.error.traceback)
            )
        if self.language_engine.console_in_envelope:
            stdout = [line.text for line in response.console if line.stream == line.STDOUT]
            stderr = [line.text for line in response.console if line.stream == line.STDERR]
        else:
            stdout = _split_lines(bytes(self._output.stdout))
            stderr = _split_lines(bytes(self._output.stderr))
        invalidated = False
        notes: list[str] = []
        limit = self._wasi_limit_exceeded(results, error)
        if limit is not None:
            error = ExecutionError(LIMIT_ERROR, limit, [])
            stdout, stderr = self._logs(session)
            results = []
            invalidated = True
            notes.append(reset_note(restorable=self.restore_point is not None))
            self._drop_instance()
        new_cwd = response.cwd if session and response.cwd else cwd
        result = ExecutionResult(
            code=code,
            language=self.language_engine.language,
            engine=self.language_engine.engine,
            duration_ms=duration_ms,
            stdout=stdout,
            stderr=stderr,
            results=results,
            error=error,
            usage=usage if (session or limit is None) else None,
        )
        return ExecutionReport(result, new_cwd, boot, invalidated=invalidated, notes=notes)

    def _wasi_limit_exceeded(
        self, results: list[ResultEntry], error: ExecutionError | None
    ) -> str | None:
        """Spec 9.2 output and result limits for languages whose stdio the host captures
        (spec 3.2: Ruby's result limit covers its whole answer, `error` too)."""
        if self.language_engine.console_in_envelope:
            return None
        output = self._output
        if (
            output.total_bytes > self.limits.output_bytes
            or output.writes > self.limits.output_writes
        ):
            return "Output limit exceeded"
        # Compact, as the reference encodes the results array it measures.
        measured: JsonValue = [entry.to_json() for entry in results]
        if self.language_engine.result_limit_on_envelope:
            measured = {"results": measured, "error": None if error is None else error.to_json()}
        encoded = json.dumps(measured, ensure_ascii=False, separators=(",", ":"))
        # A lone surrogate (a guest's "\ud800") has no UTF-8: it counts as its escape.
        if len(encoded.encode("utf-8", "backslashreplace")) > self.limits.result_bytes:
            return "Result limit exceeded"
        return None

    def _failure(self, code: str, name: str, message: str, cwd: str, boot: Boot) -> ExecutionReport:
        """A host-level failure: empty logs, no usage (spec 2.2.1)."""
        result = ExecutionResult(
            code=code,
            language=self.language_engine.language,
            engine=self.language_engine.engine,
            duration_ms=0.0,
            error=ExecutionError(name, message, []),
        )
        return ExecutionReport(result, cwd, boot, invalidated=True)

    def take_snapshot(self) -> MemorySnapshot | None:
        """Snapshot the live instance (snapshot engines only); it becomes the restore point."""
        if not self.language_engine.snapshots or self._instance is None or self._store is None:
            return None
        with self._lock:
            snapshot = self.language_engine.take_snapshot(
                self._store, self._instance, self.restore_point
            )
        self.restore_point = snapshot
        return snapshot

    def reset(self) -> None:
        """Forget all state: the next execution starts a fresh interpreter."""
        with self._lock:
            self._drop_instance()
            self.restore_point = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._drop_instance()
            prepared, self._prepared = self._prepared, None
            if prepared is not None:
                _close_store(prepared[0])

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
