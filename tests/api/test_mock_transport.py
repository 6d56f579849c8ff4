"""`MockTransport`: a client against a gateway written as a function, in this process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from workbench.api import (
    Backend,
    ExecutionResult,
    Handler,
    MockTransport,
    Request,
    Response,
    SandboxClient,
    SandboxError,
)
from workbench.protocol.http import output_event

ANSWER = {
    "results": [{"type": "text", "text": "2"}],
    "logs": {"stdout": ["hello"], "stderr": []},
    "error": None,
}
"""An execution's answer as a gateway sends it (spec 2.3)."""


def answering(payload: object, seen: list[Request]) -> Callable[[Request], Response]:
    def handler(request: Request) -> Response:
        seen.append(request)
        return Response.json(200, payload)

    return handler


def answering_later(
    payload: object, seen: list[Request]
) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        seen.append(request)
        await asyncio.sleep(0)
        return Response.json(200, payload)

    return handler


@pytest.mark.parametrize("make_handler", [answering, answering_later], ids=["sync", "async"])
async def test_the_handler_gets_the_request_a_gateway_would_and_its_answer_is_the_result(
    make_handler: Callable[[object, list[Request]], Handler | Callable[[Request], Response]],
) -> None:
    seen: list[Request] = []
    transport = MockTransport(make_handler(ANSWER, seen))
    sandbox = SandboxClient(transport, "demo")
    result = await sandbox.interpreter.run_code("1 + 1", binding="PYTHON")
    assert result == ExecutionResult.from_json(ANSWER)
    [request] = seen
    assert (request.method, request.path) == ("POST", "/v1/sandboxes/demo/execute")
    assert json.loads(request.body) == {"code": "1 + 1", "binding": "PYTHON"}
    assert request.headers["content-length"] == str(len(request.body))
    assert request.events is None  # no line callback: no stream asked for


async def test_streamed_lines_reach_the_callbacks_as_the_handler_sends_them() -> None:
    told: list[str] = []
    streamed_before_answer: list[list[str]] = []

    async def handler(request: Request) -> Response:
        assert request.events is not None
        request.events(output_event("stdout", "hello"))
        await asyncio.sleep(0.01)  # the event crosses to the loop before the answer
        streamed_before_answer.append(list(told))
        return Response.json(200, ANSWER)

    sandbox = SandboxClient(MockTransport(handler), "demo")
    await sandbox.interpreter.run_code("print('hello')", on_stdout=told.append)
    assert streamed_before_answer == [["hello"]]
    assert told == ["hello"]  # the answer's copy of the line is not told twice


async def test_a_request_given_up_is_told_to_the_handler_which_still_ends() -> None:
    ended = asyncio.Event()
    given_up: list[bool] = []

    async def handler(request: Request) -> Response:
        await request.given_up.wait()
        given_up.append(True)
        ended.set()
        return Response.json(200, ANSWER)

    transport = MockTransport(handler, enforces_deadlines=False)
    with pytest.raises(TimeoutError):
        await transport.request("POST", "/v1/sandboxes/demo/execute", {"code": "1"}, timeout=0.05)
    await asyncio.wait_for(ended.wait(), 5)
    assert given_up == [True]


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (Response(200, b"<html>oops</html>", "text/html"), "INTERNAL_ERROR"),
        (Response(502, b"<html>Bad gateway</html>", "text/html"), "INTERNAL_ERROR"),
        (Response.json(200, {"results": "not a list"}), "INTERNAL_ERROR"),
        (Response.json(404, {"code": "CONTEXT_NOT_FOUND", "message": "gone"}), "CONTEXT_NOT_FOUND"),
    ],
    ids=["html", "bad-gateway", "wrong-shape", "error"],
)
async def test_garbage_from_the_gateway_is_a_clear_sandbox_error(
    answer: Response, code: str
) -> None:
    sandbox = SandboxClient(MockTransport(lambda request: answer), "demo")
    with pytest.raises(SandboxError) as raised:
        await sandbox.interpreter.run_code("1")
    assert raised.value.code == code


async def test_cancel_only_abandons_unless_the_test_says_how_it_cancels() -> None:
    assert await MockTransport(lambda request: Response(204, b"")).cancel("demo") is False
    cancelled: list[tuple[str, str | None]] = []

    def cancel(sandbox_id: str, context_id: str | None) -> bool:
        cancelled.append((sandbox_id, context_id))
        return True

    backend = Backend(MockTransport(lambda request: Response(204, b""), cancel=cancel), name="t")
    assert await backend.sandbox("demo").cancel() is True
    assert await backend.sandbox("demo").cancel("one-context") is True
    assert cancelled == [("demo", None), ("demo", "one-context")]
    await backend.aclose()
    assert backend.transport.closed  # type: ignore[attr-defined]


async def test_an_exception_in_the_handler_reaches_the_caller_as_is() -> None:
    def handler(request: Request) -> Response:
        raise ConnectionResetError("the test's gateway went away")

    with pytest.raises(ConnectionResetError, match="went away"):
        await SandboxClient(MockTransport(handler), "demo").get_info()


@pytest.mark.parametrize(
    "body",
    [[], {"runtimes": "no", "sandboxes": 3, "contexts": "no", "checkpoints": 1, "history": 2}],
    ids=["a-list", "wrong-types"],
)
async def test_every_answer_of_the_wrong_shape_is_a_clear_sandbox_error(body: object) -> None:
    """Each call that reads a typed answer (listings, info, contexts, checkpoints,
    history, files) turns one of the wrong shape into INTERNAL_ERROR "Invalid sandbox
    response"; before, most let a bare TypeError or KeyError through to the CLI or TUI."""
    backend = Backend(MockTransport(lambda request: Response.json(200, body)), name="t")
    sandbox = backend.sandbox("demo")
    calls = {
        "runtimes": backend.runtimes(),
        "list_sandboxes": backend.list_sandboxes(),
        "get_info": sandbox.get_info(),
        "contexts": sandbox.interpreter.list_code_contexts(),
        "create_context": sandbox.interpreter.create_code_context("PYTHON"),
        "checkpoints": sandbox.interpreter.list_checkpoints("ctx"),
        "history": sandbox.interpreter.history("ctx"),
        "read_file": sandbox.read_file("a.txt"),
        "list_files": sandbox.list_files("."),
        "exists": sandbox.exists("a.txt"),
    }
    for name, call in calls.items():
        with pytest.raises(SandboxError) as raised:
            await call
        assert (raised.value.code, raised.value.message) == (
            "INTERNAL_ERROR",
            "Invalid sandbox response",
        ), name
    await backend.aclose()


@pytest.mark.parametrize(
    ("call", "body"),
    [
        ("exists", {"path": "/workspace/a", "exists": "false", "timestamp": "t"}),
        ("exists", {"path": "/workspace/a", "exists": 0, "timestamp": "t"}),
        (
            "read",
            {"path": "/workspace/a", "content": "aGk", "encoding": "base64", "timestamp": "t"},
        ),
    ],
    ids=["exists-as-a-string", "exists-as-a-number", "base64-that-does-not-decode"],
)
async def test_answers_whose_values_cannot_mean_what_they_claim_are_invalid(
    call: str, body: dict[str, object]
) -> None:
    """A boolean sent as the string "false" was coerced to True (a missing file said to
    exist), and base64 that does not decode raised a bare binascii.Error where the bytes
    were first used (a traceback in `files read`)."""
    sandbox = SandboxClient(MockTransport(lambda request: Response.json(200, body)), "demo")
    with pytest.raises(SandboxError) as raised:
        if call == "exists":
            await sandbox.exists("a")
        else:
            await sandbox.read_file("a", encoding="base64")
    assert (raised.value.code, raised.value.message) == (
        "INTERNAL_ERROR",
        "Invalid sandbox response",
    )


async def test_a_null_boolean_reads_as_false_and_good_base64_reads_as_its_bytes() -> None:
    answers = [
        {"path": "/workspace/a", "exists": None, "timestamp": "t"},
        {"path": "/workspace/a", "content": "aGk=", "encoding": "base64", "timestamp": "t"},
    ]
    sandbox = SandboxClient(MockTransport(lambda request: Response.json(200, answers.pop(0))), "d")
    assert (await sandbox.exists("a")).exists is False
    assert (await sandbox.read_file("a", encoding="base64")).data == b"hi"


async def test_why_a_context_of_a_binding_cannot_be_made_now() -> None:
    """A reset checks it before it deletes: a runtime that is not listed (a Worker gateway
    lists one that did not answer as unavailable) or offers no contexts (found in review)."""
    listed = {
        "runtimes": [
            {"binding": "PYTHON", "language": "python", "engine": "x", "contexts": True},
            {"binding": "RUBY", "language": "ruby", "engine": "x", "contexts": False},
        ],
        "unavailable": [{"binding": "PERL", "error": "the runtime did not answer"}],
    }

    def handle(request: Request) -> Response:
        assert (request.method, request.path) == ("GET", "/v1/runtimes"), request
        return Response(200, json.dumps(listed).encode())

    gateway = Backend(MockTransport(handle), name="gw")
    assert await gateway.contexts_refused("PYTHON") is None
    assert await gateway.contexts_refused("RUBY") == "gw offers no RUBY code contexts now"
    assert await gateway.contexts_refused("PERL") == (
        "gw does not list a PERL runtime now (it may be unavailable)"
    )


@pytest.mark.parametrize(
    "body",
    [
        b'{"code":"1","language":"python","engine":"x","durationMs":'
        + b"9" * 4000
        + b',"logs":{"stdout":[],"stderr":[]},"results":[]}',
        b'{"code":"1","language":"python","engine":"x","durationMs":1,"logs":{"stdout":[],'
        b'"stderr":[]},"results":[],"context":{"id":"c1","cwd":"/workspace","executions":1e999}}',
    ],
    ids=["a-duration-no-float-holds", "an-infinite-count"],
)
async def test_a_number_too_large_to_hold_is_an_invalid_answer(body: bytes) -> None:
    """JSON numbers that parse but overflow the float or int they are read into raised a
    bare OverflowError: "unexpected OverflowError (a bug)" in the CLI (a helper)."""
    sandbox = SandboxClient(
        MockTransport(lambda request: Response(200, body, "application/json")), "demo"
    )
    with pytest.raises(SandboxError) as raised:
        await sandbox.interpreter.run_code("1", binding="PYTHON")
    assert (raised.value.code, raised.value.message) == (
        "INTERNAL_ERROR",
        "Invalid sandbox response",
    )
    listing = b'{"success":true,"path":"/workspace","files":[{"name":"a","absolutePath":'
    listing += b'"/workspace/a","type":"file","size":1e999,"modifiedAt":"t"}],"count":1}'
    files = SandboxClient(
        MockTransport(lambda request: Response(200, listing, "application/json")), "demo"
    )
    with pytest.raises(SandboxError) as listed:
        await files.list_files(".")
    assert listed.value.message == "Invalid sandbox response"
