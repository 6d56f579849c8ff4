"""The current profile's backend and every API call the workbench makes.

Each call runs in a Textual worker of the owner (the main screen) and posts its outcome
as a message (`workbench.tui.messages`); widgets are changed only by the owner's handlers.

Any request naming a sandbox makes it again, empty, if another client destroyed it (spec
2.4), and the tree the user acts on may be older than that. So the requests of a call the
user starts on a sandbox are carried out only if it exists, where the backend offers that
(`sandboxes_must_exist`: atomic there, and no listing first); elsewhere such a call lists
the sandboxes first, once (`require_listed`), and asks nothing of one that is gone. The
calls that follow it, or a listing, or a run that found the sandbox, do not list again.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

from textual.widget import Widget
from textual.worker import Worker

from workbench.api import (
    CONTEXT_INSPECT_FEATURE,
    EXECUTION_TIMEOUT_FEATURE,
    OUTPUT_STREAM_FEATURE,
    SANDBOX_MUST_EXIST_FEATURE,
    Backend,
    CodeContext,
    ContextNotFoundError,
    EnginePrepareError,
    ExecutionResult,
    SandboxError,
    SandboxNotFoundError,
    VersionReport,
    sandboxes_must_exist,
)
from workbench.api.costs import sandbox_cost
from workbench.config import ConfigError, LocalSettings, Prices
from workbench.profiles import LOCAL, UnknownProfileError
from workbench.sync.runner import entry_run_of
from workbench.transcripts.documents import history_number
from workbench.tui.error_messages import Declined, describe_error
from workbench.tui.history_store import LocalHistoryStore
from workbench.tui.messages import (  # the reports posted here; MainScreen handles them
    BackendFailed,
    BackendOpened,
    CellFinished,
    CellOutput,
    CellWaiting,
    CheckpointNameTaken,
    CheckpointRestored,
    CheckpointSaved,
    CheckpointsLoaded,
    ContextGone,
    ContextInspected,
    ContextOpened,
    ContextRemoved,
    ContextsGone,
    DaemonReplaced,
    DirectoryListed,
    EnginePrepared,
    EngineProgress,
    EngineStatesLoaded,
    EnvVarsSaved,
    HealthChecked,
    HistoryCaughtUp,
    OperationFailed,
    RestoreCounted,
    RunAbandoned,
    RuntimesLoaded,
    SandboxDestroyed,
    SandboxDestroyWaits,
    SandboxesLoaded,
    SandboxInfoFailed,
    SandboxInfoLoaded,
    SandboxUsageLoaded,
    TokenRefused,
    ValueInspected,
)
from workbench.tui.screens.create_context_screen import ContextRequest
from workbench.tui.tree_nodes import context_from_info

BackendFactory = Callable[[str], Backend]
BackendCall = Callable[[Backend], Awaitable[None]]

PAST_CELLS = 100
"""A reopened context's transcript shows its newest runs up to this many (older ones stay
in its input history, which the history search finds)."""
OUTPUT_BATCH_SECONDS = 0.1
"""How long the first line of a batch of streamed output waits for more."""
CANCEL_ANSWER_SECONDS = 5.0
"""How long ctrl+g waits for the backend to say whether it interrupted the cell before it
gives the cell's request up instead."""
HEALTH_ANSWER_SECONDS = 10.0
"""A health check not answered by then says the backend is unreachable (the check comes
every 15 s)."""
DESTROY_NOTE_SECONDS = 0.5
"""How long a sandbox's destroy waits for its turn before the workbench says so."""


def connection_detail(backend: Backend) -> str:
    """What the status bar says about a connected backend: `local (DIR) · daemon pid N`."""
    served = f" · {backend.served_by}" if backend.served_by else ""
    return f"{backend.description}{served}"


@dataclass(frozen=True)
class ServingDaemon:
    """The local daemon that answered a health check (the `daemon` its backend adds)."""

    pid: int
    started_at: int
    version: str
    settings: LocalSettings | None
    started_by: int | None
    """The pid of the client that started it."""

    @classmethod
    def read(cls, health: dict[str, Any]) -> ServingDaemon | None:
        """The daemon `health` names; None for a backend that is not a daemon's."""
        data = health.get("daemon")
        if not isinstance(data, dict):
            return None
        pid, started_at, version = data.get("pid"), data.get("startedAt"), data.get("version")
        started_by = data.get("startedBy")
        if not isinstance(pid, int) or not isinstance(started_at, int):
            return None
        return cls(
            pid,
            started_at,
            str(version),
            LocalSettings.from_json(data.get("settings")),
            started_by if isinstance(started_by, int) else None,
        )

    def replaced(self, previous: ServingDaemon) -> bool:
        return (self.pid, self.started_at) != (previous.pid, previous.started_at)


def daemon_change_note(
    previous: ServingDaemon, current: ServingDaemon, own_pid: int
) -> tuple[str, bool]:
    """What the workbench says of a replaced daemon, and whether it is a warning (the new
    one differs in settings or version)."""
    if current.started_by == own_pid:
        said = (
            f"This workbench started a new local daemon (pid {current.pid}): the one it "
            f"used (pid {previous.pid}) had gone away."
        )
    elif current.started_by is not None:
        said = (
            f"Another client (pid {current.started_by}) started a new local daemon: "
            f"pid {previous.pid} → pid {current.pid}."
        )
    else:
        said = f"The local daemon was restarted: pid {previous.pid} → pid {current.pid}."
    changes = settings_changes(previous.settings, current.settings)
    if current.version != previous.version:
        changes.append(f"version {current.version} (was {previous.version})")
    if not changes:
        return f"{said} Contexts continue from their last runs.", False
    return (
        f"{said} It has {', '.join(changes)}: new contexts and runs follow it. "
        "Give every client the same settings ([local] in the config) to keep them.",
        True,
    )


def settings_changes(before: LocalSettings | None, after: LocalSettings | None) -> list[str]:
    """`Ruby contexts off (were on)`: each setting that differs."""
    if before is None or after is None:
        return [] if before == after else ["other settings"]
    changes = []
    for label, verb, was, now in (
        ("Ruby contexts", "were", before.ruby_contexts, after.ruby_contexts),
        ("the File API", "was", before.file_api, after.file_api),
    ):
        if was != now:
            changes.append(f"{label} {'on' if now else 'off'} ({verb} {'on' if was else 'off'})")
    return changes


class OutputBatch:
    """A running cell's output lines, posted together at most every
    `OUTPUT_BATCH_SECONDS`: a guest that prints thousands of lines costs the app a few
    messages, not thousands."""

    def __init__(self, owner: Widget, context_id: str) -> None:
        self._owner = owner
        self._context_id = context_id
        self._lines: list[tuple[str, str]] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, stream: str, line: str) -> None:
        self._lines.append((stream, line))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(OUTPUT_BATCH_SECONDS, self._post)

    def _post(self) -> None:
        self._timer = None
        lines, self._lines = self._lines, []
        if lines:
            self._owner.post_message(CellOutput(self._context_id, lines))

    def drop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lines = []


def run_group(context_id: str) -> str:
    """The worker group of a context's cell runs (an abandoned run cancels it)."""
    return f"run-{context_id}"


def cancel_group(context_id: str) -> str:
    """The worker group of the cancels of a context's cell (its give-up cancels them)."""
    return f"cancel-{context_id}"


@dataclass
class InfoLoad:
    """A read of one sandbox's info on its way (`ProfileConnection.load_sandbox_info`)."""

    again: bool = False
    """A change meanwhile (a run's, say) asked for another read."""


def gone_refusal(sandbox_id: str) -> Declined:
    """What a call the user started on a sandbox that is gone says."""
    return Declined(
        f"sandbox {sandbox_id} is gone (another client destroyed it, or it expired), "
        "so nothing was done: that would have made it again, empty"
    )


class ProfileConnection:
    """`backend` is the open backend of `backend_profile`: `profile`'s, except while
    another profile opens (None until the first one opens)."""

    def __init__(
        self,
        owner: Widget,
        backend_factory: BackendFactory,
        history_store: LocalHistoryStore,
        profile: str,
    ) -> None:
        self.owner = owner
        self.backend_factory = backend_factory
        self.history_store = history_store
        """Inputs of remote contexts, for backends that keep no history."""
        self.profile = profile
        self.backend: Backend | None = None
        self.backend_profile: str | None = None
        self.refused: str | None = None
        """Why the backend refused its token (HTTP 401), until it takes a request again or
        is opened again."""
        self.versions = VersionReport.read(None)
        """What the last health check said about versions (read on `HealthChecked`)."""
        self.prices: Prices | None = None
        """What the sandbox info's cost estimate charges (None: no estimate)."""
        self.ready_engines: set[str] = set()
        """Languages whose local engine the current backend reported prepared: a cell in
        one of them runs without asking again."""
        self.daemon: ServingDaemon | None = None
        """The local daemon the last health check found (None: not a daemon's backend)."""
        self.daemons_seen: dict[str, ServingDaemon] = {}
        """The last daemon each profile's health checks found: a profile opened again
        compares its daemon with it (another client may have restarted it meanwhile)."""
        self.listings = 0
        """Listings of the sandboxes asked for so far (each one's number)."""
        self.info_loads: dict[str, InfoLoad] = {}
        """The sandboxes whose info is being read: one read (and listing) at a time each."""

    # ----------------------------------------------------------------- features

    def _offers(self, feature: str, *, until_known: bool) -> bool:
        """Whether the current backend's health listed `feature` (`until_known` before
        a health answer of that backend came: each backend learns its own)."""
        offered = None if self.backend is None else self.backend.features.offered
        return until_known if offered is None else feature in offered

    @property
    def streams_output(self) -> bool:
        """The backend streams a running cell's output (a Worker gateway answers at the
        end: its health lacks the feature)."""
        return self._offers(OUTPUT_STREAM_FEATURE, until_known=True)

    @property
    def inspects_copies(self) -> bool:
        """The backend inspects a copy of a context (a Worker gateway can only run the
        inspector in the context: its health lacks the feature). Until health says, an
        inspection asks for a copy, which never runs code."""
        return self._offers(CONTEXT_INSPECT_FEATURE, until_known=True)

    @property
    def cancels_given_up(self) -> bool:
        """The backend cancels an execution whose request is given up (the local backend,
        `serve`: their health says so; a Worker gateway's guest runs on)."""
        return self._offers(EXECUTION_TIMEOUT_FEATURE, until_known=False)

    @property
    def refuses_gone_sandboxes(self) -> bool:
        """The backend carries a request out only if its sandbox exists, when asked (its
        health says so; an older gateway would make the sandbox again): until health
        says, calls the user starts list the sandboxes first."""
        return self._offers(SANDBOX_MUST_EXIST_FEATURE, until_known=False)

    # ----------------------------------------------------------------- opening

    def cancel_requests(self) -> None:
        """Drop the running cells and calls (before switching to another profile)."""
        for worker in self.owner.workers:
            if worker.group.startswith("run-") or worker.group == "backend-call":
                worker.cancel()
        self.info_loads.clear()  # a read cancelled before it started never says it ended

    def open(self, profile: str) -> Worker[None]:
        """Open `profile`'s backend in a thread; the current one stays until `adopt`."""
        self.profile = profile
        return self.owner.run_worker(
            partial(self._open_backend, profile),
            name="open_backend",
            group="open-backend",
            exclusive=True,
            exit_on_error=False,
            thread=True,
        )

    def _open_backend(self, profile: str) -> None:
        """Any failure is said (`BackendFailed`): the worker ends silently otherwise,
        and the status said "connecting" for ever (a runtime dir open to other users)."""
        try:
            backend = self.backend_factory(profile)
        except (UnknownProfileError, ConfigError, SandboxError, OSError) as error:
            self.owner.post_message(BackendFailed(profile, str(error)))
            return
        except Exception as error:
            self.owner.post_message(BackendFailed(profile, describe_error(error)))
            return
        self.owner.post_message(BackendOpened(profile, backend))

    async def adopt(self, profile: str, backend: Backend) -> bool:
        """Make an opened backend current; False (and it is closed) when it belongs to a
        profile that is no longer current."""
        if profile != self.profile:
            await backend.aclose()
            return False
        previous, self.backend = self.backend, backend
        self.backend_profile = profile
        self.refused = None
        self.ready_engines.clear()
        self.daemon = self.daemons_seen.get(profile)
        if previous is not None and previous is not backend:
            await previous.aclose()
        return True

    async def drop_backend(self) -> None:
        """Close the backend of the profile before a switch that failed: nothing of that
        profile is shown, nor asked for, under the new one's name."""
        previous, self.backend = self.backend, None
        self.backend_profile = None
        if previous is not None:
            await previous.aclose()

    async def close(self) -> None:
        if self.backend is not None:
            await self.backend.aclose()

    def check_health(self) -> Worker[None] | None:
        # The backend of a profile switched away from says nothing of the one opening (a
        # check of it, said as the failing profile's, showed that one "connected").
        if self.backend is None or self.backend_profile != self.profile:
            return None
        return self.owner.run_worker(
            partial(self._check_health, self.backend, self.profile),
            name="check_health",
            group="health",
            exclusive=True,
            exit_on_error=False,
        )

    async def _check_health(self, backend: Backend, profile: str) -> None:
        # A gateway's check is bounded (it said "connected" while the gateway hung; QA);
        # not the local backend's, whose check may start its daemon again (up to 60 s).
        limit = HEALTH_ANSWER_SECONDS if backend.engines is None else None
        try:
            async with asyncio.timeout(limit) as scope:
                health = await backend.health()
        except TimeoutError as error:
            why = describe_error(error)
            if scope.expired():
                why = f"no answer to the health check in {HEALTH_ANSWER_SECONDS:g} s"
            self.owner.post_message(HealthChecked(profile, False, why))
            return
        except Exception as error:
            self.owner.post_message(HealthChecked(profile, False, describe_error(error)))
            return
        if profile == self.profile:
            self.versions = VersionReport.read(health)
            self.notice_daemon(profile, ServingDaemon.read(health))
        self.owner.post_message(HealthChecked(profile, True, connection_detail(backend)))

    def notice_daemon(self, profile: str, daemon: ServingDaemon | None) -> None:
        """Post `DaemonReplaced` when another daemon answers than at the last check."""
        previous, self.daemon = self.daemon, daemon
        if daemon is not None:
            self.daemons_seen[profile] = daemon
        if previous is None or daemon is None or not daemon.replaced(previous):
            return
        self.ready_engines.clear()  # the new daemon's engines are asked again
        note, warning = daemon_change_note(previous, daemon, os.getpid())
        self.owner.post_message(DaemonReplaced(profile, note, warning))

    # ----------------------------------------------------------------- calls

    def backend_or_warn(self) -> Backend | None:
        """The backend; None, with a warning that says so, while it is not open yet."""
        if self.backend is None:
            self.owner.notify("The backend is not open yet.", severity="warning")
        return self.backend

    def call(
        self, title: str, call: BackendCall, *, only_if_listed: str | None = None
    ) -> Worker[None] | None:
        """Run `call(backend)` in a worker; a failure becomes `OperationFailed(title, …)`.
        `only_if_listed`: the sandbox of a call the user started, whose requests are
        carried out only while it exists (`only_if_exists`)."""
        backend = self.backend_or_warn()
        if backend is None:
            return None
        return self.owner.run_worker(
            partial(self._call, backend, title, call, only_if_listed),
            name="backend_call",
            group="backend-call",
            exit_on_error=False,
        )

    async def _call(
        self, backend: Backend, title: str, call: BackendCall, only_if_listed: str | None
    ) -> None:
        try:
            guard: AbstractAsyncContextManager[None] = (
                nullcontext()
                if only_if_listed is None
                else self.only_if_exists(backend, only_if_listed)
            )
            async with guard:
                await call(backend)
            self.note_token(backend, None)
        except Exception as error:
            self.owner.post_message(OperationFailed(title, describe_error(error)))
            self.note_token(backend, error)

    def note_token(self, backend: Backend, error: Exception | None) -> None:
        """After a request of `backend` that failed with `error` (None: it was answered):
        whether the backend of the profile shown refuses its token (HTTP 401) now."""
        if backend is not self.backend or self.backend_profile != self.profile:
            return
        if isinstance(error, SandboxError) and error.http_status == 401:
            self.refused = describe_error(error)
            self.owner.post_message(TokenRefused(self.profile, self.refused))
        elif error is None and self.refused is not None:  # taken now
            self.refused = None
            self.check_health()

    async def list_sandboxes(self, backend: Backend) -> SandboxesLoaded:
        """The backend's sandboxes, numbered in the order the listings were asked for."""
        self.listings += 1
        number = self.listings
        return SandboxesLoaded(await backend.list_sandboxes(), backend, number)

    async def still_listed(self, backend: Backend, sandbox_id: str) -> bool:
        """Whether the backend lists the sandbox (a listing makes none, where a request
        naming it makes it again); when not, the listing is posted: the tree drops the
        sandbox, and its tabs and open files say it is gone."""
        loaded = await self.list_sandboxes(backend)
        if any(summary.id == sandbox_id for summary in loaded.sandboxes):
            return True
        self.owner.post_message(loaded)
        return False

    async def require_listed(self, backend: Backend, sandbox_id: str) -> None:
        """Before a request the user started on the sandbox: `Declined` when it is gone
        (`still_listed`). Not offered to make it again: nothing typed is at stake, and
        *New sandbox* makes one."""
        if not await self.still_listed(backend, sandbox_id):
            raise gone_refusal(sandbox_id)

    @asynccontextmanager
    async def only_if_exists(
        self, backend: Backend, sandbox_id: str, *, list_first: bool = True
    ) -> AsyncIterator[None]:
        """Where the backend offers it, every request inside is carried out only if the
        sandbox exists (checked by the backend as it acts: no destroy slips in between,
        and no listing is asked first); one that finds it gone is `Declined` after a
        listing, which drops it from the tree and says its tabs and files are gone, as
        `require_listed` does. Elsewhere the sandboxes are listed first
        (`require_listed`), unless not `list_first` (a listing or a request just found
        the sandbox)."""
        if not self.refuses_gone_sandboxes:
            if list_first:
                await self.require_listed(backend, sandbox_id)
            yield
            return
        try:
            with sandboxes_must_exist():
                yield
        except SandboxNotFoundError as error:
            if error.context.get("sandboxId") != sandbox_id:
                raise
            self.owner.post_message(await self.list_sandboxes(backend))
            raise gone_refusal(sandbox_id) from None

    def load_sandboxes(self, *, refresh: bool = False) -> None:
        async def load(backend: Backend) -> None:
            loaded = await self.list_sandboxes(backend)
            loaded.refresh = refresh
            self.owner.post_message(loaded)

        self.call("Listing sandboxes failed", load)

    def load_runtimes(self) -> None:
        async def load(backend: Backend) -> None:
            # None for a backend that runs no engine here: the local profile's states
            # showed beside a remote profile's runtimes after a switch back (QA).
            engines = [] if backend.engines is None else await backend.engines.statuses()
            self.owner.post_message(EngineStatesLoaded(engines))
            self.owner.post_message(RuntimesLoaded(await backend.runtimes()))

        self.call("Listing runtimes failed", load)

    def load_sandbox_info(
        self, sandbox_id: str, *, check_listed: bool = True, changed: bool = False
    ) -> None:
        """The sandbox's info, then its checkpoints' usage and (with `prices`) the
        estimated cost of its kept runs. `check_listed=False` after a listing, or a
        request, that just found the sandbox. While a read of it is on its way, another
        is not sent: that one answers a user's look at the sandbox, and one more follows
        it for a change it may predate (a follow-up's, or `changed`: a run's, a save's)."""
        current = self.info_loads.get(sandbox_id)
        if current is not None:
            current.again = current.again or changed or not check_listed
            return
        entry = self.info_loads[sandbox_id] = InfoLoad()

        async def load(backend: Backend) -> None:
            read = False
            try:
                async with self.only_if_exists(backend, sandbox_id, list_first=check_listed):
                    sandbox = backend.sandbox(sandbox_id)
                    try:
                        info = await sandbox.get_info()
                    except Exception:
                        self.owner.post_message(SandboxInfoFailed(sandbox_id))
                        raise
                    read = True
                    self.owner.post_message(SandboxInfoLoaded(info))
                    contexts = [context.id for context in info.contexts]
                    checkpoints = await sandbox.interpreter.checkpoint_usage(contexts)
                    cost = None
                    if self.prices is not None:
                        cost = await sandbox_cost(sandbox, info, self.prices)
                self.owner.post_message(SandboxUsageLoaded(sandbox_id, checkpoints, cost))
            finally:
                if self.info_loads.get(sandbox_id) is entry:
                    del self.info_loads[sandbox_id]
                    task = asyncio.current_task()
                    stopped = task is not None and task.cancelling() > 0
                    # Not after a failure (the user may retry), nor once stopped. Listed
                    # first where the backend cannot refuse: another client may have
                    # destroyed it since, and the read would make it again (a flaky test).
                    if read and entry.again and not stopped:
                        self.load_sandbox_info(sandbox_id)

        if self.call(f"Loading {sandbox_id} failed", load) is None:  # no backend to ask
            del self.info_loads[sandbox_id]

    def confirm_contexts_gone(self, sandbox_id: str, context_ids: list[str]) -> None:
        """Post `ContextsGone` for those of `context_ids` the sandbox no longer lists (a
        listing asked now: an info loaded before one of them was made lacks it too)."""

        async def confirm(backend: Backend) -> None:
            interpreter = backend.sandbox(sandbox_id).interpreter
            try:  # an info just found the sandbox, but the listing would make it again
                async with self.only_if_exists(backend, sandbox_id, list_first=False):
                    listed = {context.id for context in await interpreter.list_code_contexts()}
            except Declined:
                return  # gone: the listing it posted marks its tabs gone
            gone = [context_id for context_id in context_ids if context_id not in listed]
            if gone:
                self.owner.post_message(ContextsGone(sandbox_id, gone))

        self.call(f"Listing the contexts of {sandbox_id} failed", confirm)

    def list_directory(self, sandbox_id: str, path: str) -> None:
        async def load(backend: Backend) -> None:
            listing = await backend.sandbox(sandbox_id).list_files(path, include_hidden=True)
            self.owner.post_message(DirectoryListed(sandbox_id, path, listing.files))

        self.call(f"Listing {path} failed", load, only_if_listed=sandbox_id)

    def create_sandbox(self, sandbox_id: str) -> None:
        async def create(backend: Backend) -> None:
            info = await backend.sandbox(sandbox_id).get_info()
            self.owner.post_message(await self.list_sandboxes(backend))
            self.owner.post_message(SandboxInfoLoaded(info, created=True))

        self.call(f"Creating {sandbox_id} failed", create)

    def destroy_sandbox(self, sandbox_id: str, after: Sequence[asyncio.Event] = ()) -> None:
        """Destroy the sandbox once every event `after` is set (this workbench's watches
        into it have ended: a pass still uploading would make the sandbox again)."""

        waiting = bool(after)

        async def destroy_after(backend: Backend) -> None:
            nonlocal waiting
            for event in after:
                await event.wait()
            waiting = False
            await backend.sandbox(sandbox_id).destroy()

        async def destroy(backend: Backend) -> None:
            destroying = asyncio.ensure_future(destroy_after(backend))
            try:
                done, _ = await asyncio.wait({destroying}, timeout=DESTROY_NOTE_SECONDS)
                if not done:  # silent, F8 looked ignored while a run held the sandbox (QA)
                    self.owner.post_message(SandboxDestroyWaits(sandbox_id))
                await destroying
            except asyncio.CancelledError:
                if waiting:  # nothing was asked of the backend: said, not left unsaid
                    reason = "given up before it was asked for (the profile changed)"
                    self.owner.post_message(OperationFailed(f"Destroying {sandbox_id}", reason))
                raise
            finally:
                destroying.cancel()
            self.owner.post_message(SandboxDestroyed(sandbox_id))
            self.owner.post_message(await self.list_sandboxes(backend))

        self.call(f"Destroying {sandbox_id} failed", destroy)

    async def save_env_vars(
        self, backend: Backend, sandbox_id: str, update: dict[str, str | None]
    ) -> None:
        """Save env vars: awaited in the env vars dialog's worker, which shows a refusal in
        the dialog, keeping what was typed; not in a sandbox the backend no longer lists."""
        async with self.only_if_exists(backend, sandbox_id):
            await backend.sandbox(sandbox_id).set_env_vars(update)
        unset = sum(1 for value in update.values() if value is None)
        self.owner.post_message(EnvVarsSaved(sandbox_id, len(update) - unset, unset))
        # Saved: a failure to read the info back is not the dialog's refusal.
        self.load_sandbox_info(sandbox_id, check_listed=False)

    # ----------------------------------------------------------------- contexts

    def open_context(self, sandbox_id: str, context: CodeContext) -> None:
        """Load the context's history (the server's, else the one kept here for a remote
        profile); `ContextOpened` follows."""

        async def load_history(backend: Backend) -> None:
            await self._load_history(backend, sandbox_id, context)

        self.call("Loading the context's history failed", load_history, only_if_listed=sandbox_id)

    async def _load_history(
        self, backend: Backend, sandbox_id: str, context: CodeContext, beside: str | None = None
    ) -> None:
        profile = self.profile
        server = await backend.sandbox(sandbox_id).interpreter.history(context.id)
        # What was typed: a watch's runs of an entry file are not recalled
        codes = [
            entry.code for entry in server if entry_run_of(context.language, entry.code) is None
        ]
        if not server and profile != LOCAL:
            codes = self.history_store.entries(profile, sandbox_id, context.id)
        past = server[-PAST_CELLS:]
        earlier = len(server) - len(past)
        self.owner.post_message(ContextOpened(sandbox_id, context, codes, past, earlier, beside))

    def reopen_context(self, sandbox_id: str, context: CodeContext) -> None:
        """Open a context that was open last session, if it still exists (`ContextOpened`),
        else report it gone (`ContextRemoved`)."""

        async def reopen(backend: Backend) -> None:
            # Its sandbox was listed, but may be destroyed since: the info would make it
            # again (where the backend cannot refuse that, it is listed once more first).
            try:
                async with self.only_if_exists(backend, sandbox_id):
                    # From the info, which says where the context started (a listing does
                    # not: a reopened tab's replayable export started at the last run's
                    # cwd; review).
                    listed = (await backend.sandbox(sandbox_id).get_info()).contexts
                    current = next((item for item in listed if item.id == context.id), None)
                    if current is not None:
                        await self._load_history(backend, sandbox_id, context_from_info(current))
                        return
            except Declined:
                pass  # gone: the listing it posted drops the sandbox
            self.owner.post_message(ContextRemoved(sandbox_id, context.id))

        self.call("Reopening a tab of the last session failed", reopen)

    def catch_up(
        self,
        sandbox_id: str,
        context_id: str,
        after: int,
        before: int | None,
        generation: int,
    ) -> None:
        """Read the context's history for the runs after run `after` (and before run
        `before`): `HistoryCaughtUp`. Only of a sandbox that still exists, as
        `only_if_exists` checks: reading a sandbox's history makes it again (a catch-up
        after a cancel came just after this workbench's destroy, and made it again)."""

        async def load(backend: Backend) -> None:
            try:
                async with self.only_if_exists(backend, sandbox_id):
                    server = await backend.sandbox(sandbox_id).interpreter.history(context_id)
            except Declined:
                return  # gone: the listing it posted marks the tab gone
            oldest = history_number(server[0]) if server else None
            entries = [
                entry
                for entry in server
                if history_number(entry) > after
                and (before is None or history_number(entry) < before)
            ]
            self.owner.post_message(
                HistoryCaughtUp(context_id, after, before, generation, entries, oldest)
            )

        self.call("Reading the context's history failed", load)

    def remember_input(self, sandbox_id: str, context_id: str, code: str) -> None:
        """Keep a run's input here when the profile is remote."""
        if self.profile != LOCAL:
            self.history_store.append(self.profile, sandbox_id, context_id, code)

    async def create_context(
        self, backend: Backend, sandbox_id: str, request: ContextRequest
    ) -> CodeContext:
        """Create a context: awaited in the new-context dialog's worker, which shows a
        refusal in the dialog (its result opens the context); not in a sandbox the
        backend no longer lists."""
        async with self.only_if_exists(backend, sandbox_id):
            return await backend.sandbox(sandbox_id).interpreter.create_code_context(
                request.binding, request.cwd, request.env_vars or None
            )

    def fork_context(self, sandbox_id: str, context: CodeContext) -> None:
        """Fork the context; the fork opens with the history it copied (`ContextOpened`)."""

        async def fork(backend: Backend) -> None:
            sandbox = backend.sandbox(sandbox_id)
            forked = await sandbox.interpreter.fork_code_context(context.id)
            await self._load_history(backend, sandbox_id, forked, beside=context.id)
            self.owner.post_message(SandboxInfoLoaded(await sandbox.get_info()))

        self.call("Forking the context failed", fork, only_if_listed=sandbox_id)

    def inspect_context(
        self, sandbox_id: str, context: CodeContext, *, run_code: bool, check_listed: bool
    ) -> None:
        """List the context's names (`ContextInspected`); `run_code`: by running the
        inspector in the context, where the backend cannot inspect a copy. A newer
        request for the same context replaces one still running. `check_listed`: asked
        by the user, not after a run (`only_if_exists`)."""
        backend = self.backend_or_warn()
        if backend is None:
            return

        async def inspect() -> None:
            interpreter = backend.sandbox(sandbox_id).interpreter
            try:
                async with self.only_if_exists(backend, sandbox_id, list_first=check_listed):
                    inspection = await interpreter.inspect_context(context, run_code=run_code)
            except Exception as error:
                self.owner.post_message(ContextInspected(context.id, None, describe_error(error)))
                return
            self.owner.post_message(ContextInspected(context.id, inspection))

        self.owner.run_worker(
            inspect(),
            name="inspect_context",
            group=f"inspect-{context.id}",
            exclusive=True,
            exit_on_error=False,
        )

    def inspect_value(
        self, sandbox_id: str, context: CodeContext, name: str, offset: int, *, run_code: bool
    ) -> None:
        """A page of one name's value (`ValueInspected`), as `inspect_context` reads;
        each asked by the user (`only_if_exists`)."""
        backend = self.backend_or_warn()
        if backend is None:
            return

        async def inspect() -> None:
            interpreter = backend.sandbox(sandbox_id).interpreter
            try:
                async with self.only_if_exists(backend, sandbox_id):
                    value = await interpreter.inspect_value(
                        context, name, offset, run_code=run_code
                    )
            except Exception as error:
                failure = describe_error(error)
                self.owner.post_message(ValueInspected(context.id, name, offset, None, failure))
                return
            self.owner.post_message(ValueInspected(context.id, name, offset, value))

        self.owner.run_worker(inspect(), name="inspect_value", exit_on_error=False)

    def save_checkpoint(
        self, sandbox_id: str, context: CodeContext, name: str, *, replace: bool = False
    ) -> None:
        """Save the context's state as checkpoint `name`; unless `replace`, a checkpoint of
        that name is not replaced but named (`CheckpointNameTaken`), to ask first."""

        async def save(backend: Backend) -> None:
            interpreter = backend.sandbox(sandbox_id).interpreter
            if not replace:
                listed = await interpreter.list_checkpoints(context.id)
                taken = [saved for saved in listed.checkpoints if saved.name == name]
                if taken:
                    self.owner.post_message(CheckpointNameTaken(sandbox_id, context, taken[0]))
                    return
            saved = await interpreter.save_checkpoint(context.id, name)
            self.owner.post_message(CheckpointSaved(context.id, saved))

        self.call("Saving the checkpoint failed", save, only_if_listed=sandbox_id)

    def load_checkpoints(self, sandbox_id: str, context: CodeContext) -> None:
        async def load(backend: Backend) -> None:
            listed = await backend.sandbox(sandbox_id).interpreter.list_checkpoints(context.id)
            self.owner.post_message(CheckpointsLoaded(sandbox_id, context.id, listed.checkpoints))

        self.call("Listing the checkpoints failed", load, only_if_listed=sandbox_id)

    def restore_checkpoint(self, sandbox_id: str, context: CodeContext, name: str) -> None:
        async def restore(backend: Backend) -> None:
            sandbox = backend.sandbox(sandbox_id)
            restored = await sandbox.interpreter.restore_checkpoint(context.id, name)
            # Said at once: the info waits its turn, behind a cell typed meanwhile.
            self.owner.post_message(CheckpointRestored(context.id, restored))
            try:
                info = await sandbox.get_info()
            except SandboxError:  # restored all the same: not "restoring failed" (review)
                return
            for item in info.contexts:
                if item.id == context.id:
                    self.owner.post_message(RestoreCounted(context.id, item.executions))
            self.owner.post_message(SandboxInfoLoaded(info))

        self.call("Restoring the checkpoint failed", restore, only_if_listed=sandbox_id)

    def change_context(self, sandbox_id: str, context: CodeContext, *, recreate: bool) -> None:
        """Delete the context; with `recreate`, create a fresh one like it."""

        async def change(backend: Backend) -> None:
            interpreter = backend.sandbox(sandbox_id).interpreter
            if recreate and (refused := await backend.contexts_refused(context.binding)):
                # It would be deleted, and none made in its place (found in review).
                raise Declined(f"{refused}, so a reset would only delete it; nothing was")
            await interpreter.delete_code_context(context.id)
            self.owner.post_message(ContextRemoved(sandbox_id, context.id))
            if recreate:
                fresh = await interpreter.create_code_context(context.binding, context.cwd)
                self.owner.post_message(ContextOpened(sandbox_id, fresh, []))

        self.call("Changing the context failed", change, only_if_listed=sandbox_id)

    # ----------------------------------------------------------------- engines and runs

    def prepare_engine(self, backend: Backend, language: str) -> Worker[str | None]:
        return self.owner.run_worker(
            partial(self.prepare_engine_now, backend, language),
            name="prepare_engine",
            group="prepare-engine",
            exit_on_error=False,
        )

    async def prepare_engine_now(self, backend: Backend, language: str) -> str | None:
        """Worker body: prepare a local engine, reporting progress as messages; returns an
        error message or None."""
        assert backend.engines is not None

        def progress(label: str, fraction: float) -> None:
            self.owner.post_message(EngineProgress(language, label, fraction))

        try:
            await backend.engines.prepare(language, progress)
        except EnginePrepareError as error:
            self.owner.post_message(EnginePrepared(language, str(error)))
            return str(error)
        self.owner.post_message(EnginePrepared(language, None))
        return None

    def run_cell(
        self, backend: Backend, sandbox_id: str, context: CodeContext, code: str
    ) -> Worker[None]:
        return self.owner.run_worker(
            self.run_cell_request(backend, sandbox_id, context.id, context.language, code),
            group=run_group(context.id),
            description=f"Running a cell in {context.id}",
            exit_on_error=False,
        )

    async def run_cell_request(
        self,
        backend: Backend,
        sandbox_id: str,
        context_id: str,
        language: str | None,
        code: str,
        label: str | None = None,
        shown: Callable[[ExecutionResult], ExecutionResult] | None = None,
    ) -> None:
        """Worker body: one execution; the outcome (or failure) comes back as `CellFinished`.
        A local engine for `language` that is not prepared yet is prepared first.
        `shown`: the result as the transcript shows it (a watch run's, as the entry's)."""
        if (
            language is not None
            and backend.engines is not None
            and language not in self.ready_engines
        ):
            statuses = await backend.engines.statuses()
            self.ready_engines.update(item.language for item in statuses if item.ready)
            known = any(item.language == language for item in statuses)
            if known and language not in self.ready_engines:
                problem = await self.prepare_engine_now(backend, language)
                if problem is not None:
                    self.owner.post_message(
                        CellFinished(sandbox_id, context_id, code, None, problem, label)
                    )
                    return
                self.ready_engines.add(language)
        output = OutputBatch(self.owner, context_id)
        # Where the backend offers it, a run never makes again a sandbox destroyed since
        # the tab last heard of it (a Worker gateway makes it before it finds no context).
        sandbox = backend.sandbox(sandbox_id, must_exist=self.refuses_gone_sandboxes or None)
        try:
            result = await sandbox.interpreter.run_code(
                code,
                context=context_id,
                on_stdout=partial(output.add, "stdout"),
                on_stderr=partial(output.add, "stderr"),
                on_wait=lambda waits: self.owner.post_message(CellWaiting(context_id, waits)),
            )
        except (ContextNotFoundError, SandboxNotFoundError) as error:
            failure = describe_error(error)
            self.owner.post_message(ContextGone(sandbox_id, context_id, code, failure, label))
            return
        except Exception as error:
            self.owner.post_message(
                CellFinished(sandbox_id, context_id, code, None, describe_error(error), label)
            )
            self.note_token(backend, error)
            return
        finally:
            output.drop()  # the finished cell shows them all
        if result.error is not None and result.error.name == "EngineError" and language:
            self.ready_engines.discard(language)  # ask again before the next cell
        if shown is not None:
            result = shown(result)
        self.note_token(backend, None)
        self.owner.post_message(CellFinished(sandbox_id, context_id, code, result, None, label))

    def cancel_cell(
        self, backend: Backend, sandbox_id: str, context_id: str, generation: int
    ) -> Worker[None]:
        """Interrupt the context's running cell, the pane's run `generation`."""
        return self.owner.run_worker(
            partial(self._cancel_cell, backend, sandbox_id, context_id, generation),
            name="cancel_cell",
            group=cancel_group(context_id),
            exit_on_error=False,
        )

    async def _cancel_cell(
        self, backend: Backend, sandbox_id: str, context_id: str, generation: int
    ) -> None:
        """A cancel the backend does not answer in time gives the cell's request up (a
        gateway that stopped answering kept the cell "cancelling" until its 120 s read
        timeout; QA)."""
        try:
            async with asyncio.timeout(CANCEL_ANSWER_SECONDS):
                interrupted = await backend.sandbox(sandbox_id).cancel(context_id)
        except TimeoutError:
            interrupted = False
        except Exception as error:
            self.owner.post_message(OperationFailed("Cancel failed", describe_error(error)))
            return
        if not interrupted:
            self.owner.post_message(RunAbandoned(sandbox_id, context_id, generation))

    def abandon_run(self, context_id: str) -> None:
        """Stop waiting for the context's running cell (the engine could not be interrupted),
        and for an answer to its cancel (one that came later would give up the next cell)."""
        for worker in self.owner.workers:
            if worker.group in (run_group(context_id), cancel_group(context_id)):
                worker.cancel()
