"""The local `Sandbox` object: the caller-side Durable Object of one sandbox id (spec 2.4).

It takes requests strictly one at a time (spec 1.5, `turn`) and offers them as typed
domain methods that answer protocol types; the routes turn HTTP into these calls. Its
state lives in `SandboxState`, executions run through `ContextRunner`, and snapshots come
and go through `ContextSnapshots`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from engines.process import Cancellation
from engines.result import LIMIT_ERROR, TIMED_OUT, ExecutionError, ExecutionResult, OutputListener
from workbench.api.inspector import (
    NAME_SECONDS,
    ListingProgress,
    inspector_code,
    list_names,
    marked_limits,
    read_inspection,
    read_value,
    stopped_at,
)
from workbench.api.inspector import TIMEOUT_SECONDS as INSPECT_SECONDS
from workbench.backends.local.context_runner import (
    ENGINE_THREADS,
    ContextRunner,
    ContextSnapshots,
    StateCopy,
)
from workbench.backends.local.files import FilesResult, files_batch, files_request
from workbench.backends.local.sandbox_state import CHECKPOINT_BUDGET_BYTES, ContextRow, SandboxState
from workbench.backends.local.settings import LocalResources
from workbench.core.envvars import apply_env_update, layer_env
from workbench.protocol.errors import ErrorCode, SandboxError, make_error
from workbench.protocol.http import validation_error
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import (
    Checkpoint,
    CheckpointList,
    CodeContext,
    ContextInspection,
    FilesBatchResult,
    HistoryEntry,
    InspectedValue,
    SandboxInfo,
)
from workbench.store import StoredCheckpoint, StoredSandbox

WAIT_NOTICE_S = 0.5
"""How long a request waits for its turn before `turn` says it waits (a listing ahead
of it ends well within that; a run may take minutes)."""


def not_carried_out(reason: str) -> SandboxError:
    """The answer to a request whose turn came once the backend was closing."""
    return make_error(
        ErrorCode.INTERNAL_ERROR,
        f"Not carried out: {reason} before this request's turn",
        http_status=503,
    )


class SandboxObject:
    """Spec 2.4 for one sandbox id."""

    def __init__(self, sandbox_id: str, resources: LocalResources) -> None:
        self.id = sandbox_id
        self._store = resources.store
        self._sessions = resources.sessions
        self._clock = resources.clock
        self._settings = resources.settings
        self._queue = asyncio.Lock()
        self._inspections = resources.inspections
        self._inspecting: set[Cancellation] = set()
        """The cancels of this sandbox's inspections in progress."""
        self.closing: str | None = None
        """Why the backend closes, once it does (`close_down`)."""
        self._state = SandboxState(sandbox_id, resources)
        self._runner = ContextRunner(
            self._state, ContextSnapshots(self._state, resources), resources
        )

    # ----- lifecycle -----------------------------------------------------------------

    @asynccontextmanager
    async def turn(self, waiting: Callable[[bool], None] | None = None) -> AsyncIterator[None]:
        """This request's turn: one at a time, after the idle alarm had its say.
        `waiting(True)` is called once the turn has not come within `WAIT_NOTICE_S`
        (another request, most likely another client's run, holds the sandbox), and
        `waiting(False)` when it comes after that."""
        told: list[bool] = []

        def tell() -> None:
            if waiting is not None:
                told.append(True)
                waiting(True)

        notice = None
        if waiting is not None:  # armed always: a free-looking queue may be handed on
            notice = asyncio.get_running_loop().call_later(WAIT_NOTICE_S, tell)
        try:
            async with self._queue:
                if notice is not None:
                    notice.cancel()
                if waiting is not None and told:
                    waiting(False)
                self.expire_if_due()
                yield
        finally:
            if notice is not None:
                notice.cancel()

    @property
    def exists(self) -> bool:
        return self._state.meta is not None

    @property
    def meta(self) -> StoredSandbox | None:
        return self._state.meta

    def ensure_exists(self) -> None:
        """Sandboxes come into existence on first touch (spec 2.4)."""
        self._state.ensure_meta()

    def expire_if_due(self) -> bool:
        """The idle alarm (spec 8.3), evaluated lazily: True when the sandbox was wiped."""
        if not self._state.idle_expired():
            return False
        self.destroy()
        return True

    async def sweep(self) -> bool:
        """`expire_if_due` in turn with requests."""
        async with self._queue:
            return self.expire_if_due()

    @property
    def busy(self) -> bool:
        """A request holds or awaits the queue, or an execution runs: this object must
        stay the only one for its sandbox id."""
        return self._queue.locked() or bool(self._queue._waiters) or self._runner.executing

    def destroy(self) -> None:
        """Wipe the sandbox: sessions, stored rows, host directory (spec 2.4 `DELETE /`)."""
        self._sessions.discard_sandbox(self.id)
        self._state.clear()

    def cancel(self, context_id: str | None = None) -> bool:
        """Interrupt the execution in progress, if any (needs no turn), or with
        `context_id` only one in that context."""
        return self._runner.cancel(context_id=context_id)

    def close_down(self, reason: str) -> None:
        """The backend closes: the execution and inspections in progress are cancelled
        (saying `reason`), and a request whose turn comes later is refused."""
        self.closing = reason
        self._runner.cancel(reason)
        for cancellation in list(self._inspecting):
            cancellation.cancel(reason)

    def refuse_if_closing(self) -> None:
        """Raise for a request whose turn came after `close_down` (one queued behind a run
        that was cancelled): it is not carried out, and says why."""
        if self.closing is not None:
            raise not_carried_out(self.closing)

    # ----- the sandbox ---------------------------------------------------------------

    def get_info(self) -> SandboxInfo:
        self._state.touch()
        meta = self._state.ensure_meta()
        workspace = self._state.workspace.info() if self._settings.file_api else None
        return SandboxInfo(
            meta.id,
            iso_from_ms(meta.created_at),
            iso_from_ms(meta.last_used),
            dict(meta.env_vars),
            [row.context_info() for row in self._state.sorted_contexts()],
            0 if workspace is None else workspace["files"],
            0 if workspace is None else workspace["bytes"],
            self._settings.file_api,
            meta.expires_at,
        )

    def set_env_vars(self, update: Mapping[str, str | None]) -> None:
        """`setEnvVars` (spec 2.4.3): None unsets a key; counts as a use."""
        meta = self._state.ensure_meta()
        with self._state.stored() as tx:
            meta.env_vars = apply_env_update(meta.env_vars, update)
            self._state.touch(tx, write_last_used=True)
            tx.put_sandbox(meta)

    def require_file_api(self) -> None:
        """Refuse the files API when it is disabled (before its body is even read)."""
        if not self._settings.file_api:
            raise make_error(
                ErrorCode.NOT_SUPPORTED,
                "The File API is disabled for this sandbox (SANDBOX_FILE_API=disabled)",
                {"feature": "files"},
            )

    def _created_at(self, now: int) -> str:
        """When the sandbox was made: `now` for one that a request makes (its row is stored
        with what the request stores: a request that fails makes no sandbox)."""
        meta = self._state.meta
        return iso_from_ms(now if meta is None else meta.created_at)

    def files(self, body: object) -> FilesResult:
        """One files-API request (spec 5); the tree changes only if the store commits."""
        self.require_file_api()
        workspace = self._state.workspace
        now = self._clock.now_ms()
        with workspace.undo_on_error():
            result, changes = files_request(
                workspace, body, now=now, sandbox_created_at=self._created_at(now)
            )
            with self._state.stored() as tx:
                self._state.persist_changes(tx, changes)
                self._state.touch(tx, made_at=now)
        return result

    # Same shape as `files`: kept apart, as the batch handler is a coroutine (it yields to
    # the event loop between entries) and the single request is not.
    async def files_batch(self, body: dict[str, Any]) -> FilesBatchResult:
        """`POST /files/batch`: every entry in order, all stored in one transaction; when
        it cannot commit, the request fails and the tree is as before."""
        self.require_file_api()
        workspace = self._state.workspace
        now = self._clock.now_ms()
        with workspace.undo_on_error():
            result, changes = await files_batch(
                workspace, body, now=now, sandbox_created_at=self._created_at(now)
            )
            with self._state.stored() as tx:
                self._state.persist_changes(tx, changes)
                self._state.touch(tx, made_at=now)
        return result

    # ----- contexts ------------------------------------------------------------------

    def create_context(self, binding: str, cwd: str, env_vars: dict[str, str]) -> CodeContext:
        return self._state.register_context(binding, cwd, env_vars).code_context()

    def fork_context(self, context_id: str) -> CodeContext:
        """A new context starting from a copy of the context's state (an extension)."""
        return self._state.fork_context(context_id).code_context()

    def checkpoints(self, context_id: str) -> CheckpointList:
        return CheckpointList(
            [self._checkpoint(context_id, saved) for saved in self._state.checkpoints(context_id)],
            self._store.checkpoint_bytes(self.id),
            CHECKPOINT_BUDGET_BYTES,
        )

    def save_checkpoint(self, context_id: str, name: str) -> Checkpoint:
        """Keep the context's state under `name` (an extension)."""
        return self._checkpoint(context_id, self._state.save_checkpoint(context_id, name))

    def restore_checkpoint(self, context_id: str, name: str) -> Checkpoint:
        """Put the context back to the checkpoint: its live session goes, so the next run
        starts from the checkpoint's snapshot."""
        saved = self._state.restore_checkpoint(context_id, name)
        self._sessions.discard((self.id, context_id))
        return self._checkpoint(context_id, saved)

    def delete_checkpoint(self, context_id: str, name: str) -> None:
        self._state.delete_checkpoint(context_id, name)

    @staticmethod
    def _checkpoint(context_id: str, saved: StoredCheckpoint) -> Checkpoint:
        executions = int(saved.value["executions"])
        return Checkpoint(
            saved.name, context_id, iso_from_ms(saved.created_at), executions, saved.bytes
        )

    async def inspect(
        self, context_id: str, given_up: asyncio.Event | None = None
    ) -> ContextInspection:
        """The user's names in the context (an extension), read from a copy of its stored
        state, so the context stays exactly as it was. Once `given_up` is set, the
        inspection stops."""
        async with self._inspection(context_id, given_up) as (row, copy, cancellation):
            if copy is None:  # a context that never ran has no names of the user's
                return ContextInspection(context_id, 0, [])
            deadline = time.monotonic() + INSPECT_SECONDS

            def run_pass(code: str) -> Awaitable[tuple[ExecutionResult, int | None]]:
                return self._listing_pass(copy, code, deadline, cancellation)

            result = await list_names(row.language, run_pass)
        return read_inspection(result, context_id, row.executions, ran_code=False)

    async def _listing_pass(
        self, copy: StateCopy, code: str, deadline: float, cancellation: Cancellation
    ) -> tuple[ExecutionResult, int | None]:
        """One pass of a watched listing in a fresh copy, within what is left of the
        inspection's time: stopped once it has stayed `NAME_SECONDS` at one name (a
        `ListingPass`)."""
        progress = ListingProgress(time.monotonic)
        this_pass = Cancellation()
        undo = cancellation.on_cancel(this_pass.cancel)
        stopped: list[int] = []

        async def watch() -> None:
            while not this_pass.requested:
                await asyncio.sleep(0.05)
                index = progress.index
                if index is not None and time.monotonic() - progress.since > NAME_SECONDS:
                    stopped.append(index)
                    this_pass.cancel()

        watcher = asyncio.create_task(watch())
        try:
            result = await self._runner.run_copy(
                copy,
                code,
                max(deadline - time.monotonic(), 0.1),
                this_pass,
                marked_limits(self._settings.limits),
                progress.told,
            )
        finally:
            watcher.cancel()
            undo()
        if cancellation.requested:  # the client gave up
            return result, None
        if stopped:
            message = f"{TIMED_OUT} after {NAME_SECONDS:g} s at one name"
            error = ExecutionError(LIMIT_ERROR, message, [])
            return replace(result, error=error), stopped[0]
        return result, stopped_at(result, progress)

    async def inspect_value(
        self, context_id: str, name: str, offset: int, given_up: asyncio.Event | None = None
    ) -> InspectedValue:
        """A page of one name's value written out in full, from a copy as `inspect`."""
        async with self._inspection(context_id, given_up) as (row, copy, cancellation):
            if copy is None:
                raise validation_error(f"The context has no name {name!r} to inspect")
            code = inspector_code(row.language, name, offset)
            result = await self._runner.run_copy(copy, code, INSPECT_SECONDS, cancellation)
        return read_value(result, context_id, name, offset, ran_code=False)

    @asynccontextmanager
    async def _inspection(
        self, context_id: str, given_up: asyncio.Event | None
    ) -> AsyncIterator[tuple[ContextRow, StateCopy | None, Cancellation]]:
        """An inspection's turn among the backend's few at once: a copy of the context's
        row and of its state (None: it never ran), read in the sandbox's turn off the
        event loop, and the cancel that `given_up` sets."""
        cancellation = Cancellation()
        watcher = None
        if given_up is not None:
            watcher = asyncio.create_task(cancel_on(given_up, cancellation))
        self._inspecting.add(cancellation)
        try:
            async with self._inspections:
                async with self.turn():
                    self.refuse_if_closing()
                    row = self._state.live_context(context_id)
                    copy = None
                    if row.executions:
                        copy = await asyncio.get_running_loop().run_in_executor(
                            ENGINE_THREADS, self._runner.copy_state, row
                        )
                    row = replace(row)
                yield row, copy, cancellation
        finally:
            self._inspecting.discard(cancellation)
            if watcher is not None:
                watcher.cancel()

    def list_contexts(self) -> list[CodeContext]:
        self._state.touch()
        return [row.code_context() for row in self._state.sorted_contexts()]

    def delete_context(self, context_id: str) -> None:
        self._state.remove_context(context_id)
        self._sessions.discard((self.id, context_id))

    def history(self, context_id: str) -> list[HistoryEntry]:
        """The context's kept executions, oldest first."""
        self._state.context(context_id)
        return [
            HistoryEntry(
                seq, code, started_at, None if result is None else ExecutionResult.from_json(result)
            )
            for seq, code, started_at, result in self._store.history(self.id, context_id)
        ]

    async def execute(
        self,
        code: str,
        *,
        context_id: str | None,
        binding: str | None,
        env_vars: dict[str, str | None],
        timeout: float | None = None,
        given_up: asyncio.Event | None = None,
        on_output: OutputListener | None = None,
    ) -> ExecutionResult:
        """Spec 2.4.1: run in the given context, or the binding's default context (a
        binding without contexts runs statelessly); env layered sandbox, context, call.
        `timeout`: this execution's wall-clock limit instead of the backend's. Once
        `given_up` is set (the caller stopped waiting), the execution is cancelled; one
        whose turn comes after that does not run at all. `on_output` is told of a
        context's output as the guest writes it (on an engine thread)."""
        if given_up is not None and given_up.is_set():
            raise make_error(
                ErrorCode.CODE_EXECUTION_ERROR,
                "Execution cancelled: the caller gave up before it began",
            )
        cancellation = Cancellation()
        watcher = None
        if given_up is not None:
            watcher = asyncio.create_task(cancel_on(given_up, cancellation))
        try:
            result = await self._execute(
                code, context_id, binding, env_vars, timeout, cancellation, on_output
            )
            return cancellation.explained(result)
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _execute(
        self,
        code: str,
        context_id: str | None,
        binding: str | None,
        env_vars: dict[str, str | None],
        timeout: float | None,
        cancellation: Cancellation,
        on_output: OutputListener | None,
    ) -> ExecutionResult:
        # The sandbox is made (spec 2.4: on first touch) only once the run found its
        # context or binding: a run in a context that is gone makes no sandbox.
        if context_id is not None:
            row = self._state.live_context(context_id)
            meta = self._state.ensure_meta()
        elif binding is not None:
            runtime = self._state.runtime(binding)
            meta = self._state.ensure_meta()
            if not runtime.contexts:
                return await self._runner.run_stateless(
                    runtime, code, env_vars, timeout, cancellation
                )
            row = self._state.default_context(binding)
        else:
            raise validation_error("Pass a context or a binding")
        env = layer_env(meta.env_vars, row.env_vars, env_vars)
        return await self._runner.run(row, code, env, timeout, cancellation, on_output)


async def cancel_on(given_up: asyncio.Event, cancellation: Cancellation) -> None:
    """Cancel once the caller stopped waiting (`Request.given_up`)."""
    await given_up.wait()
    cancellation.cancel()
