"""The local `Sandbox` object: spec 2.4 routes over the core semantics and the store.

One `SandboxObject` per sandbox id reproduces the caller-side Durable Object: it owns
the `/workspace` tree, sandbox env vars, the context registry and idle expiry, processes
requests strictly one at a time (spec 1.5), and persists every change in one SQLite
transaction. Context executions run on the local engines with the workspace
materialized into one host directory per sandbox, which every context of the sandbox
preopens as `/workspace`; after a run the directory is diffed back into the tree (or
rolled back when the run failed, spec 6.6).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from engines.isolated import IsolatedSession, WorkerPool, WriteBounds
from engines.result import ContextRef, ExecutionError, ExecutionResult, SessionState
from engines.session import Boot, Limits, Outcome
from engines.snapshot import PAGE_BYTES, MemorySnapshot
from workbench.api.errors import ErrorCode, SandboxError, make_error
from workbench.api.transport import Response
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.sessions import SessionPool
from workbench.core.clock import Clock, iso_from_ms
from workbench.core.envvars import (
    apply_env_update,
    context_env_vars,
    env_request_vars,
    execute_env_vars,
    layer_env,
)
from workbench.core.host_paths import host_path, opaque_name
from workbench.core.paths import WorkspaceOSError, normalize
from workbench.core.workspace import MAX_ENTRIES, MAX_TOTAL_BYTES, ChangeSet, Workspace
from workbench.gateway.http import (
    EXECUTE_BODY_CAP,
    FILES_BODY_CAP,
    Request,
    error_json,
    not_found,
    parse_object,
    validate_code,
    validation_error,
)
from workbench.store import Store, StoredContext, StoredSandbox, Transaction
from workbench.store.database import CHUNK_BYTES

MAX_CONTEXTS = 8
ENGINE_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="sandbox-engine")
"""Threads that wait on engine processes: a run blocked up to its deadline in one sandbox
never holds up another sandbox's run (the default executor has only a few threads)."""
BINDING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_TTL_MS = 86_400_000


def parse_ttl(value: str | None) -> float:
    """Spec 8.3: unset/empty → 24 h; a finite number ≥ 0 → that; anything else → 24 h."""
    if value is None or value.strip() == "":
        return DEFAULT_TTL_MS
    try:
        ttl = float(value)
    except ValueError:
        return DEFAULT_TTL_MS
    return ttl if ttl >= 0 and ttl != float("inf") else DEFAULT_TTL_MS


def idle_deadline_passed(sandbox: StoredSandbox, ttl_ms: float, now_ms: int) -> bool:
    """The idle alarm of `sandbox` would fire now (spec 8.3): expiry is on and its armed
    deadline is reached. Decided from the stored row alone."""
    return ttl_ms != 0 and sandbox.expires_at is not None and now_ms >= sandbox.expires_at


class EngineUnavailableError(Exception):
    """The context's engine could not be prepared or loaded (the cause says why)."""


@dataclass
class SandboxSettings:
    ttl_ms: float = DEFAULT_TTL_MS
    """0 disables idle expiry."""
    file_api: bool = True
    limits: Limits = field(default_factory=Limits)
    snapshot_delay_seconds: float = 1.0
    """Idle time after a run before its memory snapshot is written."""


@dataclass
class ContextRow:
    """Spec 7.1 registry row plus the stored snapshot record."""

    id: str
    binding: str
    language: str
    engine: str
    cwd: str
    env_vars: dict[str, str]
    created_at: int
    last_used: int
    executions: int = 0
    snapshot: dict[str, Any] | None = None
    seq: int = 0
    """Creation order within the sandbox: breaks `createdAt` ties (same millisecond), so
    listings and the default context follow creation order like the reference's stable
    sort over its insertion-ordered registry."""

    def to_stored(self) -> StoredContext:
        return StoredContext(
            self.id,
            self.created_at,
            {
                "binding": self.binding,
                "language": self.language,
                "engine": self.engine,
                "cwd": self.cwd,
                "envVars": self.env_vars,
                "lastUsed": self.last_used,
                "executions": self.executions,
                "snapshot": self.snapshot,
                "seq": self.seq,
            },
        )

    @classmethod
    def from_stored(cls, stored: StoredContext) -> ContextRow:
        value = stored.value
        return cls(
            id=stored.id,
            binding=str(value["binding"]),
            language=str(value["language"]),
            engine=str(value["engine"]),
            cwd=str(value["cwd"]),
            env_vars=dict(value.get("envVars") or {}),
            created_at=stored.created_at,
            last_used=int(value["lastUsed"]),
            executions=int(value.get("executions", 0)),
            snapshot=value.get("snapshot"),
            seq=int(value.get("seq", 0)),
        )

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "binding": self.binding,
            "language": self.language,
            "cwd": self.cwd,
            "createdAt": iso_from_ms(self.created_at),
            "lastUsed": iso_from_ms(self.last_used),
        }

    def snapshot_info(self) -> dict[str, Any] | None:
        if self.snapshot is None:
            return None
        return {
            key: self.snapshot[key]
            for key in ("build", "pages", "bytes", "storedBytes", "takenAt", "stale")
        }


class SandboxObject:
    """Spec 2.4 for one sandbox id."""

    def __init__(
        self,
        sandbox_id: str,
        *,
        store: Store,
        runtimes: dict[str, LocalRuntime],
        sessions: SessionPool,
        clock: Clock,
        settings: SandboxSettings,
        mirror_root: Path,
        engine_pool: WorkerPool,
    ) -> None:
        self.id = sandbox_id
        self._engine_pool = engine_pool
        self._store = store
        self._runtimes = runtimes
        self._sessions = sessions
        self._clock = clock
        self._settings = settings
        # Opaque: an id such as `..` or `.` must never name a host location (spec 8.1).
        self._mirror = host_path(mirror_root, opaque_name(sandbox_id))
        self._queue = asyncio.Lock()
        self._running: IsolatedSession | None = None
        self._dirty: set[str] = set()
        """Contexts whose live state is newer than their stored snapshot."""
        self._flush_timer: asyncio.TimerHandle | None = None
        self._meta: StoredSandbox | None = None
        self._workspace = Workspace()
        self._contexts: dict[str, ContextRow] = {}
        self._load()

    # ----- state ---------------------------------------------------------------------

    def _load(self) -> None:
        self._meta = self._store.sandbox(self.id)
        self._loaded_workspace: Workspace | None = None
        self._contexts = {
            stored.id: ContextRow.from_stored(stored) for stored in self._store.contexts(self.id)
        }

    @property
    def _workspace(self) -> Workspace:
        """The `/workspace` tree, read from the store on first use (it may be 16 MiB, and
        a sandbox that is only listed or expired never needs it)."""
        if self._loaded_workspace is None:
            self._loaded_workspace = Workspace.from_rows(self._store.files(self.id))
        return self._loaded_workspace

    @_workspace.setter
    def _workspace(self, workspace: Workspace) -> None:
        self._loaded_workspace = workspace

    def reload(self) -> None:
        """Re-read the sandbox from the store (another process committed changes); the
        workspace is re-read only when next used."""
        self._load()

    @property
    def exists(self) -> bool:
        return self._meta is not None

    @property
    def meta(self) -> StoredSandbox | None:
        return self._meta

    def _ensure_meta(self) -> StoredSandbox:
        if self._meta is None:
            now = self._clock.now_ms()
            self._meta = StoredSandbox(self.id, now, now, {}, None)
            with self._store.transaction() as tx:
                tx.put_sandbox(self._meta)
        return self._meta

    def _touch(self, tx: Transaction | None = None, *, write_last_used: bool = False) -> None:
        """Spec 8.3 touch policy: move the deadline only in steps larger than TTL/10."""
        meta = self._ensure_meta()
        now = self._clock.now_ms()
        ttl = self._settings.ttl_ms
        changed = write_last_used
        if write_last_used:
            meta.last_used = now
        if ttl == 0:
            if meta.expires_at is not None:
                meta.expires_at = None
                changed = True
        else:
            want = int(now + ttl)
            if meta.expires_at is None or want - meta.expires_at > ttl / 10:
                meta.expires_at = want
                meta.last_used = now
                changed = True
        if not changed:
            return
        if tx is not None:
            tx.put_sandbox(meta)
        else:
            with self._store.transaction() as own:
                own.put_sandbox(meta)

    def expire_if_due(self) -> bool:
        """The idle alarm (spec 8.3), evaluated lazily: True when the sandbox was wiped."""
        meta = self._meta
        ttl = self._settings.ttl_ms
        now = self._clock.now_ms()
        if meta is None or not idle_deadline_passed(meta, ttl, now):
            return False
        if meta.last_used + ttl > now:
            meta.expires_at = int(meta.last_used + ttl)
            with self._store.transaction() as tx:
                tx.put_sandbox(meta)
            return False
        self._wipe()
        return True

    async def sweep(self) -> bool:
        """`expire_if_due` in turn with requests."""
        async with self._queue:
            return self.expire_if_due()

    @property
    def busy(self) -> bool:
        """A request holds or awaits the queue, or an execution runs: this object must
        stay the only one for its sandbox id."""
        return self._queue.locked() or bool(self._queue._waiters) or self._running is not None

    def _wipe(self) -> None:
        self._dirty.clear()
        self._sessions.discard_sandbox(self.id)
        with self._store.transaction() as tx:
            tx.delete_sandbox(self.id)
        shutil.rmtree(self._mirror, ignore_errors=True)
        self._meta = None
        self._workspace = Workspace()
        self._contexts = {}

    # ----- routing -------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        if request.method == "POST" and request.path == "/cancel":
            return Response.json(200, {"cancelled": self.cancel()})
        async with self._queue:
            self.expire_if_due()
            try:
                return await self._route(request)
            except SandboxError as error:
                return error_json(error)

    async def _route(self, request: Request) -> Response:
        method, path = request.method, request.path
        if method == "DELETE" and path == "/":
            self._wipe()
            return Response.json(200, {"success": True})
        self._ensure_meta()
        if path == "/" and method == "GET":
            self._touch()
            return Response.json(200, self.info())
        if path == "/execute" and method == "POST":
            return await self._execute(parse_object(request, EXECUTE_BODY_CAP))
        if path == "/contexts" and method == "POST":
            return self._create_context(parse_object(request, EXECUTE_BODY_CAP))
        if path == "/contexts" and method == "GET":
            self._touch()
            return Response.json(200, {"contexts": [c.public() for c in self._sorted_contexts()]})
        if path.startswith("/contexts/") and method == "DELETE" and path.count("/") == 2:
            return self._delete_context(unquote(path[len("/contexts/") :]))
        if path.startswith("/contexts/") and path.endswith("/history") and method == "GET":
            return self._history(unquote(path[len("/contexts/") : -len("/history")]))
        if path == "/env" and method == "POST":
            return self._set_env(parse_object(request, EXECUTE_BODY_CAP))
        if path == "/files" and method == "POST":
            if not self._settings.file_api:
                raise make_error(
                    ErrorCode.NOT_SUPPORTED,
                    "The File API is disabled for this sandbox (SANDBOX_FILE_API=disabled)",
                    {"feature": "files"},
                )
            return self._files(parse_object(request, FILES_BODY_CAP))
        raise not_found()

    def cancel(self) -> bool:
        """Interrupt the running execution, if any (bypasses the request queue)."""
        running = self._running
        if running is None:
            return False
        running.cancel()
        return True

    # ----- info, env, files ----------------------------------------------------------

    def _sorted_contexts(self) -> list[ContextRow]:
        return sorted(self._contexts.values(), key=lambda row: (row.created_at, row.seq, row.id))

    def info(self) -> dict[str, Any]:
        meta = self._ensure_meta()
        workspace = self._workspace.info() if self._settings.file_api else {"files": 0, "bytes": 0}
        return {
            "id": meta.id,
            "createdAt": iso_from_ms(meta.created_at),
            "lastUsed": iso_from_ms(meta.last_used),
            "envVars": dict(meta.env_vars),
            "contexts": [
                {
                    "id": row.id,
                    "binding": row.binding,
                    "language": row.language,
                    "engine": row.engine,
                    "cwd": row.cwd,
                    "createdAt": iso_from_ms(row.created_at),
                    "lastUsed": iso_from_ms(row.last_used),
                    "executions": row.executions,
                    "snapshot": row.snapshot_info(),
                }
                for row in self._sorted_contexts()
            ],
            "workspace": workspace,
            "fileApi": self._settings.file_api,
            "expiresAt": meta.expires_at,
        }

    def _set_env(self, body: dict[str, Any]) -> Response:
        if "envVars" not in body:
            raise validation_error("envVars is required")
        update = env_request_vars(body)
        meta = self._ensure_meta()
        with self._stored() as tx:
            meta.env_vars = apply_env_update(meta.env_vars, update)
            self._touch(tx, write_last_used=True)
            tx.put_sandbox(meta)
        return Response.json(200, {"success": True})

    def _files(self, body: dict[str, Any]) -> Response:
        meta = self._ensure_meta()
        workspace = self._workspace
        # The operation changes the tree; `undo_on_error` takes it back out unless the
        # transaction commits, so the tree always equals the stored rows.
        with workspace.undo_on_error():
            result, changes = workspace.files_request(
                body, now=self._clock.now_ms(), sandbox_created_at=iso_from_ms(meta.created_at)
            )
            with self._stored() as tx:
                self._persist_changes(tx, changes)
                self._touch(tx)
        return Response.json(200, result)

    @contextmanager
    def _stored(self) -> Iterator[Transaction]:
        """A store transaction that, when it fails (COMMIT included), restores the sandbox
        row it may have changed in memory and answers INTERNAL_ERROR, not a traceback."""
        before = None if self._meta is None else replace(self._meta)
        try:
            with self._store.transaction() as tx:
                yield tx
        except BaseException as error:
            self._meta = before
            if isinstance(error, sqlite3.Error):
                raise make_error(
                    ErrorCode.INTERNAL_ERROR, f"The change could not be stored: {error}"
                ) from error
            raise

    def _persist_changes(self, tx: Transaction, changes: ChangeSet) -> None:
        for change in changes:
            if change.kind == "file":
                assert change.data is not None
                tx.put_file(self.id, change.path, change.data, change.updated_at)
            elif change.kind == "dir":
                tx.put_directory(self.id, change.path)
            else:
                tx.delete_path(self.id, change.path)

    # ----- contexts ------------------------------------------------------------------

    def _runtime(self, binding: str) -> LocalRuntime:
        """Spec 7.2 probe (steps 1-2; local runtimes always answer a valid step 3-4)."""
        runtime = self._runtimes.get(binding) if BINDING_NAME.fullmatch(binding) else None
        if runtime is None:
            raise validation_error(f"Unknown binding '{binding}'")
        return runtime

    def _new_context(
        self, binding: str, cwd: str, env_vars: dict[str, str], tx: Transaction
    ) -> ContextRow:
        if len(self._contexts) >= MAX_CONTEXTS:
            raise validation_error(f"Cannot create more than {MAX_CONTEXTS} code contexts")
        runtime = self._runtime(binding)
        if not runtime.spec.contexts:
            raise validation_error(
                f"Code contexts are not supported by binding '{binding}' ({runtime.language})"
            )
        now = self._clock.now_ms()
        row = ContextRow(
            id=str(uuid.uuid4()),
            binding=binding,
            language=runtime.language,
            engine=runtime.spec.engine,
            cwd=cwd,
            env_vars=env_vars,
            created_at=now,
            last_used=now,
            seq=max((other.seq for other in self._contexts.values()), default=0) + 1,
        )
        tx.put_context(self.id, row.to_stored())
        return row

    def _register_context(self, binding: str, cwd: str, env_vars: dict[str, str]) -> ContextRow:
        """Create a context: stored first, in memory once the commit succeeded."""
        with self._stored() as tx:
            row = self._new_context(binding, cwd, env_vars, tx)
            self._touch(tx)
        self._contexts[row.id] = row
        return row

    def _create_context(self, body: dict[str, Any]) -> Response:
        binding = body.get("binding")
        if not isinstance(binding, str) or not binding:
            raise validation_error("binding is required")
        cwd = "/workspace"
        if "cwd" in body:
            raw_cwd = body["cwd"]
            if not isinstance(raw_cwd, str) or not raw_cwd:
                raise validation_error("cwd must be a non-empty string")
            try:
                cwd = normalize(raw_cwd).absolute
            except WorkspaceOSError as error:
                raise validation_error(error.message) from None
        env_vars = context_env_vars(body) or {}
        row = self._register_context(binding, cwd, env_vars)
        return Response.json(201, row.public())

    def _delete_context(self, context_id: str) -> Response:
        if context_id not in self._contexts:
            raise self._context_not_found(context_id)
        with self._stored() as tx:
            tx.delete_context(self.id, context_id)
            self._touch(tx)
        del self._contexts[context_id]
        self._dirty.discard(context_id)
        self._sessions.discard((self.id, context_id))
        return Response.json(200, {"success": True})

    def _history(self, context_id: str) -> Response:
        if context_id not in self._contexts:
            raise self._context_not_found(context_id)
        entries = [
            {"seq": seq, "code": code, "startedAt": started_at, "result": result}
            for seq, code, started_at, result in self._store.history(self.id, context_id)
        ]
        return Response.json(200, {"history": entries})

    @staticmethod
    def _context_not_found(context_id: str) -> SandboxError:
        return make_error(
            ErrorCode.CONTEXT_NOT_FOUND,
            f"Code context '{context_id}' not found",
            {"contextId": context_id},
        )

    # ----- execution -----------------------------------------------------------------

    async def _execute(self, body: dict[str, Any]) -> Response:
        if "cwd" in body:
            raise validation_error("cwd is a context property; pass it to createCodeContext")
        code = validate_code(body)
        call_env = execute_env_vars(body) or {}
        context_id = body.get("contextId")
        binding = body.get("binding")
        if context_id is not None and (not isinstance(context_id, str) or not context_id):
            raise validation_error("contextId must be a non-empty string")
        if binding is not None and (not isinstance(binding, str) or not binding):
            raise validation_error("binding must be a non-empty string")
        meta = self._ensure_meta()
        if isinstance(context_id, str):
            row = self._contexts.get(context_id)
            if row is None:
                raise self._context_not_found(context_id)
        elif isinstance(binding, str):
            runtime = self._runtime(binding)
            if not runtime.spec.contexts:
                return await self._stateless_fallback(runtime, code, call_env)
            row = self._default_context(binding)
        else:
            raise validation_error("Pass a context or a binding")
        env = layer_env(meta.env_vars, row.env_vars, call_env)
        return await self._run_in_context(row, code, env)

    def _default_context(self, binding: str) -> ContextRow:
        """Spec 7.3: the oldest context of the binding, or a new one at /workspace."""
        candidates = [row for row in self._sorted_contexts() if row.binding == binding]
        if candidates:
            return candidates[0]
        return self._register_context(binding, "/workspace", {})

    async def _stateless_fallback(
        self, runtime: LocalRuntime, code: str, call_env: dict[str, str | None]
    ) -> Response:
        meta = self._ensure_meta()
        env = layer_env(meta.env_vars, None, call_env)
        result = await asyncio.get_running_loop().run_in_executor(
            ENGINE_THREADS, runtime.run_stateless, code, env
        )
        self._touch()
        return Response.json(200, result.to_json())

    def _restore_point(self, row: ContextRow) -> MemorySnapshot | None:
        snapshot = row.snapshot
        runtime = self._runtimes[row.binding]
        if snapshot is None or not runtime.spec.snapshots:
            return None
        if snapshot.get("build") != runtime.build_sha256():
            row.snapshot = None  # spec 7.6: a snapshot of another engine build is dropped
            return None
        memory = self._store.snapshot_memory(self.id, row.id, int(snapshot["memoryPages"]))
        return MemorySnapshot(memory, dict(snapshot["globals"]), dict(snapshot["extra"]))

    async def _run_in_context(self, row: ContextRow, code: str, env: dict[str, str]) -> Response:
        runtime = self._runtime(row.binding)
        key = (self.id, row.id)
        was_resident = self._sessions.is_resident(key)
        limits = self._settings.limits

        def create() -> IsolatedSession:
            return IsolatedSession(
                runtime.spec,
                pool=self._engine_pool,
                workspace=self._mirror,
                limits=limits,
                restore_point=self._restore_point(row),
                write_bounds=WriteBounds(MAX_TOTAL_BYTES, MAX_ENTRIES),
            )

        started = time.perf_counter()
        try:
            session, outcome, result, changes = await asyncio.get_running_loop().run_in_executor(
                ENGINE_THREADS, self._run_blocking, key, create, code, env, row.cwd
            )
        except EngineUnavailableError as error:
            result = runtime.engine_error(
                code, f"{runtime.language} engine unavailable: {error.__cause__}", started
            )
            return self._finish(row, result, ChangeSet(), Boot.FRESH, [])
        if row.id in self._dirty:
            self._schedule_flush()
        if outcome.restore_point_dropped:
            row.snapshot = None  # never restored again; the next snapshot rewrites its chunks
        notes = list(outcome.notes)
        if outcome.boot is Boot.FRESH and row.executions > 0:
            notes.append(
                "the context's REPL state was not resident and could not be restored "
                "(no snapshot for this engine); it started fresh"
                if not session.spec.snapshots
                else "the context had no snapshot to restore; it started fresh"
            )
        elif outcome.boot is Boot.RESTORED and not was_resident and row.snapshot is not None:
            taken = iso_from_ms(int(row.snapshot["takenAt"]))
            notes.append(
                f"the context's REPL state was restored from its memory snapshot of {taken}"
            )
        return self._finish(row, result, changes, outcome.boot, notes, cwd=outcome.cwd)

    def _run_blocking(
        self,
        key: tuple[str, str],
        create: Callable[[], IsolatedSession],
        code: str,
        env: dict[str, str],
        cwd: str,
    ) -> tuple[IsolatedSession, Outcome, ExecutionResult, ChangeSet]:
        """One worker-thread hop for the whole execution: session, workspace in, run,
        workspace out (or rollback), snapshot."""
        try:
            session = self._sessions.acquire(key, create)
        except Exception as error:  # the engine cannot be prepared or loaded
            raise EngineUnavailableError() from error
        try:
            use_files = self._settings.file_api
            if use_files:
                self._workspace.materialize(self._mirror)
            else:
                self._mirror.mkdir(parents=True, exist_ok=True)
            self._running = session
            try:
                outcome = session.execute(code, env, cwd)
            finally:
                self._running = None
            result = outcome.result
            changes = ChangeSet()
            if use_files:
                result, changes = self._sync_back(result)
            is_limit = result.error is not None and result.error.name == "ExecutionLimitError"
            if session.spec.snapshots and session.alive and not is_limit:
                # Spec 7.7: snapshot after every successful run. The engine process takes it
                # after answering (incremental: only changed 1 MiB chunks), so a later trap
                # resumes from this state; the chunks reach SQLite shortly after
                # (write-behind). Marked dirty before `release`, which may evict the
                # session and must then save this state.
                session.take_snapshot()
                self._dirty.add(key[1])
            return session, outcome, result, changes
        finally:
            self._sessions.release(key)

    # ----- snapshots (write-behind) --------------------------------------------------

    def _schedule_flush(self) -> None:
        """Persist dirty snapshots once the sandbox has been idle for a moment, so taking
        and writing a snapshot (tens of milliseconds) stays off the execution path."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        loop = asyncio.get_running_loop()
        self._flush_timer = loop.call_later(
            self._settings.snapshot_delay_seconds, lambda: loop.create_task(self.flush())
        )

    def stop_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None

    async def flush(self) -> None:
        """Write the snapshots of contexts that ran since their last snapshot."""
        async with self._queue:
            await asyncio.to_thread(self.flush_now)

    def flush_now(self) -> None:
        for context_id in list(self._dirty):
            session = self._sessions.get((self.id, context_id))
            if session is not None:
                self.persist_snapshot(context_id, session)
            self._dirty.discard(context_id)

    def persist_snapshot(self, context_id: str, session: IsolatedSession) -> None:
        """Store the context's latest snapshot: only the 1 MiB chunks that changed."""
        row = self._contexts.get(context_id)
        if row is None or context_id not in self._dirty:
            return
        self._dirty.discard(context_id)
        snapshot = session.restore_point
        if snapshot is None:
            return
        runtime = self._runtimes[row.binding]
        with self._store.transaction() as tx:
            layout = tx.put_snapshot(self.id, row.id, snapshot.memory, snapshot.dirty_chunks)
            snapshot.dirty_chunks.clear()
            row.snapshot = {
                "build": runtime.build_sha256(),
                "memoryPages": layout.memory_pages,
                "pages": layout.nonzero_pages,
                "bytes": layout.nonzero_pages * PAGE_BYTES,
                "storedBytes": layout.stored_chunks * CHUNK_BYTES,
                "takenAt": self._clock.now_ms(),
                "stale": False,
                "globals": snapshot.globals,
                "extra": snapshot.extra,
            }
            tx.put_context(self.id, row.to_stored())

    def _sync_back(self, result: ExecutionResult) -> tuple[ExecutionResult, ChangeSet]:
        """Apply the run's file changes, or roll the directory back (spec 6.6)."""
        if result.error is not None:
            self._workspace.materialize(self._mirror)
            return result, ChangeSet()
        diff = self._workspace.diff_directory(self._mirror)
        try:
            changes = self._workspace.apply_diff(diff, self._clock.now_ms())
        except WorkspaceOSError as violation:
            self._workspace.materialize(self._mirror)
            error = ExecutionError(
                "ExecutionLimitError",
                f"Workspace limit exceeded: {violation.message}; the run's file changes "
                "were discarded",
                [],
            )
            return replace(result, results=[], error=error), ChangeSet()
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
    ) -> Response:
        """Persist files, context row, snapshot and history in one transaction; answer.

        When the commit fails, memory goes back to what SQLite holds: the row's counters
        and the workspace (re-read from the store; the next run re-materializes it)."""
        now = self._clock.now_ms()
        before = replace(row)
        row.executions += 1
        row.last_used = now
        if cwd is not None:
            row.cwd = cwd
        meta = self._ensure_meta()
        try:
            return self._commit_run(row, result, changes, boot, notes, now, meta)
        except SandboxError:
            row.executions, row.last_used, row.cwd = before.executions, before.last_used, before.cwd
            if changes:
                self._loaded_workspace = None
            raise

    def _commit_run(
        self,
        row: ContextRow,
        result: ExecutionResult,
        changes: ChangeSet,
        boot: Boot,
        notes: list[str],
        now: int,
        meta: StoredSandbox,
    ) -> Response:
        with self._stored() as tx:
            self._persist_changes(tx, changes)
            tx.put_context(self.id, row.to_stored())
            self._touch(tx)
            expires_at = meta.expires_at if self._settings.ttl_ms != 0 else None
            final = replace(
                result,
                execution_count=row.executions,
                context=ContextRef(row.id, row.cwd, row.executions, None, expires_at),
                session=SessionState(boot.value, tuple(notes)),
            )
            payload = final.to_json()
            tx.add_history(self.id, row.id, row.executions, result.code, now, payload)
        return Response.json(200, payload)
