"""A transcript of a context from its backend's execution history."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from workbench.api import Backend, ContextInfo, SandboxClient, restored_checkpoint, short_id
from workbench.transcripts.documents import DocumentCell
from workbench.transcripts.model import (
    MAX_WORKSPACE_BYTES,
    ContextSpec,
    RecordedCell,
    Transcript,
    Workspace,
    WorkspaceFile,
)
from workbench.transcripts.outcomes import Outcome


class ExportError(Exception):
    """The transcript cannot be exported; `not_found` tells a missing sandbox or context
    from a backend that lacks what an export needs."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


@dataclass(frozen=True)
class Export:
    transcript: Transcript
    cells: tuple[DocumentCell, ...]
    """The runs with their whole results, for the documents (`workbench.transcripts.documents`)."""
    title: str
    """`<sandbox>-<binding>-<short context id>`, as the workbench names its exports."""
    notes: list[str] = field(default_factory=list)
    """What the transcript leaves out, for the user."""
    replay_notes: list[str] = field(default_factory=list)
    """What differs when the transcript is replayed (said with the replayable format
    only: a document shows a restore as its comment, and no env var at all; QA)."""


def hidden_values(env_vars: dict[str, str], with_values: bool) -> dict[str, str | None]:
    """The env vars as exported: keys only (values null) unless `with_values`."""
    return {key: (value if with_values else None) for key, value in sorted(env_vars.items())}


async def _workspace(sandbox: SandboxClient) -> Workspace:
    listing = await sandbox.list_files("/workspace", recursive=True, include_hidden=True)
    directories: list[str] = []
    files: list[WorkspaceFile] = []
    total = 0
    for entry in listing.files:
        if entry.is_directory:
            directories.append(entry.relative_path)
            continue
        content = await sandbox.read_bytes(entry.absolute_path)
        total += len(content)
        if total > MAX_WORKSPACE_BYTES:
            raise ExportError(
                f"the workspace holds more than a transcript carries ({MAX_WORKSPACE_BYTES} "
                "bytes); export without --with-files"
            )
        files.append(WorkspaceFile(entry.relative_path, content))
    directories.sort(key=lambda path: (path.count("/"), path))
    return Workspace(tuple(directories), tuple(files))


async def require_sandbox(backend: Backend, sandbox_id: str) -> None:
    """Raise `ExportError` unless the sandbox exists, asked without touching it (any
    request to a sandbox brings it into being)."""
    if sandbox_id not in {summary.id for summary in await backend.list_sandboxes()}:
        raise ExportError(f"no sandbox {sandbox_id!r} on {backend.name}", not_found=True)


async def export_context(
    backend: Backend,
    sandbox_id: str,
    context_id: str,
    *,
    with_env: bool = False,
    with_files: bool = False,
    resolve_context: Callable[[SandboxClient, str], Awaitable[str]] | None = None,
) -> Export:
    """The context's cells and outcomes from the backend's history (`GET …/history`),
    with its binding and cwd, the sandbox's env var keys (values with `with_env`) and,
    with `with_files`, the workspace files. `resolve_context` turns `context_id` (a
    prefix, say) into the context's id; it runs once the sandbox is known to exist, as
    its requests would bring the sandbox into being.

    Raises `ExportError` for a missing sandbox or context and for a backend that keeps
    no history (the Worker gateway). A context's own env vars are not reported by the
    gateway protocol, so the transcript records none.
    """
    await require_sandbox(backend, sandbox_id)
    sandbox = backend.sandbox(sandbox_id)
    if resolve_context is not None:
        context_id = await resolve_context(sandbox, context_id)
    info = await sandbox.get_info()
    context: ContextInfo | None = next(
        (item for item in info.contexts if item.id == context_id), None
    )
    if context is None:
        raise ExportError(f"sandbox {sandbox_id} has no context {context_id!r}", not_found=True)
    history = await sandbox.interpreter.history(context_id)
    if not history and context.executions > 0:
        raise ExportError(
            f"{backend.name} ({backend.description}) keeps no execution history "
            "(GET …/history is an extension of serve and the local backend); export "
            "from the workbench instead: its transcript export records the cells it ran"
        )
    notes = []
    if len(history) < context.executions:
        notes.append(
            f"the history keeps the newest {len(history)} of {context.executions} runs; "
            "the older ones are not in the transcript"
        )
    replay_notes = []
    for entry in history:
        restored = restored_checkpoint(entry.code) if entry.result is None else None
        if restored is not None:
            replay_notes.append(
                f"run {entry.seq} restored checkpoint {restored}: the runs after it started "
                "from that checkpoint's state, which a replay (from a fresh context) does not "
                "have, so they may differ there"
            )
    if not with_env and info.env_vars:
        replay_notes.append("env var values are left out (keys only); --with-env includes them")
    if context.start_cwd is None and context.executions > 0 and history:
        replay_notes.append(
            f"the backend does not say where the context started (a context stored before "
            f"that was kept, or an older serve): the transcript starts in its cwd now, "
            f"{context.cwd}, which its first runs may not have had"
        )
    transcript = Transcript(
        # Where its first run started (the cwd now is the last run's: a replay from it
        # ran every cell elsewhere; QA).
        context=ContextSpec(
            context.binding, context.language, context.start_cwd or context.cwd, {}
        ),
        cells=tuple(
            RecordedCell(entry.code, None if entry.result is None else Outcome.of(entry.result))
            for entry in history
        ),
        sandbox_env_vars=hidden_values(info.env_vars, with_env),
        workspace=await _workspace(sandbox) if with_files else None,
        source={"profile": backend.name, "sandbox": sandbox_id, "context": context_id},
    )
    cells = tuple(DocumentCell.from_history(entry, context.language) for entry in history)
    title = f"{sandbox_id}-{context.binding}-{short_id(context_id)}"
    return Export(transcript, cells, title, notes, replay_notes)
