"""What one local sandbox holds, in memory and in SQLite: its row (env vars and idle
deadline, spec 8.3), its code-context registry (spec 7.1-7.3; a context's row, stored as
JSON and shown as protocol types, is a `ContextRow`) and its `/workspace` tree (which each
context's engine process copies into its own memory).

Every change is stored in one transaction first and kept in memory once it committed
(`stored`), so memory always equals what the store holds.
"""

from __future__ import annotations

import copy
import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from engines.result import LIMIT_ERROR
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.settings import LocalResources, idle_deadline_passed
from workbench.core.changes import ChangeSet
from workbench.core.workspace import Workspace
from workbench.protocol.errors import ErrorCode, SandboxError, make_error
from workbench.protocol.http import validation_error
from workbench.protocol.ids import checkpoint_name_problem, restore_note
from workbench.protocol.timestamps import iso_from_ms
from workbench.protocol.types import CodeContext, ContextInfo, SnapshotInfo
from workbench.store import StoredCheckpoint, StoredContext, StoredSandbox, Transaction


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
    start_cwd: str | None = None
    """The cwd it was created in (a fork: its origin's), where a replay of its history
    starts (None: stored before it was kept)."""

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
                "startCwd": self.start_cwd,
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
            start_cwd=None if value.get("startCwd") is None else str(value["startCwd"]),
        )

    def code_context(self) -> CodeContext:
        return CodeContext(
            self.id,
            self.binding,
            self.language,
            self.cwd,
            iso_from_ms(self.created_at),
            iso_from_ms(self.last_used),
        )

    def context_info(self) -> ContextInfo:
        return ContextInfo(
            self.id,
            self.binding,
            self.language,
            self.engine,
            self.cwd,
            iso_from_ms(self.created_at),
            iso_from_ms(self.last_used),
            self.executions,
            self.snapshot_info(),
            self.start_cwd,
        )

    def snapshot_info(self) -> SnapshotInfo | None:
        """The public part of the stored snapshot record, values as stored."""
        snapshot = self.snapshot
        if snapshot is None:
            return None
        return SnapshotInfo(
            snapshot["build"],
            snapshot["pages"],
            snapshot["bytes"],
            snapshot["storedBytes"],
            snapshot["takenAt"],
            snapshot["stale"],
        )


MAX_CONTEXTS = 8
BINDING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_CHECKPOINTS = 16
"""Checkpoints kept per context."""
CHECKPOINT_BUDGET_BYTES = 256 << 20
"""The most memory a sandbox's checkpoints may hold, their `bytes` summed (blocks they
share with each other or with snapshots count for each)."""


def context_not_found(context_id: str) -> SandboxError:
    return make_error(
        ErrorCode.CONTEXT_NOT_FOUND,
        f"Code context '{context_id}' not found",
        {"contextId": context_id},
    )


class SandboxState:
    """One sandbox's row, contexts and workspace (spec 2.4 state of the Durable Object)."""

    def __init__(self, sandbox_id: str, resources: LocalResources) -> None:
        self.id = sandbox_id
        self._store = resources.store
        self._runtimes = resources.runtimes
        self._clock = resources.clock
        self._settings = resources.settings
        self.meta: StoredSandbox | None = None
        self.contexts: dict[str, ContextRow] = {}
        self._workspace: Workspace | None = None
        self.load()

    def ran_to_a_state(self, row: ContextRow) -> bool:
        """Whether a run of the context may have left REPL state: one that did not end at
        a limit (a timed-out or cancelled run's state is dropped, so a context that only
        ran those is rightly fresh), or one its history no longer holds (trimmed)."""
        entries = self._store.history(self.id, row.id)
        if len(entries) < row.executions:
            return True
        return any(
            result is not None and (result.get("error") or {}).get("name") != LIMIT_ERROR
            for *_, result in entries
        )

    def load(self) -> None:
        """(Re-)read the row and the contexts; the workspace is read when next used."""
        self.meta = self._store.sandbox(self.id)
        self._workspace = None
        self.contexts = {
            stored.id: ContextRow.from_stored(stored) for stored in self._store.contexts(self.id)
        }

    @property
    def workspace(self) -> Workspace:
        """Read from the store on first use (it may be 16 MiB, and a sandbox that is only
        listed or expired never needs it)."""
        if self._workspace is None:
            self._workspace = Workspace.from_rows(self._store.files(self.id))
        return self._workspace

    def forget_workspace(self) -> None:
        """Drop the tree from memory: it is re-read from the store when next used (a new
        tree, so every engine process's copy is replaced at its next run)."""
        self._workspace = None

    # ----- the sandbox row -----------------------------------------------------------

    def ensure_meta(
        self, tx: Transaction | None = None, *, made_at: int | None = None
    ) -> StoredSandbox:
        """The sandbox row, created (and stored, in `tx` when given) on first touch, as
        made at `made_at` when given (the time the request's answer already named)."""
        if self.meta is None:
            now = self._clock.now_ms() if made_at is None else made_at
            self.meta = StoredSandbox(self.id, now, now, {}, None)
            if tx is not None:
                tx.put_sandbox(self.meta)
            else:
                with self._store.transaction() as own:
                    own.put_sandbox(self.meta)
        return self.meta

    def touch(
        self,
        tx: Transaction | None = None,
        *,
        write_last_used: bool = False,
        made_at: int | None = None,
    ) -> None:
        """Spec 8.3 touch policy: move the deadline only in steps larger than TTL/10. A
        sandbox this touch makes was made at `made_at` when given."""
        meta = self.ensure_meta(tx, made_at=made_at)
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

    def idle_expired(self) -> bool:
        """The idle alarm (spec 8.3), evaluated lazily: True when the sandbox must be
        wiped; a deadline reached by a sandbox used since is re-armed instead."""
        meta = self.meta
        ttl = self._settings.ttl_ms
        now = self._clock.now_ms()
        if meta is None or not idle_deadline_passed(meta, ttl, now):
            return False
        if meta.last_used + ttl > now:
            meta.expires_at = int(meta.last_used + ttl)
            with self._store.transaction() as tx:
                tx.put_sandbox(meta)
            return False
        return True

    def clear(self) -> None:
        """Delete the sandbox from the store; forget it."""
        with self._store.transaction() as tx:
            tx.delete_sandbox(self.id)
        self.meta = None
        self._workspace = Workspace()
        self.contexts = {}

    @contextmanager
    def stored(self) -> Iterator[Transaction]:
        """A store transaction that, when it fails (COMMIT included), restores the sandbox
        row it may have changed in memory and answers INTERNAL_ERROR, not a traceback."""
        before = None if self.meta is None else replace(self.meta)
        try:
            with self._store.transaction() as tx:
                yield tx
        except BaseException as error:
            self.meta = before
            if isinstance(error, sqlite3.Error):
                raise make_error(
                    ErrorCode.INTERNAL_ERROR, f"The change could not be stored: {error}"
                ) from error
            raise

    def persist_changes(self, tx: Transaction, changes: ChangeSet) -> None:
        for change in changes:
            if change.kind == "file":
                assert change.data is not None
                tx.put_file(self.id, change.path, change.data, change.updated_at)
            elif change.kind == "dir":
                tx.put_directory(self.id, change.path)
            else:
                tx.delete_path(self.id, change.path)

    # ----- the context registry ------------------------------------------------------

    def sorted_contexts(self) -> list[ContextRow]:
        return sorted(self.contexts.values(), key=lambda row: (row.created_at, row.seq, row.id))

    def context(self, context_id: str) -> ContextRow:
        row = self.contexts.get(context_id)
        if row is None:
            raise context_not_found(context_id)
        return row

    def live_context(self, context_id: str) -> ContextRow:
        """The context, refused like its runs when its binding offers no contexts now (a
        Ruby context made while local Ruby contexts were on): what cannot run is not
        inspected, checkpointed or restored either (QA)."""
        row = self.context(context_id)
        if not self.runtime(row.binding).contexts:
            raise validation_error(
                f"Code contexts are not supported by binding '{row.binding}' "
                f"({row.language}); this {row.language} context was made with local "
                "Ruby contexts on ([local] ruby_contexts = true, --ruby-contexts)"
            )
        return row

    def runtime(self, binding: str) -> LocalRuntime:
        """Spec 7.2 probe (steps 1-2; local runtimes always answer a valid step 3-4)."""
        runtime = self._runtimes.get(binding) if BINDING_NAME.fullmatch(binding) else None
        if runtime is None:
            raise validation_error(f"Unknown binding '{binding}'")
        return runtime

    def _new_context(
        self, binding: str, cwd: str, env_vars: dict[str, str], tx: Transaction
    ) -> ContextRow:
        if len(self.contexts) >= MAX_CONTEXTS:
            raise validation_error(f"Cannot create more than {MAX_CONTEXTS} code contexts")
        runtime = self.runtime(binding)
        if not runtime.contexts:
            raise validation_error(
                f"Code contexts are not supported by binding '{binding}' ({runtime.language})"
            )
        now = self._clock.now_ms()
        row = ContextRow(
            id=str(uuid.uuid4()),
            binding=binding,
            language=runtime.language,
            engine=runtime.language_engine.engine,
            cwd=cwd,
            env_vars=env_vars,
            created_at=now,
            last_used=now,
            seq=max((other.seq for other in self.contexts.values()), default=0) + 1,
            start_cwd=cwd,
        )
        tx.put_context(self.id, row.to_stored())
        return row

    def register_context(self, binding: str, cwd: str, env_vars: dict[str, str]) -> ContextRow:
        """Create a context: stored first, in memory once the commit succeeded."""
        with self.stored() as tx:
            row = self._new_context(binding, cwd, env_vars, tx)
            self.touch(tx)
        self.contexts[row.id] = row
        return row

    def fork_context(self, origin_id: str) -> ContextRow:
        """A new context of the origin's binding, cwd and env vars that starts from the
        origin's stored state: its snapshot (the blocks shared, not copied), execution
        count and history. The store holds every answered run, so that is the state of
        the origin's last run; from here the two evolve apart."""
        origin = self.live_context(origin_id)
        with self.stored() as tx:
            row = self._new_context(origin.binding, origin.cwd, dict(origin.env_vars), tx)
            row.executions = origin.executions
            row.snapshot = copy.deepcopy(origin.snapshot)
            row.start_cwd = origin.start_cwd  # its history is the origin's
            tx.put_context(self.id, row.to_stored())
            tx.copy_context_state(self.id, origin.id, row.id)
            self.touch(tx)
        self.contexts[row.id] = row
        return row

    # ----- checkpoints ----------------------------------------------------------------

    def checkpoints(self, context_id: str) -> list[StoredCheckpoint]:
        self.context(context_id)
        return self._store.checkpoints(self.id, context_id)

    def checkpoint(self, context_id: str, name: str) -> StoredCheckpoint:
        found = [saved for saved in self.checkpoints(context_id) if saved.name == name]
        if not found:
            raise validation_error(
                f"Code context '{context_id}' has no checkpoint '{name}'", status=404
            )
        return found[0]

    def save_checkpoint(self, context_id: str, name: str) -> StoredCheckpoint:
        """Keep the context's stored state (the snapshot of its last run and cwd, with
        that run's number) under `name`, replacing a checkpoint of that name."""
        row = self.live_context(context_id)
        problem = checkpoint_name_problem(name)
        if problem is not None:
            raise validation_error(problem)
        if row.snapshot is None:
            raise validation_error(
                f"Code context '{context_id}' has no snapshot to keep yet: run a cell first"
            )
        names = [saved.name for saved in self.checkpoints(context_id)]
        if name not in names and len(names) >= MAX_CHECKPOINTS:
            raise validation_error(
                f"Cannot keep more than {MAX_CHECKPOINTS} checkpoints of a context; delete one"
            )
        # The run and cwd of the snapshot's memory: later runs that stored none (a limit,
        # an engine gone) count in the row but are not in the checkpoint.
        snapshot = row.snapshot
        run, cwd = snapshot.get("run", row.executions), snapshot.get("cwd", row.cwd)
        value = {"snapshot": snapshot, "executions": run, "cwd": cwd}
        with self.stored() as tx:
            tx.save_checkpoint(self.id, row.id, name, self._clock.now_ms(), value)
            held = self._store.checkpoint_bytes(self.id)  # this one included: same connection
            if held > CHECKPOINT_BUDGET_BYTES:
                raise validation_error(
                    f"The sandbox's checkpoints would hold {held} bytes, past their budget of "
                    f"{CHECKPOINT_BUDGET_BYTES}; delete some"
                )
            self.touch(tx)
        return self.checkpoint(context_id, name)

    def restore_checkpoint(self, context_id: str, name: str) -> StoredCheckpoint:
        """Put the context back to the checkpoint (its snapshot and cwd); the history
        records the restore as a comment, which counts as a run: the execution count goes
        on, so a history never holds one number twice."""
        row = self.live_context(context_id)
        saved = self.checkpoint(context_id, name)
        before = (row.snapshot, row.cwd, row.executions, row.last_used)
        note = restore_note(row.language, name)
        try:
            with self.stored() as tx:
                if not tx.restore_checkpoint(self.id, row.id, name):
                    raise validation_error(
                        f"Code context '{context_id}' has no checkpoint '{name}'", status=404
                    )
                now = self._clock.now_ms()
                row.snapshot = copy.deepcopy(saved.value["snapshot"])
                row.cwd = str(saved.value["cwd"])
                row.executions += 1
                row.last_used = now
                tx.add_history(self.id, row.id, row.executions, note, now, None)
                tx.put_context(self.id, row.to_stored())
                self.touch(tx)
        except BaseException:
            row.snapshot, row.cwd, row.executions, row.last_used = before
            raise
        return saved

    def delete_checkpoint(self, context_id: str, name: str) -> None:
        self.checkpoint(context_id, name)
        with self.stored() as tx:
            tx.delete_checkpoint(self.id, context_id, name)
            self.touch(tx)

    def default_context(self, binding: str) -> ContextRow:
        """Spec 7.3: the oldest context of the binding, or a new one at /workspace."""
        candidates = [row for row in self.sorted_contexts() if row.binding == binding]
        if candidates:
            return candidates[0]
        return self.register_context(binding, "/workspace", {})

    def remove_context(self, context_id: str) -> None:
        """Delete a context's row (with its snapshot and history) and forget it."""
        self.context(context_id)
        with self.stored() as tx:
            tx.delete_context(self.id, context_id)
            self.touch(tx)
        del self.contexts[context_id]
