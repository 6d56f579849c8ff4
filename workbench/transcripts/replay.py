"""Running code again where nothing is left over: a fresh context in a scratch sandbox
(deleted afterwards), for `diff`, `replay`, the TUI's rerun and the pytest plugin."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from workbench.api import (
    EXECUTION_TIMEOUT_FEATURE,
    LOCAL_ONLY_CONTEXT_LANGUAGES,
    Backend,
    ExecutionResult,
    RuntimeInfo,
    SandboxClient,
    SandboxError,
    enforces_deadlines,
    timed_out_after,
)
from workbench.transcripts.model import EnvVars, Transcript, Workspace
from workbench.transcripts.outcomes import Outcome, differing_fields

EnginePreparer = Callable[[Backend, str], Awaitable[None]]
"""Prepares the local engine of a language before it runs (a no-op for a remote backend)."""


class ReplayError(Exception):
    """The transcript cannot run on this backend (e.g. it offers no such runtime)."""


async def prepare_quietly(backend: Backend, language: str) -> None:
    """The default `EnginePreparer`: prepare a local engine that is not ready, silently."""
    manager = backend.engines
    if manager is None:
        return
    states = {info.language: info for info in await manager.statuses()}
    state = states.get(language)
    if state is not None and not state.ready:
        await manager.prepare(language, lambda label, fraction: None)


async def find_runtime(backend: Backend, binding: str | None, language: str | None) -> RuntimeInfo:
    """The backend's runtime with this binding, else the one for this language."""
    runtimes = await backend.runtimes()
    for runtime in runtimes:
        if binding is not None and runtime.binding == binding:
            return runtime
    for runtime in runtimes:
        if language is not None and runtime.language == language:
            return runtime
    wanted = " or ".join(repr(item) for item in (binding, language) if item is not None)
    offered = ", ".join(runtime.binding for runtime in runtimes) or "none"
    raise ReplayError(f"{backend.name} offers no runtime {wanted} (it offers: {offered})")


@contextlib.asynccontextmanager
async def scratch_sandbox(backend: Backend, purpose: str) -> AsyncIterator[SandboxClient]:
    """A sandbox with a fresh random id, destroyed when the block ends (on an error too;
    a failure to destroy it then does not hide the error)."""
    sandbox = backend.sandbox(f"{purpose}-{uuid.uuid4().hex[:16]}")
    try:
        yield sandbox
    except BaseException:
        with contextlib.suppress(Exception):
            await sandbox.destroy()
        raise
    await sandbox.destroy()


@contextlib.asynccontextmanager
async def fresh_context_in(
    sandbox: SandboxClient, binding: str, cwd: str | None = None, env_vars: EnvVars | None = None
) -> AsyncIterator[str]:
    """A new context in `sandbox` (its id), deleted when the block ends."""
    values = {key: value for key, value in (env_vars or {}).items() if value is not None}
    context = await sandbox.interpreter.create_code_context(binding, cwd, values or None)
    try:
        yield context.id
    finally:
        with contextlib.suppress(Exception):
            await sandbox.interpreter.delete_code_context(context.id)


async def run_fresh(
    backend: Backend,
    code: str,
    runtime: RuntimeInfo,
    *,
    sandbox_id: str | None = None,
    stateless: bool = False,
    env_vars: Mapping[str, str] | None = None,
    prepare: EnginePreparer = prepare_quietly,
) -> ExecutionResult:
    """Run `code` once where no earlier state can leak in: statelessly, or in a new
    context of `sandbox_id` (deleted afterwards), or of a scratch sandbox. A runtime
    without code contexts runs it as a sandbox runs it then: statelessly (spec 1.4)."""
    await prepare(backend, runtime.language)
    if stateless or (not runtime.contexts and sandbox_id is None):
        return await backend.run_code(code, binding=runtime.binding, env_vars=env_vars)
    if sandbox_id is not None:
        sandbox = backend.sandbox(sandbox_id)
        if not runtime.contexts:
            return await sandbox.interpreter.run_code(
                code, binding=runtime.binding, env_vars=env_vars
            )
        async with fresh_context_in(sandbox, runtime.binding) as context_id:
            return await sandbox.interpreter.run_code(code, context=context_id, env_vars=env_vars)
    async with (
        scratch_sandbox(backend, "diff") as scratch,
        fresh_context_in(scratch, runtime.binding) as context_id,
    ):
        return await scratch.interpreter.run_code(code, context=context_id, env_vars=env_vars)


@dataclass(frozen=True)
class CellReplay:
    """One cell run again: what was recorded and what happened now."""

    number: int
    code: str
    recorded: Outcome | None
    observed: Outcome

    @property
    def differences(self) -> list[str]:
        """The parts that differ (none when nothing was recorded to compare with)."""
        if self.recorded is None:
            return []
        return differing_fields(self.recorded, self.observed)


@dataclass(frozen=True)
class ReplayReport:
    profile: str
    binding: str
    cells: list[CellReplay]
    unset_env_vars: list[str] = field(default_factory=list)
    """Recorded env var keys without a value (exported without `--with-env`): not set."""
    known_difference: str | None = None
    """Why the cells were not replayed although nothing diverged: the backend has no code
    contexts for the binding (Ruby contexts are a local extension, see `local_only`)."""

    @property
    def divergences(self) -> list[CellReplay]:
        return [cell for cell in self.cells if cell.differences]


async def _recreate_workspace(sandbox: SandboxClient, workspace: Workspace) -> None:
    for directory in workspace.directories:
        await sandbox.mkdir(directory, recursive=True)
    for item in workspace.files:
        parent = item.path.rpartition("/")[0]
        if parent:
            await sandbox.mkdir(parent, recursive=True)
        await sandbox.write_file(item.path, item.content)


async def _enforces_deadlines(backend: Backend) -> bool:
    """`enforces_deadlines`, once the gateway's health was asked (a health that cannot be
    read says no)."""
    if not backend.transport.enforces_deadlines:
        with contextlib.suppress(SandboxError):
            await backend.features.offers(EXECUTION_TIMEOUT_FEATURE)
    return enforces_deadlines(backend.transport, backend.features)


def recorded_timeout(outcome: Outcome | None) -> float | None:
    """The wall-clock limit a recorded run was stopped at (`Execution timed out after
    2 s`), which its replay runs under: the backend's own limit made it diverge (run on
    to the end) or waited for it (QA). Only where the backend enforces a request's limit
    (the local backend, `serve`): a Worker gateway keeps its own, and a client that
    stopped waiting sooner would only fail."""
    error = None if outcome is None else outcome.error
    return None if error is None else timed_out_after(error.name, error.message)


async def replay_transcript(
    backend: Backend,
    transcript: Transcript,
    *,
    prepare: EnginePreparer = prepare_quietly,
    on_cell: Callable[[CellReplay], None] | None = None,
) -> ReplayReport:
    """Run the transcript's cells in order in a fresh context of a scratch sandbox
    (its env vars and files recreated first) and compare each with what was recorded.
    The scratch sandbox is destroyed afterwards."""
    spec = transcript.context
    runtime = await find_runtime(backend, spec.binding, spec.language)
    if runtime.language != spec.language:
        # Binding names are a deployment's own (`SCRATCH=python`): the transcript's
        # language decides (a hand-edited file's Python cells ran as Perl; QA), in a
        # runtime of it that offers contexts where one does.
        offered = [item for item in await backend.runtimes() if item.language == spec.language]
        in_context = [item for item in offered if item.contexts]
        runtime = (in_context or offered or [await find_runtime(backend, None, spec.language)])[0]
    unset = sorted(
        key
        for env in (transcript.sandbox_env_vars, spec.env_vars)
        for key, value in env.items()
        if value is None
    )
    if not runtime.contexts:
        if spec.language not in LOCAL_ONLY_CONTEXT_LANGUAGES:  # not a difference we made
            raise ReplayError(
                f"the transcript ran in a {spec.language} code context, and {backend.name} "
                f"runs {runtime.binding} statelessly only"
            )
        reason = (
            f"known difference: the transcript ran in a {spec.language} code context, and "
            f"{backend.name} runs {runtime.binding} statelessly ({spec.language} contexts "
            "are a local extension); not replayed"
        )
        return ReplayReport(backend.name, runtime.binding, [], unset, reason)
    await prepare(backend, runtime.language)
    cells: list[CellReplay] = []
    async with scratch_sandbox(backend, "replay") as sandbox:
        sandbox_env = {k: v for k, v in transcript.sandbox_env_vars.items() if v is not None}
        if sandbox_env:
            await sandbox.set_env_vars(sandbox_env)
        if transcript.workspace is not None:
            await _recreate_workspace(sandbox, transcript.workspace)
        async with fresh_context_in(sandbox, runtime.binding, spec.cwd, spec.env_vars) as context:
            enforced = await _enforces_deadlines(backend)
            for number, cell in enumerate(transcript.cells, start=1):
                limit = recorded_timeout(cell.outcome) if enforced else None
                result = await sandbox.interpreter.run_code(
                    cell.code, context=context, timeout=limit
                )
                replayed = CellReplay(number, cell.code, cell.outcome, Outcome.of(result))
                cells.append(replayed)
                if on_cell is not None:
                    on_cell(replayed)
    return ReplayReport(backend.name, runtime.binding, cells, unset)
