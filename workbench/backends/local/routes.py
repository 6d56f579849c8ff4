"""Every route of the gateway protocol (docs/gateway-protocol.md) the local gateway answers.

One table maps method and path to a handler; the handlers are the wire side only: they
read and check the request (in the order the spec gives its messages), call one typed
method of the gateway or of a `SandboxObject`, and encode the protocol type it returns.
Paths below ``/v1/sandboxes/{id}`` go to that sandbox's own table, in the sandbox's turn
(spec 1.5), for GET, POST and DELETE (else 405, as the spec's gateway, 2.7); there an
unknown path or method is 404, never 405, as on the real system. A 405 carries `Allow`:
the methods the table serves the path for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from engines.process import Cancellation
from engines.registry import HOSTS, canonical_language
from engines.result import ExecutionResult
from workbench import __version__
from workbench.backends.local.context_runner import ENGINE_THREADS
from workbench.backends.local.runtimes import LocalRuntime
from workbench.backends.local.sandbox_object import SandboxObject, cancel_on
from workbench.config import MAX_TIMEOUT_S
from workbench.core.envvars import (
    context_env_vars,
    env_request_vars,
    execute_env_vars,
    runtime_env_vars,
)
from workbench.core.paths import WorkspaceOSError, normalize
from workbench.protocol.codec import WireType
from workbench.protocol.errors import SandboxError, sandbox_not_found
from workbench.protocol.http import (
    EXECUTE_BODY_CAP,
    FILES_BATCH_BODY_CAP,
    FILES_BATCH_MAX_ENTRIES,
    FILES_BODY_CAP,
    STARTED_EVENT,
    WAITING_EVENT,
    OutputLines,
    Request,
    Response,
    error_json,
    internal_error,
    is_json_content,
    method_not_allowed,
    must_exist,
    not_found,
    parse_object,
    validate_code,
    validation_error,
)
from workbench.protocol.ids import validate_sandbox_id
from workbench.protocol.routing import Found, Route, RouteTable
from workbench.protocol.types import (
    CHECKPOINTS_FEATURE,
    CONTEXT_FORK_FEATURE,
    CONTEXT_INSPECT_FEATURE,
    EXECUTION_TIMEOUT_FEATURE,
    FILES_BATCH_FEATURE,
    OUTPUT_STREAM_FEATURE,
    SANDBOX_MUST_EXIST_FEATURE,
    CancelResult,
    ContextList,
    CoreInfo,
    FilesBatchLimits,
    Health,
    HistoryList,
    RuntimeList,
    SandboxList,
    Success,
)

if TYPE_CHECKING:
    from workbench.backends.local.gateway import LocalGateway

PROTOCOL_VERSION = 1
INTERPRETER_PROTOCOL = 1
"""The runtime protocol (spec 2.2.2) the local runtimes speak and the local core accepts."""
CORE = CoreInfo("sandbox-workbench", __version__, INTERPRETER_PROTOCOL)
"""What runs the sandboxes here: the workbench's own emulation of `@sandbox-workers/core`."""
FEATURES = [
    FILES_BATCH_FEATURE,
    EXECUTION_TIMEOUT_FEATURE,
    OUTPUT_STREAM_FEATURE,
    CONTEXT_FORK_FEATURE,
    CHECKPOINTS_FEATURE,
    CONTEXT_INSPECT_FEATURE,
    SANDBOX_MUST_EXIST_FEATURE,
]
"""The extensions this gateway serves (`GET /v1/health`)."""
FILES_BATCH_LIMITS = FilesBatchLimits(FILES_BATCH_MAX_ENTRIES, FILES_BATCH_BODY_CAP)
MAX_TIMEOUT_MS = MAX_TIMEOUT_S * 1000
"""A day: the longest execution deadline a request may ask for."""

Params = dict[str, str]
GatewayHandler = Callable[["LocalGateway", Request, Params], Awaitable[Response]]
SandboxHandler = Callable[[SandboxObject, Request, Params], Awaitable[Response]]


def answer(value: WireType | ExecutionResult, status: int = 200) -> Response:
    """A protocol type (or an `ExecutionResult`) as the JSON response."""
    return Response.json(status, value.to_json())


async def dispatch(gateway: LocalGateway, request: Request) -> Response:
    """Answer one request; every `SandboxError` becomes its error response."""
    try:
        found = GATEWAY_ROUTES.find(request.method, request.path.split("?", 1)[0])
        if isinstance(found, SandboxError):
            return allowing(error_json(found), request.path)
        return await found.target(gateway, request, found.params)
    except SandboxError as error:
        return error_json(error)


def allowing(response: Response, path: str) -> Response:
    """`response`; a 405 gets the `Allow` header: the methods `path` is served for."""
    if response.status != 405 or any(name == "allow" for name, _ in response.headers):
        return response
    allowed = ", ".join(GATEWAY_ROUTES.methods(path.split("?", 1)[0]))
    return replace(response, headers=(*response.headers, ("allow", allowed)))


# ----- /v1 -----------------------------------------------------------------------------


async def health(gateway: LocalGateway, request: Request, params: Params) -> Response:
    """The server's, the core's and every runtime's version (as the Worker gateway does).
    `SANDBOX_MUST_EXIST_FEATURE` is listed only to a request that carried its header: a
    server in between that drops the header (an older `serve`) then hides the feature."""
    offered = [runtime.info() for runtime in gateway.runtimes.values()]
    features = [
        name
        for name in FEATURES
        if name != SANDBOX_MUST_EXIST_FEATURE or must_exist(request.headers)
    ]
    return answer(
        Health(
            True,
            __version__,
            PROTOCOL_VERSION,
            CORE,
            offered,
            features=features,
            files_batch=FILES_BATCH_LIMITS,
        )
    )


async def runtimes(gateway: LocalGateway, request: Request, params: Params) -> Response:
    offered = [runtime.info() for runtime in gateway.runtimes.values()]
    return answer(RuntimeList(offered, core=CORE))


def _check_language(runtime: LocalRuntime, body: dict[str, Any]) -> None:
    """An optional `language` must name the runtime's language (aliases allowed)."""
    if "language" not in body:
        return
    language = body["language"]
    if not isinstance(language, str):
        raise validation_error("language must be a string")
    resolved = canonical_language(language)
    if runtime.language in (resolved, HOSTS.get(resolved)):
        return
    raise validation_error(
        f"Unsupported language '{language}' on this runtime ({runtime.language})"
    )


async def execute_stateless(gateway: LocalGateway, request: Request, params: Params) -> Response:
    """Stateless `POST /v1/runtimes/:binding/execute` (spec 2.2.1, in its check order)."""
    if not params["binding"] or "/" in params["binding"]:
        raise not_found()  # as the Worker gateway, whose `:binding` is one segment
    binding = unquote(params["binding"])
    runtime = gateway.runtimes.get(binding)
    if runtime is None:
        raise validation_error(f"Unknown binding '{binding}'")
    if not is_json_content(request.headers):
        raise validation_error("Content-Type must be application/json", 415)
    if not request.body:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > EXECUTE_BODY_CAP:
            raise validation_error("Request too large", 413)
        raise validation_error("JSON body required")
    body = parse_object(request, EXECUTE_BODY_CAP)
    if "input" in body:
        raise validation_error("input is no longer supported; pass data with envVars")
    _check_language(runtime, body)
    code = validate_code(body)
    env_vars = runtime_env_vars(body) or {}
    timeout = execution_timeout(body)
    gateway.refuse_if_closing()
    cancellation = Cancellation()
    watcher = asyncio.create_task(cancel_on(request.given_up, cancellation))
    gateway.stateless_runs.add(cancellation)
    try:
        result = await asyncio.get_running_loop().run_in_executor(
            ENGINE_THREADS, runtime.run_stateless, code, env_vars, timeout, cancellation
        )
    except Exception:  # anything unexpected before the engine answered (spec 2.2.1)
        return internal_error("Engine execution failed", 502)
    finally:
        gateway.stateless_runs.discard(cancellation)
        watcher.cancel()
    return answer(cancellation.explained(result))


def execution_timeout(body: dict[str, Any]) -> float | None:
    """The execution's own deadline, `timeoutMs` (an extension of ours; None: the
    backend's limit)."""
    value = body.get("timeoutMs")
    if value is None:
        return None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 < value <= MAX_TIMEOUT_MS
    ):
        raise validation_error(
            f"timeoutMs must be a number of milliseconds from 1 to {MAX_TIMEOUT_MS}"
        )
    return value / 1000


async def list_sandboxes(gateway: LocalGateway, request: Request, params: Params) -> Response:
    return answer(SandboxList(await gateway.list_sandboxes()))


async def sandbox_request(gateway: LocalGateway, request: Request, params: Params) -> Response:
    """`/v1/sandboxes/:id/...`: the id is checked first, then the sandbox's table. A
    request that must find its sandbox (`must_exist`) is refused in the sandbox's turn,
    before anything can make it: a destroy is a request of that turn too, so none comes
    between the check and the request's first touch."""
    if not params["sandbox_id"]:
        raise not_found()  # as the Worker gateway, whose `:id` is one segment, not empty
    sandbox_id = unquote(params["sandbox_id"])
    validate_sandbox_id(sandbox_id)
    sandbox = gateway.sandbox(sandbox_id)
    found = SANDBOX_ROUTES.find(request.method, "/" + params["tail"])
    only_existing = must_exist(request.headers)
    if isinstance(found, Found) and not found.target.in_turn:
        # These make nothing (a cancel, an inspection): the check needs no turn.
        if only_existing and not sandbox.exists:
            raise sandbox_not_found(sandbox_id)
        return await found.target.handler(sandbox, request, found.params)
    # A client that takes a stream (an execution's) is told when its run waits its turn.
    events = request.events
    waiting = (
        None if events is None else lambda waits: events(WAITING_EVENT if waits else STARTED_EVENT)
    )
    async with sandbox.turn(waiting):
        try:
            sandbox.refuse_if_closing()
            if only_existing and not sandbox.exists:
                raise sandbox_not_found(sandbox_id)
            if not (isinstance(found, Found) and not found.target.creates):
                sandbox.ensure_exists()
            if isinstance(found, SandboxError):
                raise found
            return await found.target.handler(sandbox, request, found.params)
        except SandboxError as error:
            return error_json(error)


# ----- /v1/sandboxes/:id ---------------------------------------------------------------


@dataclass(frozen=True)
class SandboxEndpoint:
    handler: SandboxHandler
    in_turn: bool = True
    """False: answered at once, even while another request of the sandbox runs."""
    creates: bool = True
    """The sandbox comes into existence before the handler runs (every route but DELETE,
    the files routes and execute, which make it only when they get that far)."""


def optional_context_id(body: dict[str, Any]) -> str | None:
    """A body's `contextId`: absent, or a non-empty string (else 400)."""
    context_id = body.get("contextId")
    if context_id is not None and (not isinstance(context_id, str) or not context_id):
        raise validation_error("contextId must be a non-empty string")
    return context_id


async def cancel(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """The sandbox's execution in progress; with a body `{"contextId": ID}`, only one in
    that context (a client cancels its own cell, not another client's in another
    context)."""
    body = parse_object(request, EXECUTE_BODY_CAP) if request.body else {}
    return answer(CancelResult(sandbox.cancel(optional_context_id(body))))


async def destroy(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    sandbox.destroy()
    return answer(Success())


async def info(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    return answer(sandbox.get_info())


async def execute(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """Spec 2.4.1, checks in the order the spec gives their messages."""
    body = parse_object(request, EXECUTE_BODY_CAP)
    if "cwd" in body:
        raise validation_error("cwd is a context property; pass it to createCodeContext")
    code = validate_code(body)
    call_env = execute_env_vars(body) or {}
    context_id = optional_context_id(body)
    binding = body.get("binding")
    if binding is not None and (not isinstance(binding, str) or not binding):
        raise validation_error("binding must be a non-empty string")
    result = await sandbox.execute(
        code,
        context_id=context_id,
        binding=binding,
        env_vars=call_env,
        timeout=execution_timeout(body),
        given_up=request.given_up,
        on_output=None if request.events is None else OutputLines(request.events),
    )
    return answer(result)


async def create_context(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """Spec 2.4.2."""
    body = parse_object(request, EXECUTE_BODY_CAP)
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
    return answer(sandbox.create_context(binding, cwd, env_vars), 201)


async def list_contexts(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    return answer(ContextList(sandbox.list_contexts()))


async def delete_context(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    sandbox.delete_context(unquote(params["context_id"]))
    return answer(Success())


async def fork_context(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: a new context from a copy of the context's state."""
    return answer(sandbox.fork_context(unquote(params["context_id"])), 201)


async def inspect_context(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: the user's names in the context, from a copy of its state (it takes
    the sandbox's turn only to read that state)."""
    parse_object(request, EXECUTE_BODY_CAP)
    return answer(await sandbox.inspect(unquote(params["context_id"]), request.given_up))


async def inspect_value(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: a page of one name's value, in full."""
    body = parse_object(request, EXECUTE_BODY_CAP)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise validation_error("name is required")
    offset = body.get("offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise validation_error("offset must be a count of characters from 0")
    context_id = unquote(params["context_id"])
    return answer(await sandbox.inspect_value(context_id, name, offset, request.given_up))


async def list_checkpoints(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: the context's checkpoints, oldest first."""
    return answer(sandbox.checkpoints(unquote(params["context_id"])))


async def save_checkpoint(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: keep the context's state under `name`."""
    body = parse_object(request, EXECUTE_BODY_CAP)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise validation_error("name is required")
    return answer(sandbox.save_checkpoint(unquote(params["context_id"]), name), 201)


async def restore_checkpoint(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: put the context back to a checkpoint."""
    context_id, name = unquote(params["context_id"]), unquote(params["name"])
    return answer(sandbox.restore_checkpoint(context_id, name))


async def delete_checkpoint(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    sandbox.delete_checkpoint(unquote(params["context_id"]), unquote(params["name"]))
    return answer(Success())


async def history(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    return answer(HistoryList(sandbox.history(unquote(params["context_id"]))))


async def set_env(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """Spec 2.4.3."""
    body = parse_object(request, EXECUTE_BODY_CAP)
    if "envVars" not in body:
        raise validation_error("envVars is required")
    sandbox.set_env_vars(env_request_vars(body))
    return answer(Success())


async def files(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """Spec 5 (the body itself is checked by the files API)."""
    sandbox.require_file_api()
    return answer(sandbox.files(parse_object(request, FILES_BODY_CAP)))


async def files_batch(sandbox: SandboxObject, request: Request, params: Params) -> Response:
    """An extension: many changing files ops in one request (gzip bodies accepted)."""
    sandbox.require_file_api()
    body = parse_object(request, FILES_BATCH_BODY_CAP, gzip=True)
    return answer(await sandbox.files_batch(body))


GATEWAY_ROUTES: RouteTable[GatewayHandler] = RouteTable(
    [
        Route("GET", "/v1/health", health),
        Route("GET", "/v1/runtimes", runtimes),
        Route("POST", "/v1/runtimes/{binding...}/execute", execute_stateless),
        Route("GET", "/v1/sandboxes", list_sandboxes),
        # The methods the spec's gateway passes on to a sandbox (2.7).
        Route("GET", "/v1/sandboxes/{sandbox_id}/{tail...}", sandbox_request),
        Route("POST", "/v1/sandboxes/{sandbox_id}/{tail...}", sandbox_request),
        Route("DELETE", "/v1/sandboxes/{sandbox_id}/{tail...}", sandbox_request),
    ],
    wrong_method=method_not_allowed,
)

SANDBOX_ROUTES: RouteTable[SandboxEndpoint] = RouteTable(
    [
        Route("POST", "/cancel", SandboxEndpoint(cancel, in_turn=False)),
        Route("DELETE", "/", SandboxEndpoint(destroy, creates=False)),
        Route("GET", "/", SandboxEndpoint(info)),
        # A run makes the sandbox only once it passed its checks and found its context:
        # a stale tab of a destroyed sandbox, or a typo'd id, leaves no sandbox behind.
        Route("POST", "/execute", SandboxEndpoint(execute, creates=False)),
        Route("POST", "/contexts", SandboxEndpoint(create_context)),
        Route("GET", "/contexts", SandboxEndpoint(list_contexts)),
        Route("DELETE", "/contexts/{context_id}", SandboxEndpoint(delete_context)),
        Route("GET", "/contexts/{context_id...}/history", SandboxEndpoint(history)),
        Route("POST", "/contexts/{context_id...}/fork", SandboxEndpoint(fork_context)),
        Route(
            "POST",
            "/contexts/{context_id}/inspect",
            SandboxEndpoint(inspect_context, in_turn=False),
        ),
        Route(
            "POST",
            "/contexts/{context_id}/inspect/value",
            SandboxEndpoint(inspect_value, in_turn=False),
        ),
        Route("GET", "/contexts/{context_id}/checkpoints", SandboxEndpoint(list_checkpoints)),
        Route("POST", "/contexts/{context_id}/checkpoints", SandboxEndpoint(save_checkpoint)),
        Route(
            "POST",
            "/contexts/{context_id}/checkpoints/{name}/restore",
            SandboxEndpoint(restore_checkpoint),
        ),
        Route(
            "DELETE",
            "/contexts/{context_id}/checkpoints/{name}",
            SandboxEndpoint(delete_checkpoint),
        ),
        Route("POST", "/env", SandboxEndpoint(set_env)),
        # A files request makes the sandbox only if it stores something (spec 8.3: a
        # failing one does not touch): a typo'd id leaves no sandbox behind.
        Route("POST", "/files", SandboxEndpoint(files, creates=False)),
        Route("POST", "/files/batch", SandboxEndpoint(files_batch, creates=False)),
    ],
    wrong_method=not_found,
)
