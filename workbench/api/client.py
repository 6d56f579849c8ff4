"""`Backend` and `SandboxClient`: the one headless API (spec 13.2/13.3 in Python style).

Both backends are this code over a different `Transport`, so they raise the same
`SandboxError` subclasses and return the same types for the same server answers.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Protocol, Self, TypeVar
from urllib.parse import quote

from engines.result import LIMIT_ERROR, TIMED_OUT
from workbench.api.engines import EngineManager
from workbench.api.inspector import TIMEOUT_SECONDS as INSPECT_SECONDS
from workbench.api.inspector import inspector_code, read_inspection, read_value
from workbench.api.transport import Transport
from workbench.config import MAX_TIMEOUT_S
from workbench.protocol.errors import ErrorCode, SandboxError, SandboxNotFoundError, make_error
from workbench.protocol.http import (
    MUST_EXIST_HEADER,
    EventSink,
    invalid_response,
    parse_json_response,
    validation_error,
)
from workbench.protocol.ids import checkpoint_name_problem, validate_sandbox_id
from workbench.protocol.types import (
    CHECKPOINTS_FEATURE,
    CONTEXT_FORK_FEATURE,
    CONTEXT_INSPECT_FEATURE,
    EXECUTION_TIMEOUT_FEATURE,
    SANDBOX_MUST_EXIST_FEATURE,
    BatchEntry,
    Checkpoint,
    CheckpointList,
    CodeContext,
    ContextInspection,
    ContextList,
    ExecutionResult,
    ExistsResult,
    FileOpResult,
    FilesBatchLimits,
    FilesBatchResult,
    Health,
    HistoryEntry,
    HistoryList,
    InspectedValue,
    ListFilesResult,
    MkdirResult,
    ReadFileResult,
    RuntimeInfo,
    RuntimeList,
    SandboxInfo,
    SandboxList,
    SandboxSummary,
)

LineCallback = Callable[[str], Awaitable[None] | None]
ANSWER_MARGIN: Final = 15.0
"""Seconds a client waits past an execution's own deadline, on a backend that enforces it,
before it gives up on the answer (and so cancels the execution): past the host's last
resort, which kills an engine process that has not answered 10 s after the deadline, so
that the run's own timeout result arrives rather than "did not answer in time"."""
HEALTH_WAIT: Final = 10.0
"""How long `files_batch_limits` waits for `GET /v1/health` (it probes every runtime)."""
_NOT_ASKED: Final[Any] = object()
_MUST_EXIST_SCOPE: ContextVar[bool] = ContextVar("sandboxes_must_exist", default=False)


@contextmanager
def sandboxes_must_exist() -> Iterator[None]:
    """A scope (this task, and the tasks it starts) in which every `SandboxClient` request
    is carried out only if its sandbox exists, as if each client were made with
    `must_exist=True` (one made with `must_exist=False` still makes its sandbox)."""
    token = _MUST_EXIST_SCOPE.set(True)
    try:
        yield
    finally:
        _MUST_EXIST_SCOPE.reset(token)


async def ask_health(transport: Transport, timeout: float | None = None) -> Any:
    """`GET /v1/health`, sent with `MUST_EXIST_HEADER`: a gateway lists
    `SANDBOX_MUST_EXIST_FEATURE` only when the header reached it, so a server in between
    that drops the header (an older `serve`) hides the feature rather than ignore it."""
    reply = await transport.request(
        "GET", "/v1/health", timeout=timeout, headers={MUST_EXIST_HEADER: "1"}
    )
    return parse_json_response(reply)


class GatewayFeatures:
    """The extensions a gateway's `GET /v1/health` lists, asked once and remembered (a
    health request that failed is asked again next time)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.offered: frozenset[str] | None = None
        """What the last health answer listed; None until one came."""

    def learn(self, health: Any) -> None:
        """Take the `features` of a health answer (only names count: a gateway's list
        may hold anything)."""
        listed = health.get("features") if isinstance(health, dict) else None
        names = listed if isinstance(listed, list) else []
        self.offered = frozenset(name for name in names if isinstance(name, str))

    def known(self, feature: str) -> bool:
        """Whether the last health answer listed `feature` (asking nothing)."""
        return self.offered is not None and feature in self.offered

    async def offers(self, feature: str) -> bool:
        """Whether the gateway offers `feature`, asking its health the first time (a
        failure to ask is raised: it says nothing of the feature)."""
        if self.offered is None:
            self.learn(await ask_health(self._transport, HEALTH_WAIT))
        return self.offered is not None and feature in self.offered


class JsonReadable(Protocol):
    """A type read from an answer's JSON (a wire type, or the engines' result)."""

    @classmethod
    def from_json(cls, data: Any) -> Self: ...


Decoded = TypeVar("Decoded", bound=JsonReadable)


def decoded(kind: type[Decoded], data: Any) -> Decoded:
    """`data`, an answer's JSON, read as `kind`: one of another shape (a gateway's
    garbage) is INTERNAL_ERROR "Invalid sandbox response", never a bare `TypeError`, nor
    an `OverflowError` of a number no float or int of ours holds (`1e999`)."""
    try:
        return kind.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        raise invalid_response() from error  # the cause says what was wrong


def _encoding(encoding: str | None) -> str | None:
    """The client normalizes `utf8` to `utf-8` (spec 13.2); other values pass through."""
    return "utf-8" if encoding == "utf8" else encoding


def _context_identifier(context_id: str | CodeContext) -> str:
    return context_id.id if isinstance(context_id, CodeContext) else context_id


def _context_path(context_id: str | CodeContext) -> str:
    return f"/contexts/{quote(_context_identifier(context_id), safe='')}"


def _checkpoint_path(context_id: str | CodeContext, name: str) -> str:
    """A name no checkpoint can have is answered here as the servers answer it: `..`
    in a URL reached another route, which blamed the sandbox id (QA)."""
    if checkpoint_name_problem(name) is not None:
        identifier = _context_identifier(context_id)
        raise validation_error(f"Code context '{identifier}' has no checkpoint '{name}'", 404)
    return f"{_context_path(context_id)}/checkpoints/{quote(name, safe='')}"


@dataclass(frozen=True)
class CheckpointUsage:
    """A sandbox's checkpoints: how many its contexts keep, and the bytes they hold of
    their budget."""

    count: int
    sandbox_bytes: int
    budget_bytes: int


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class Interpreter:
    """`sandbox.interpreter`: code contexts and execution."""

    def __init__(self, sandbox: SandboxClient) -> None:
        self._sandbox = sandbox

    async def create_code_context(
        self,
        binding: str,
        cwd: str | None = None,
        env_vars: Mapping[str, str] | None = None,
    ) -> CodeContext:
        body = _without_none({"binding": binding, "cwd": cwd})
        if env_vars is not None:
            body["envVars"] = _without_none(env_vars)
        return decoded(CodeContext, await self._sandbox._call("POST", "/contexts", body))

    async def list_code_contexts(self) -> list[CodeContext]:
        return decoded(ContextList, await self._sandbox._call("GET", "/contexts")).contexts

    async def delete_code_context(self, context_id: str | CodeContext) -> None:
        await self._sandbox._call("DELETE", _context_path(context_id))

    async def fork_code_context(self, context_id: str | CodeContext) -> CodeContext:
        """A new context that starts from a copy of the context's state (REPL state,
        execution count and history), an extension of serve and the local backend. A
        gateway without it is NOT_SUPPORTED; an unknown context is CONTEXT_NOT_FOUND."""
        data = await self._extension(
            "POST",
            f"{_context_path(context_id)}/fork",
            None,
            CONTEXT_FORK_FEATURE,
            "fork a context",
        )
        return decoded(CodeContext, data)

    async def save_checkpoint(self, context_id: str | CodeContext, name: str) -> Checkpoint:
        """Keep the context's state (the snapshot of its last run) under `name`, replacing
        a checkpoint of that name; an extension of serve and the local backend."""
        data = await self._extension(
            "POST",
            f"{_context_path(context_id)}/checkpoints",
            {"name": name},
            CHECKPOINTS_FEATURE,
            "keep checkpoints",
        )
        return decoded(Checkpoint, data)

    async def list_checkpoints(self, context_id: str | CodeContext) -> CheckpointList:
        """The context's checkpoints, oldest first, and the sandbox's checkpoint budget."""
        data = await self._extension(
            "GET",
            f"{_context_path(context_id)}/checkpoints",
            None,
            CHECKPOINTS_FEATURE,
            "keep checkpoints",
        )
        return decoded(CheckpointList, data)

    async def checkpoint_usage(self, context_ids: Sequence[str]) -> CheckpointUsage | None:
        """How many checkpoints the contexts keep and what the sandbox's hold of their
        budget; None where the backend keeps none (a Worker gateway) or there is no
        context."""
        count, listed = 0, None
        for context_id in context_ids:
            try:
                listed = await self.list_checkpoints(context_id)
            except SandboxNotFoundError:
                raise  # the sandbox went: not a context's
            except SandboxError as error:
                if error.code == ErrorCode.NOT_SUPPORTED:
                    return None
                continue  # the context went since it was listed
            count += len(listed.checkpoints)
        if listed is None:
            return None
        return CheckpointUsage(count, listed.sandbox_bytes, listed.budget_bytes)

    async def restore_checkpoint(self, context_id: str | CodeContext, name: str) -> Checkpoint:
        """Put the context back to the checkpoint; its history records the restore."""
        path = f"{_checkpoint_path(context_id, name)}/restore"
        data = await self._extension("POST", path, None, CHECKPOINTS_FEATURE, "keep checkpoints")
        return decoded(Checkpoint, data)

    async def delete_checkpoint(self, context_id: str | CodeContext, name: str) -> None:
        path = _checkpoint_path(context_id, name)
        await self._extension("DELETE", path, None, CHECKPOINTS_FEATURE, "keep checkpoints")

    async def inspect_context(
        self, context: CodeContext, *, run_code: bool = False
    ) -> ContextInspection:
        """The names the user made in the context, with their types and short reprs.

        Serve and the local backend inspect a copy of the context's stored state, so
        nothing about the context changes. A gateway without that is NOT_SUPPORTED,
        unless `run_code`: then the inspector runs in the context as an execution, which
        counts and stays in its history (`ran_code` says so)."""
        try:
            data = await self._inspect_route(context, "inspect", {})
        except SandboxError as error:
            if not (run_code and error.code == ErrorCode.NOT_SUPPORTED):
                raise
        else:
            return decoded(ContextInspection, data)
        result = await self.run_code(
            inspector_code(context.language), context=context, timeout=INSPECT_SECONDS
        )
        return read_inspection(result, context.id, result.execution_count or 0, ran_code=True)

    async def inspect_value(
        self, context: CodeContext, name: str, offset: int = 0, *, run_code: bool = False
    ) -> InspectedValue:
        """One of the context's names written out in full, a page from character `offset`
        (`InspectedValue.total` says how far it goes); `run_code` as for
        `inspect_context`."""
        body = {"name": name, "offset": offset}
        try:
            data = await self._inspect_route(context, "inspect/value", body)
        except SandboxError as error:
            if not (run_code and error.code == ErrorCode.NOT_SUPPORTED):
                raise
        else:
            return decoded(InspectedValue, data)
        code = inspector_code(context.language, name, offset)
        result = await self.run_code(code, context=context, timeout=INSPECT_SECONDS)
        return read_value(result, context.id, name, offset, ran_code=True)

    async def _inspect_route(self, context: CodeContext, route: str, body: Any) -> Any:
        return await self._extension(
            "POST",
            f"{_context_path(context)}/{route}",
            body,
            CONTEXT_INSPECT_FEATURE,
            "inspect a context without running code in it",
            why="there the inspector can only run in the context, as an execution",
        )

    async def _extension(
        self,
        method: str,
        path: str,
        body: Any,
        feature: str,
        what: str,
        *,
        why: str = "a deployed gateway keeps one snapshot per context",
    ) -> Any:
        """Call a route of a serve and local-backend extension: a gateway that does not
        know the route (404 `Not found`) is NOT_SUPPORTED, naming `feature`."""
        try:
            return await self._sandbox._call(method, path, body)
        except SandboxError as error:
            unknown_route = error.http_status == 404 and error.message == "Not found"
            if not unknown_route:
                raise
            raise make_error(
                ErrorCode.NOT_SUPPORTED,
                f"This gateway cannot {what} (an extension of serve and the local backend; {why})",
                {"feature": feature},
            ) from None

    async def history(self, context_id: str | CodeContext) -> list[HistoryEntry]:
        """The context's past executions, oldest first; empty when the server keeps no
        history (it answers 404)."""
        try:
            data = await self._sandbox._call("GET", f"{_context_path(context_id)}/history")
        except SandboxError as error:
            if error.http_status == 404 and error.code != ErrorCode.SANDBOX_NOT_FOUND:
                return []
            raise
        return decoded(HistoryList, data).history

    async def run_code(
        self,
        code: str,
        *,
        context: str | CodeContext | None = None,
        binding: str | None = None,
        env_vars: Mapping[str, str | None] | None = None,
        timeout: float | None = None,
        on_stdout: LineCallback | None = None,
        on_stderr: LineCallback | None = None,
        on_wait: Callable[[bool], object] | None = None,
    ) -> ExecutionResult:
        """Run code in a context (or the binding's default context). Guest errors and
        limits come back in `result.error`; transport and request errors raise.
        `on_wait(True)` is called where the server says the run waits for its sandbox's
        turn (another request, another client's run most likely, holds it: `serve` and
        the local backend say so within half a second; other gateways never do), and
        `on_wait(False)` when its turn came after that.

        `timeout` (seconds; default the backend's `execution_timeout`) is the execution's
        own deadline where the backend enforces one (the local backend, `serve`: it ends as
        an `ExecutionLimitError`); elsewhere, how long to wait for the answer. A call given
        up for any reason (its timeout, its task cancelled) cancels the execution on the
        local backend."""
        body: dict[str, Any] = {"code": code}
        if context is not None:
            body["contextId"] = _context_identifier(context)
        if binding is not None:
            body["binding"] = binding
        if env_vars is not None:
            body["envVars"] = {key: value for key, value in env_vars.items()}
        wait = self._sandbox._deadline(body, timeout)
        lines = StreamedLines(on_stdout, on_stderr, on_wait)
        streaming = on_stdout is not None or on_stderr is not None or on_wait is not None
        data = await self._sandbox._call(
            "POST", "/execute", body, timeout=wait, on_event=lines if streaming else None
        )
        if not (
            isinstance(data, dict)
            and isinstance(data.get("results"), list)
            and isinstance(data.get("logs"), dict)
        ):
            raise invalid_response() from TypeError(
                "an execution's answer needs a results list and a logs object"
            )
        result = decoded(ExecutionResult, data)
        await lines.finish(result)
        return result


class StreamedLines:
    """`run_code`'s line callbacks: told of each line as the server streams it, then of
    the lines the answer holds beyond those (all of them when nothing streamed: a Worker
    gateway, or a guest whose output arrives at the end), so each line is told once."""

    def __init__(
        self,
        on_stdout: LineCallback | None,
        on_stderr: LineCallback | None,
        on_wait: Callable[[bool], object] | None = None,
    ) -> None:
        self._callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self._on_wait = on_wait
        self.told = {"stdout": 0, "stderr": 0}
        self._pending: list[asyncio.Future[object]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("type") in ("waiting", "started"):
            if self._on_wait is not None:
                self._on_wait(event["type"] == "waiting")
            return
        stream, line = event.get("stream"), event.get("line")
        if stream not in self.told or not isinstance(line, str):
            return
        self.told[stream] += 1
        self._tell(stream, line)

    def _tell(self, stream: str, line: str) -> None:
        callback = self._callbacks[stream]
        if callback is not None:
            outcome = callback(line)
            if asyncio.iscoroutine(outcome):  # started now, awaited by `finish`
                self._pending.append(asyncio.ensure_future(outcome))

    async def finish(self, result: ExecutionResult) -> None:
        for stream, lines in (("stdout", result.stdout), ("stderr", result.stderr)):
            for line in lines[self.told[stream] :]:
                self._tell(stream, line)
        for outcome in self._pending:
            await outcome


_TIMED_OUT_AFTER = re.compile(
    re.escape(TIMED_OUT) + r" after ([0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?) s"
)
"""The local backend's message for an execution stopped at its limit (`{seconds:g}`)."""


def timed_out_after(name: str, message: str) -> float | None:
    """The wall-clock limit, in seconds, that an execution error (`name`, `message`) says
    the local backend stopped it at (`Execution timed out after 2 s`), else None."""
    if name != LIMIT_ERROR:
        return None
    stopped = _TIMED_OUT_AFTER.fullmatch(message)
    if stopped is None:
        return None
    seconds = float(stopped.group(1))
    return seconds if 0 < seconds <= MAX_TIMEOUT_S else None


def enforces_deadlines(transport: Transport, features: GatewayFeatures) -> bool:
    """Whether the backend stops an execution at its request's `timeoutMs`: the local
    backend, and a gateway whose health said so (`serve`)."""
    return transport.enforces_deadlines or features.known(EXECUTION_TIMEOUT_FEATURE)


def execution_deadline(
    transport: Transport,
    features: GatewayFeatures,
    body: dict[str, Any],
    timeout: float | None,
    default: float | None,
) -> float | None:
    """Put the execution's deadline (`timeout`, else `default`) into `body` as `timeoutMs`
    (a gateway extension: a gateway that does not know it ignores it), and return how long
    to wait for the answer: past the deadline where the backend enforces it (its answer
    says the run timed out; waiting exactly as long raced it), else the deadline."""
    deadline = default if timeout is None else timeout
    if deadline is None:
        return None
    body["timeoutMs"] = max(1, round(deadline * 1000))
    if enforces_deadlines(transport, features):
        return deadline + ANSWER_MARGIN
    return deadline if timeout is not None else None


class SandboxClient:
    """One sandbox, addressed by id (the sandbox comes into existence on first touch)."""

    def __init__(
        self,
        transport: Transport,
        sandbox_id: str,
        *,
        normalize_id: bool = False,
        execution_timeout: float | None = None,
        must_exist: bool | None = None,
        features: GatewayFeatures | None = None,
    ):
        """`must_exist`: True, every request is carried out only if the sandbox exists
        (else `SandboxNotFoundError`, and nothing is made), where the gateway offers it
        (`SANDBOX_MUST_EXIST_FEATURE`; elsewhere `NotSupportedError`, nothing sent); None,
        as the `sandboxes_must_exist` scope says; False, never (a request makes the
        sandbox, spec 2.4)."""
        self.id = sandbox_id.lower() if normalize_id else sandbox_id
        validate_sandbox_id(self.id)
        self._transport = transport
        self._execution_timeout = execution_timeout
        self.must_exist = must_exist
        self._features = GatewayFeatures(transport) if features is None else features
        self.interpreter = Interpreter(self)
        self._batch_limits: FilesBatchLimits | None = _NOT_ASKED

    def _deadline(self, body: dict[str, Any], timeout: float | None) -> float | None:
        return execution_deadline(
            self._transport, self._features, body, timeout, self._execution_timeout
        )

    @property
    def _prefix(self) -> str:
        return f"/v1/sandboxes/{quote(self.id, safe='')}"

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        on_event: EventSink | None = None,
    ) -> Any:
        suffix = "" if path == "/" else path
        response = await self._transport.request(
            method,
            self._prefix + suffix,
            body,
            timeout=timeout,
            on_event=on_event,
            headers=await self._headers(),
        )
        return parse_json_response(response)

    async def _headers(self) -> dict[str, str] | None:
        """`MUST_EXIST_HEADER` when this request must find its sandbox; refused before it
        is sent where the gateway would ignore the header and make the sandbox."""
        wanted = _MUST_EXIST_SCOPE.get() if self.must_exist is None else self.must_exist
        if not wanted:
            return None
        if not await self._features.offers(SANDBOX_MUST_EXIST_FEATURE):
            raise make_error(
                ErrorCode.NOT_SUPPORTED,
                f"This gateway cannot refuse a request for a sandbox that does not exist "
                f"(it does not offer {SANDBOX_MUST_EXIST_FEATURE}): sent, the request would "
                f"make {self.id} again, empty",
                {"feature": SANDBOX_MUST_EXIST_FEATURE},
            )
        return {MUST_EXIST_HEADER: "1"}

    async def _files(self, body: dict[str, Any]) -> Any:
        return await self._call("POST", "/files", body)

    async def get_info(self) -> SandboxInfo:
        return decoded(SandboxInfo, await self._call("GET", "/"))

    async def destroy(self) -> None:
        await self._call("DELETE", "/")

    async def set_env_vars(self, env_vars: Mapping[str, str | None]) -> None:
        """Set sandbox-level env vars; a `None` value unsets the key."""
        await self._call("POST", "/env", {"envVars": dict(env_vars)})

    async def write_file(
        self, path: str, content: str | bytes, *, encoding: str | None = None
    ) -> FileOpResult:
        if isinstance(content, bytes):
            body = {
                "op": "write",
                "path": path,
                "content": base64.b64encode(content).decode(),
                "encoding": "base64",
            }
        else:
            body = {
                "op": "write",
                "path": path,
                "content": content,
                "encoding": _encoding(encoding) or "utf-8",
            }
        return decoded(FileOpResult, await self._files(body))

    async def read_file(self, path: str, *, encoding: str | None = None) -> ReadFileResult:
        body = _without_none({"op": "read", "path": path, "encoding": _encoding(encoding)})
        return decoded(ReadFileResult, await self._files(body))

    async def read_bytes(self, path: str) -> bytes:
        """The file's raw bytes (the spec's `encoding: "none"`)."""
        return (await self.read_file(path, encoding="base64")).data

    async def mkdir(self, path: str, *, recursive: bool | None = None) -> MkdirResult:
        body = _without_none({"op": "mkdir", "path": path, "recursive": recursive})
        return decoded(MkdirResult, await self._files(body))

    async def delete_file(
        self, path: str, *, recursive: bool | None = None, force: bool | None = None
    ) -> FileOpResult:
        body = _without_none({"op": "delete", "path": path, "recursive": recursive, "force": force})
        return decoded(FileOpResult, await self._files(body))

    async def rename_file(self, old_path: str, new_path: str) -> FileOpResult:
        body = {"op": "rename", "path": old_path, "newPath": new_path}
        return decoded(FileOpResult, await self._files(body))

    async def move_file(self, source: str, destination: str) -> FileOpResult:
        body = {"op": "move", "path": source, "newPath": destination}
        return decoded(FileOpResult, await self._files(body))

    async def list_files(
        self,
        path: str = "/workspace",
        *,
        recursive: bool | None = None,
        include_hidden: bool | None = None,
    ) -> ListFilesResult:
        body = _without_none(
            {"op": "list", "path": path, "recursive": recursive, "includeHidden": include_hidden}
        )
        return decoded(ListFilesResult, await self._files(body))

    async def exists(self, path: str) -> ExistsResult:
        return decoded(ExistsResult, await self._files({"op": "exists", "path": path}))

    async def files_batch_limits(self) -> FilesBatchLimits | None:
        """What one `files_batch` may hold on this gateway, from `GET /v1/health` (asked
        once per client); None when the gateway does not offer it. A failed health
        request also answers None, but is asked again next time."""
        if self._batch_limits is _NOT_ASKED:
            try:
                health = await ask_health(self._transport, HEALTH_WAIT)
                limits = decoded(Health, health).batch_limits
            except (SandboxError, TimeoutError, KeyError, TypeError, ValueError):
                return None
            self._batch_limits = limits
        return self._batch_limits

    async def files_batch(self, entries: Sequence[BatchEntry]) -> FilesBatchResult:
        """Apply `entries` in order in one request (a gateway extension; see
        `files_batch_limits` for what it may hold). Each entry's outcome comes back in
        `results`, an error or a failed precondition included; a request refused as a
        whole raises, and a gateway without the route (404/405) is remembered as such."""
        body = {"entries": [entry.to_json() for entry in entries]}
        try:
            data = await self._call("POST", "/files/batch", body)
        except SandboxError as error:
            if error.http_status in (404, 405) and error.code != ErrorCode.SANDBOX_NOT_FOUND:
                self._batch_limits = None
            raise
        result = decoded(FilesBatchResult, data)
        if len(result.results) != len(entries):
            raise invalid_response() from ValueError(
                f"{len(result.results)} results for {len(entries)} entries"
            )
        return result

    async def cancel(self, context_id: str | None = None) -> bool:
        """Stop this sandbox's running execution, or with `context_id` only one in that
        context (not another client's elsewhere). True when the engine itself was
        interrupted; False when none was running there, or the backend can only abandon
        the request."""
        return await self._transport.cancel(self.id, context_id)


class Backend:
    """A place sandboxes live: the embedded local backend or a remote gateway."""

    def __init__(
        self,
        transport: Transport,
        *,
        name: str,
        engines: EngineManager | None = None,
        execution_timeout: float | None = None,
        served_by: str = "",
    ) -> None:
        self.name = name
        self.transport = transport
        self.engines = engines
        """The engines this backend runs itself (local only), to inspect and prepare."""
        self.execution_timeout = execution_timeout
        """Every execution's deadline unless a call gives its own (None: the backend's)."""
        self.served_by = served_by
        """Which process answers, for a status bar ("the local daemon (pid 123)"); "" for
        a remote gateway (its `description` says where)."""
        self.features = GatewayFeatures(transport)
        """The extensions the gateway offers, as its last health answer listed them."""

    @property
    def description(self) -> str:
        return self.transport.description

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        return parse_json_response(await self.transport.request(method, path, body))

    async def health(self) -> dict[str, Any]:
        data = await ask_health(self.transport)
        if not isinstance(data, dict):
            raise invalid_response("Invalid health response") from TypeError(
                "the health answer is not a JSON object"
            )
        self.features.learn(data)
        return data

    async def runtimes(self) -> list[RuntimeInfo]:
        return decoded(RuntimeList, await self._call("GET", "/v1/runtimes")).runtimes

    async def list_sandboxes(self) -> list[SandboxSummary]:
        return decoded(SandboxList, await self._call("GET", "/v1/sandboxes")).sandboxes

    async def contexts_refused(self, binding: str) -> str | None:
        """Why a code context of `binding` cannot be made now (None: it can): its runtime
        is not listed (a Worker gateway lists one that did not answer as unavailable), or
        offers no contexts (a Ruby context made with local Ruby contexts on, say)."""
        runtime = next((item for item in await self.runtimes() if item.binding == binding), None)
        if runtime is None:
            return f"{self.name} does not list a {binding} runtime now (it may be unavailable)"
        if not runtime.contexts:
            return f"{self.name} offers no {binding} code contexts now"
        return None

    def sandbox(
        self, sandbox_id: str, *, normalize_id: bool = False, must_exist: bool | None = None
    ) -> SandboxClient:
        """A client of one sandbox; `must_exist` as `SandboxClient` takes it."""
        return SandboxClient(
            self.transport,
            sandbox_id,
            normalize_id=normalize_id,
            execution_timeout=self.execution_timeout,
            must_exist=must_exist,
            features=self.features,
        )

    async def run_code(
        self,
        code: str,
        *,
        binding: str,
        env_vars: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ExecutionResult:
        """Stateless execution on a runtime (spec 2.2.1): fresh engine, no /workspace.
        Same shape as `Interpreter.run_code`: code first, the binding keyword-only."""
        body: dict[str, Any] = {"code": code}
        if env_vars is not None:
            body["envVars"] = dict(env_vars)
        wait = execution_deadline(
            self.transport, self.features, body, timeout, self.execution_timeout
        )
        response = await self.transport.request(
            "POST", f"/v1/runtimes/{quote(binding, safe='')}/execute", body, timeout=wait
        )
        data = parse_json_response(response)
        if not (isinstance(data, dict) and isinstance(data.get("results"), list)):
            raise invalid_response() from TypeError("an execution's answer needs a results list")
        return decoded(ExecutionResult, data)

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
