"""Runs code in one sandbox's contexts on the local engines (spec 2.4.1, 6.6, 7).

Each context's engine process keeps its own copy of the sandbox's `/workspace` tree in
memory, where the guest's writes are checked against the limits as they happen: a run
is sent what changed in the tree since that process last saw it, and answers with what
the run changed (nothing when it failed: the engine took its changes back, spec 6.6).
Files, the snapshot, the context row and the history entry are then stored in one
transaction. The
engine runs in an engine process that a worker thread waits on, so a blocked guest never
holds up the event loop or another sandbox.

Context memory snapshots (spec 7.6-7.7) are restored from the store, and stored with the
run that made them. After each successful run the engine process takes a snapshot of what
the run changed, and the run's transaction stores it with the context row and the history
entry: the 4 KiB blocks the run changed enter the context's map of content-addressed
blocks (for a new snapshot, the blocks that differ from the engine's image, which a
restore writes into a fresh instance, as the reference restores its changed pages). So an
answered run is a stored one: the next request sees its snapshot and a killed daemon
loses no acknowledged state, as with the reference, which snapshots before it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from engines.process import Cancellation, GuestSession, ProcessSession
from engines.result import (
    CANCELLED,
    LIMIT_ERROR,
    Boot,
    ContextRef,
    ExecutionError,
    ExecutionReport,
    ExecutionResult,
    Limits,
    OutputListener,
    SessionState,
)
from engines.snapshot import PAGE_BYTES, SnapshotDelta
from engines.vfs import TreeUpdate
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.sandbox_state import ContextRow, SandboxState
from workbench.backends.local.settings import LocalResources
from workbench.core.changes import ChangeSet
from workbench.core.envvars import layer_env
from workbench.core.paths import WorkspaceOSError
from workbench.core.workspace import GUEST_LIMITS
from workbench.protocol.errors import ErrorCode, make_error
from workbench.protocol.timestamps import iso_from_ms
from workbench.store.database import BLOCK_BYTES, CHUNK_BYTES, Transaction


class TakenSnapshot:
    """A snapshot the engine process took after a run, on its way into the run's
    transaction: the blocks changed since the last one stored; `elapsed_ms` counts taking
    it and adding it to the transaction."""

    def __init__(self, session: GuestSession, delta: SnapshotDelta, elapsed_ms: float):
        self.session = session
        self.delta = delta
        self.elapsed_ms = elapsed_ms
        self.chunks_written: int | None = None
        """1 MiB chunks the reference would write for it (set once stored)."""

    def committed(self) -> None:
        """The store holds these blocks now; a failed commit keeps them for the next
        snapshot, which adds its own."""
        if self.session.unstored is self.delta:
            self.session.unstored = None


class ContextSnapshots:
    """Restore points from the store, and snapshots into a run's transaction."""

    def __init__(self, state: SandboxState, resources: LocalResources):
        self._state = state
        self._store = resources.store
        self._runtimes = resources.runtimes
        self._clock = resources.clock

    def restore_point(self, row: ContextRow, build: str) -> SnapshotDelta | None:
        """The stored snapshot to start the context's engine from, if it has one usable by
        `build` (the identity of the engine build that restores it): its blocks that differ
        from the engine's image."""
        snapshot = row.snapshot
        runtime = self._runtimes[row.binding]
        if snapshot is None or not runtime.language_engine.snapshots:
            return None
        if snapshot.get("build") != build:
            row.snapshot = None  # spec 7.6: a snapshot of another engine build is dropped
            return None
        blocks = self._store.snapshot_blocks(self._state.id, row.id)
        return SnapshotDelta(
            int(snapshot["memoryPages"]) * PAGE_BYTES,
            {index: memoryview(block) for index, block in blocks.items()},
            dict(snapshot["globals"]),
            dict(snapshot["extra"]),
            from_image=True,
        )

    @staticmethod
    def take(session: GuestSession, cancellation: Cancellation | None) -> TakenSnapshot | None:
        """The snapshot of the state the last run left (spec 7.7), or None when the
        engine process could not give one (it is gone, or hung in it past a cancel of
        the run)."""
        started = time.perf_counter()
        session.take_snapshot()
        session.collect_snapshot(cancellation)
        delta = session.unstored
        if delta is None or not session.alive:
            return None
        return TakenSnapshot(session, delta, (time.perf_counter() - started) * 1000)

    def store(self, tx: Transaction, row: ContextRow, taken: TakenSnapshot) -> None:
        """Add the snapshot to `tx` and make it the row's record (the caller restores the
        record if the commit fails): the 4 KiB blocks changed since the last one stored,
        or for a new snapshot those that differ from the engine's image."""
        started = time.perf_counter()
        delta = taken.delta
        layout = tx.put_snapshot(self._state.id, row.id, delta)
        row.snapshot = {
            "build": taken.session.build_identity,  # the build it runs, not the newest
            "memoryPages": layout.memory_pages,
            "pages": layout.stored_pages,
            "bytes": layout.stored_pages * PAGE_BYTES,
            "storedBytes": layout.stored_chunks * CHUNK_BYTES,  # as spec 7.7 counts
            "takenAt": self._clock.now_ms(),
            "stale": False,
            "globals": delta.globals,
            "extra": delta.extra,
            "run": row.executions,  # the run and cwd this memory is of (for checkpoints)
            "cwd": row.cwd,
        }
        # As spec 7.7 counts what a snapshot writes: a first one every chunk it holds, a
        # later one every chunk holding a changed block.
        taken.chunks_written = (
            layout.stored_chunks
            if delta.from_image
            else len({index * BLOCK_BYTES // CHUNK_BYTES for index in delta.blocks})
        )
        taken.elapsed_ms += (time.perf_counter() - started) * 1000


ENGINE_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="sandbox-engine")
"""Threads that wait on engine processes: a run blocked up to its deadline in one sandbox
never holds up another sandbox's run (the default executor has only a few threads)."""


class EngineUnavailableError(Exception):
    """The context's engine could not be prepared or loaded (the cause says why)."""


class FixedTree:
    """A `WorkspaceSource` that always gives one state of the tree (read in a turn)."""

    def __init__(self, update: TreeUpdate) -> None:
        self._update = update

    def update_since(self, version: Hashable | None) -> tuple[TreeUpdate, Hashable]:
        return self._update, "copy"


@dataclass(frozen=True)
class StateCopy:
    """What a throwaway copy of a context starts from, read in the sandbox's turn: the
    stored snapshot, the files and the env a run of the context would see."""

    runtime: LocalRuntime
    cwd: str
    env: dict[str, str]
    restore_point: SnapshotDelta | None
    tree: FixedTree | None


class ContextRunner:
    """Executions of one sandbox, one at a time (the sandbox's queue sees to that)."""

    def __init__(
        self, state: SandboxState, snapshots: ContextSnapshots, resources: LocalResources
    ) -> None:
        self._state = state
        self._snapshots = snapshots
        self._sessions = resources.sessions
        self._clock = resources.clock
        self._settings = resources.settings
        self._engine_process_pool = resources.engine_process_pool
        self._guest_workspace = (
            GUEST_LIMITS if self._settings.file_api else replace(GUEST_LIMITS, denied=True)
        )
        """The guest's `/workspace`: with the File API off, one it may not touch (spec 6.7)."""
        self._current: tuple[Cancellation, str | None] | None = None
        """The execution in progress: its cancel and its context (None: a stateless run)."""

    @property
    def executing(self) -> bool:
        return self._current is not None

    def cancel(self, reason: str | None = None, context_id: str | None = None) -> bool:
        """Cancel the execution in progress, wherever it is (waiting for its session, being
        restored, running), saying `reason`; with `context_id`, only one in that context
        (another client's run in another context goes on). False when none is."""
        current = self._current
        if current is None or (context_id is not None and current[1] != context_id):
            return False
        current[0].cancel(reason)
        return True

    @contextlib.contextmanager
    def _execution(
        self, cancellation: Cancellation | None, context_id: str | None
    ) -> Iterator[Cancellation]:
        """The execution in progress (in `context_id`; None: stateless), cancelled through
        `cancel` or `cancellation`."""
        cancellation = cancellation or Cancellation()
        self._current = (cancellation, context_id)
        try:
            yield cancellation
        finally:
            self._current = None

    async def run_stateless(
        self,
        runtime: LocalRuntime,
        code: str,
        call_env: dict[str, str | None],
        timeout: float | None = None,
        cancellation: Cancellation | None = None,
    ) -> ExecutionResult:
        """A binding without contexts run from the sandbox: a fresh engine, sandbox env."""
        meta = self._state.ensure_meta()
        env = layer_env(meta.env_vars, None, call_env)
        with self._execution(cancellation, None) as current:
            result = await asyncio.get_running_loop().run_in_executor(
                ENGINE_THREADS, runtime.run_stateless, code, env, timeout, current
            )
        self._state.touch()
        return result

    def copy_state(self, row: ContextRow) -> StateCopy:
        """What a copy of the context would start from now (call in the sandbox's turn:
        no run changes the row, its snapshot or the tree meanwhile)."""
        runtime = self._state.runtime(row.binding)
        restore_point = self._snapshots.restore_point(row, runtime.build_sha256())
        if restore_point is None and row.executions > 0:
            raise make_error(
                ErrorCode.CODE_EXECUTION_ERROR,
                "The context's state has no stored snapshot (its last run could not take "
                "one), so there is no copy of it to inspect; run a cell first",
            )
        meta = self._state.ensure_meta()
        tree = None
        if self._settings.file_api:
            tree = FixedTree(self._state.workspace.update_since(None)[0])
        return StateCopy(
            runtime,
            row.cwd,
            layer_env(meta.env_vars, row.env_vars, {}),
            restore_point,
            tree,
        )

    async def run_copy(
        self,
        copy: StateCopy,
        code: str,
        timeout: float,
        cancellation: Cancellation,
        limits: Limits | None = None,
        on_output: OutputListener | None = None,
    ) -> ExecutionResult:
        """Run `code` in a throwaway engine restored from `copy`: nothing it does reaches
        the context, its files or its history (the engine goes with its state). A copy
        that could not be restored is an error, never a fresh interpreter's answer.
        `limits`: instead of the backend's (the timeout is `timeout` still); `on_output`:
        told of the guest's output as it is written (on the engine thread)."""

        def run() -> ExecutionResult:
            started = time.perf_counter()
            try:
                session = ProcessSession(
                    copy.runtime.language_engine,
                    pool=self._engine_process_pool,
                    workspace=self._guest_workspace,
                    limits=limits or self._settings.limits,
                    restore_source=lambda build: copy.restore_point,
                    progress=copy.runtime.prepare_progress,
                    cancellation=cancellation,
                )
            except Exception as error:  # the engine cannot be prepared or loaded
                if cancellation.requested:  # cut short while the copy was restored
                    return copy.runtime.engine_error(code, CANCELLED, started, LIMIT_ERROR)
                raise make_error(
                    ErrorCode.INTERNAL_ERROR,
                    f"{copy.runtime.language} engine unavailable: {error}",
                ) from None
            try:
                report = session.execute(
                    code,
                    copy.env,
                    copy.cwd,
                    workspace=copy.tree,
                    timeout=timeout,
                    cancellation=cancellation,
                    on_output=on_output,
                )
            finally:
                session.close()
            if copy.restore_point is not None and report.boot is not Boot.RESTORED:
                why = "; ".join(report.notes) or "its engine could not restore it"
                raise make_error(
                    ErrorCode.CODE_EXECUTION_ERROR,
                    f"The copy of the context's state could not be restored: {why}",
                )
            return report.result

        return await asyncio.get_running_loop().run_in_executor(ENGINE_THREADS, run)

    async def run(
        self,
        row: ContextRow,
        code: str,
        env: dict[str, str],
        timeout: float | None = None,
        cancellation: Cancellation | None = None,
        on_output: OutputListener | None = None,
    ) -> ExecutionResult:
        """Run `code` in the context of `row` and store the report; the result carries the
        context's counters and where its REPL state came from. `timeout`: this run's
        wall-clock limit instead of the backend's; `on_output`: told of the guest's output
        as it is written (on the engine thread)."""
        runtime = self._state.runtime(row.binding)
        was_resident = self._sessions.is_resident((self._state.id, row.id))
        limits = self._settings.limits

        def create(cancellation: Cancellation) -> ProcessSession:
            return ProcessSession(
                runtime.language_engine,
                pool=self._engine_process_pool,
                workspace=self._guest_workspace,
                limits=limits,
                restore_source=lambda build: self._snapshots.restore_point(row, build),
                progress=runtime.prepare_progress,
                cancellation=cancellation,
            )

        started = time.perf_counter()
        try:
            with self._execution(cancellation, row.id) as current:
                return await asyncio.get_running_loop().run_in_executor(
                    ENGINE_THREADS,
                    self._run_blocking,
                    row,
                    was_resident,
                    create,
                    code,
                    env,
                    timeout,
                    current,
                    on_output,
                )
        except EngineUnavailableError as error:
            boot = Boot.FRESH
            if current.requested:  # cancelled while its session was opened: state stays
                result = runtime.engine_error(code, CANCELLED, started, LIMIT_ERROR)
                boot = Boot.RESTORED if row.snapshot is not None else Boot.FRESH
            else:
                result = runtime.engine_error(
                    code, f"{runtime.language} engine unavailable: {error.__cause__}", started
                )
            return self._finish(row, result, ChangeSet(), boot, [])

    def _run_blocking(
        self,
        row: ContextRow,
        was_resident: bool,
        create: Callable[[Cancellation], GuestSession],
        code: str,
        env: dict[str, str],
        timeout: float | None,
        cancellation: Cancellation,
        on_output: OutputListener | None,
    ) -> ExecutionResult:
        """One worker-thread hop for the whole execution: session, run (with the tree's
        changes in and the run's out), snapshot, and the transaction that stores them."""
        key = (self._state.id, row.id)
        try:
            session = self._sessions.acquire(key, lambda: create(cancellation))
        except Exception as error:  # the engine cannot be prepared or loaded
            raise EngineUnavailableError() from error
        try:
            # With the File API off, the guest's /workspace refuses it everything.
            use_files = self._settings.file_api
            workspace = self._state.workspace if use_files else None
            report = session.execute(
                code,
                env,
                row.cwd,
                workspace=workspace,
                timeout=timeout,
                cancellation=cancellation,
                on_output=on_output,
            )
            result = report.result
            changes = ChangeSet()
            if workspace is not None:
                result, changes = self._take_changes(session, report)
            if report.restore_point_dropped:
                row.snapshot = None  # never restored again; the next snapshot rewrites it all
            is_limit = result.error is not None and result.error.name == LIMIT_ERROR
            taken = None
            if session.snapshots and session.alive and not is_limit:
                taken = self._snapshots.take(session, cancellation)  # spec 7.7: every good run
            notes = list(report.notes)
            if is_limit:  # a cancel may have come before the boot: it says nothing of one
                pass
            elif report.boot is Boot.FRESH and self._state.ran_to_a_state(row):
                notes.append("the context had no snapshot to restore; it started fresh")
            elif report.boot is Boot.RESTORED and not was_resident and row.snapshot is not None:
                taken_at = iso_from_ms(int(row.snapshot["takenAt"]))
                notes.append(
                    f"the context's REPL state was restored from its memory snapshot of {taken_at}"
                )
            try:
                return self._finish(
                    row,
                    result,
                    changes,
                    report.boot,
                    notes,
                    cwd=report.cwd,
                    snapshot=taken,
                    cpu_ms=report.cpu_ms,
                )
            except BaseException:
                # The run was not stored, but its engine holds what it did (REPL state,
                # snapshot deltas): the session goes, so that the next run restores what
                # SQLite holds instead of storing the unstored run's state with its own.
                self._sessions.discard(key)
                raise
        finally:
            self._sessions.release(key)

    def _take_changes(
        self, session: GuestSession, report: ExecutionReport
    ) -> tuple[ExecutionResult, ChangeSet]:
        """Put the run's file changes into the tree (a failed run has none: its engine
        took them back, spec 6.6). The engine process then holds the tree as it is now;
        changes the tree refuses leave it holding something else, so its next run is
        sent the whole tree."""
        result, workspace = report.result, self._state.workspace
        if result.error is not None or not report.changes:
            return result, ChangeSet()
        try:
            changes = workspace.apply_states(report.changes, self._clock.now_ms())
        except WorkspaceOSError as violation:
            session.workspace_version = None
            error = ExecutionError(
                LIMIT_ERROR,
                f"Workspace limit exceeded: {violation.message}; the run's file changes "
                "were discarded",
                [],
            )
            return replace(result, results=[], error=error), ChangeSet()
        session.workspace_version = workspace.version
        return result, changes

    def _finish(
        self,
        row: ContextRow,
        result: ExecutionResult,
        changes: ChangeSet,
        boot: Boot,
        notes: list[str],
        *,
        cwd: str | None = None,
        snapshot: TakenSnapshot | None = None,
        cpu_ms: float | None = None,
    ) -> ExecutionResult:
        """Persist files, snapshot, context row and history in one transaction.

        When the commit fails (or anything in the transaction raises), memory goes back
        to what SQLite holds: the row's counters and snapshot record, and the workspace
        (re-read from the store; the next run re-materializes it); the caller closes the
        session, whose engine holds the run's REPL state."""
        now = self._clock.now_ms()
        meta = self._state.ensure_meta()
        before = replace(row)
        row.executions += 1
        row.last_used = now
        if cwd is not None:
            row.cwd = cwd
        try:
            with self._state.stored() as tx:
                self._state.persist_changes(tx, changes)
                if snapshot is not None:
                    self._snapshots.store(tx, row, snapshot)
                tx.put_context(self._state.id, row.to_stored())
                self._state.touch(tx)
                expires_at = meta.expires_at if self._settings.ttl_ms != 0 else None
                snapshot_ms = None if snapshot is None else round(snapshot.elapsed_ms, 3)
                final = replace(
                    result,
                    execution_count=row.executions,
                    context=ContextRef(row.id, row.cwd, row.executions, snapshot_ms, expires_at),
                    session=SessionState(
                        boot.value,
                        tuple(notes),
                        cpu_ms,
                        None if snapshot is None else snapshot.chunks_written,
                        len(changes),
                    ),
                )
                payload = final.to_json()
                tx.add_history(self._state.id, row.id, row.executions, result.code, now, payload)
        except BaseException:  # not only SQLite's errors: any of them leaves it unstored
            row.executions, row.last_used, row.cwd = before.executions, before.last_used, before.cwd
            row.snapshot = before.snapshot
            if changes:
                self._state.forget_workspace()
            raise
        if snapshot is not None:
            snapshot.committed()
        return final
