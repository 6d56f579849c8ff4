"""Fuzz a real `serve` process against docs/gateway-openapi.json with schemathesis.

Every generated request (valid and invalid by the schema, undeclared methods included)
must get an answer that is not an internal error, `serve` must log no exception, and it
must still be healthy afterwards. The document as published mostly reaches validation
(random bindings, ids and paths), so a steered copy also drives the routes' inner
workings: real bindings, a few sandboxes and file paths that meet each other, and cheap
code, with fewer examples for the operations that run engines.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis import Case

from tests.conftest import require_engine
from tests.serve_process import ServeProcess, serve_process

OPENAPI = Path(__file__).parents[2] / "docs" / "gateway-openapi.json"
EXECUTE = r"/execute$"
BINDINGS = ["PYTHON", "JAVASCRIPT", "PERL", "RUBY"]
SANDBOX_IDS = ["fuzz-a", "fuzz-b"]
CHEAP_CODE = ["1", "1 + 1", "x = 41", "'é\\u0000' * 3", "nope(", "print(1)"]
"""Fast in every language (or a syntax error there): no loops, no imports."""
WORKSPACE_PATHS = ["a.txt", "d", "d/b.txt", "/workspace/d/", "../escape", "/etc/passwd", ""]


def steered(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of the gateway document whose valid values meet the server's real state."""
    steered_document = copy.deepcopy(document)
    for item in steered_document["paths"].values():
        operations = [item, *(value for key, value in item.items() if key != "parameters")]
        for operation in operations:
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "id":
                    parameter["schema"] = {"enum": SANDBOX_IDS}
                elif parameter["name"] == "binding":
                    parameter["schema"] = {"enum": BINDINGS}
        for operation in operations:
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            properties = (body or {}).get("schema", {}).get("properties", {})
            if "binding" in properties:
                properties["binding"] = {"enum": BINDINGS}
            if "code" in properties:
                properties["code"] = {"enum": CHEAP_CODE}
    for name in ("FilesRequest", "FilesBatchEntry"):
        files = steered_document["components"]["schemas"][name]["properties"]
        files["path"] = files["newPath"] = {"enum": WORKSPACE_PATHS}
    return steered_document


published = schemathesis.openapi.from_path(OPENAPI)
steered_schema = schemathesis.openapi.from_dict(steered(json.loads(OPENAPI.read_text())))
FUZZ_SETTINGS = hypothesis.settings(
    deadline=None,
    database=None,  # nothing written to the checkout
    suppress_health_check=list(hypothesis.HealthCheck),
)


class ServeUnderFuzz:
    """A running `serve` and everything it has written to stdout/stderr so far."""

    def __init__(self, process: ServeProcess) -> None:
        self.process = process
        self.output: list[str] = []
        # Drained continuously: a full pipe would block serve's logging.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.process.stdout is not None
        for line in self.process.process.stdout:
            self.output.append(line)

    @property
    def log(self) -> str:
        return "".join(self.output)

    def check(self, case: Case[Any]) -> None:
        """Send a generated case with the token (see `judge`)."""
        logged_before = len(self.output)
        response = case.call(
            base_url=self.process.url,
            headers={"authorization": f"Bearer {self.process.token}"},
            timeout=60,
        )
        content_type = response.headers.get("content-type", [""])[0]
        self.judge(
            case.as_curl_command(), logged_before, response.status_code, content_type, response.text
        )

    def check_raw(self, method: str, path: str, body: bytes) -> None:
        """Send these exact body bytes as JSON with the token (see `judge`)."""
        logged_before = len(self.output)
        headers = {
            "authorization": f"Bearer {self.process.token}",
            "content-type": "application/json",
        }
        response = httpx.request(
            method, self.process.url + path, content=body, headers=headers, timeout=60
        )
        self.judge(
            f"{method} {path} {body[:200]!r}",
            logged_before,
            response.status_code,
            response.headers.get("content-type", ""),
            response.text,
        )

    def judge(
        self, request: str, logged_before: int, status: int, content_type: str, text: str
    ) -> None:
        """Fail on an internal error, or when serve logged an exception since `logged_before`."""
        reproducer = f"{request}\n-> {status} {text}"
        if status >= 500:
            assert content_type.startswith("application/json"), reproducer
            assert json.loads(text)["code"] != "INTERNAL_ERROR", reproducer
        # uvicorn logs an app's exception before it answers 500, so it is (almost always)
        # read by now; the health test checks the whole log again.
        logged = "".join(self.output[logged_before:])
        assert "Traceback" not in logged, f"{reproducer}\n{logged}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeUnderFuzz]:
    for binding in BINDINGS:
        require_engine(binding.lower())
    with serve_process(tmp_path_factory.mktemp("fuzz")) as process:
        yield ServeUnderFuzz(process)


@published.exclude(path_regex=EXECUTE).parametrize()
@hypothesis.settings(FUZZ_SETTINGS, max_examples=20)
def test_published_schema(case: Case[Any], served: ServeUnderFuzz) -> None:
    served.check(case)


@steered_schema.exclude(path_regex=EXECUTE).parametrize()
@hypothesis.settings(FUZZ_SETTINGS, max_examples=15)
def test_steered_schema(case: Case[Any], served: ServeUnderFuzz) -> None:
    served.check(case)


@steered_schema.include(path_regex=EXECUTE).parametrize()
@hypothesis.settings(FUZZ_SETTINGS, max_examples=5)
def test_steered_executions(case: Case[Any], served: ServeUnderFuzz) -> None:
    served.check(case)


def test_serve_is_healthy_after_the_fuzz(served: ServeUnderFuzz) -> None:
    """After the fuzz tests above (pytest keeps file order): serve answers, its log is clean."""
    health = httpx.get(f"{served.process.url}/v1/health", timeout=30)
    assert health.status_code == 200
    assert health.json()["ok"] is True
    assert served.process.process.poll() is None
    assert "Traceback" not in served.log
    assert "ERROR" not in served.log, served.log


@pytest.fixture(scope="module")
def edge_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeUnderFuzz]:
    """A serve of its own: the known failures below must not dirty the fuzz's log."""
    require_engine("python")
    with serve_process(tmp_path_factory.mktemp("edge")) as process:
        yield ServeUnderFuzz(process)


def surrogate_bug(why: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"lone surrogate: {why}")


ENCODE_REPLY = (
    "the answer echoes the string and workbench/api/transport.py Response.json cannot "
    "UTF-8-encode it (uvicorn's plain-text 500 and a logged traceback)"
)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/v1/sandboxes/edge/execute", b"[" * 50_000, id="deep-array"),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/files",
            b'{"op": "read", "path": ' + b"[" * 100_000,
            id="deep-object-member",
        ),
        pytest.param(
            "POST",
            "/v1/runtimes/PYTHON/execute",
            rb'{"code": "\ud800"}',
            id="surrogate-stateless-code",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/execute",
            rb'{"code": "\ud800", "binding": "PYTHON"}',
            id="surrogate-context-code",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/execute",
            rb'{"code": "1", "contextId": "\ud800"}',
            id="surrogate-context-id",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/contexts",
            rb'{"binding": "\ud800"}',
            id="surrogate-binding",
        ),
        pytest.param(
            "POST",
            "/v1/sandboxes/edge/env",
            rb'{"envVars": {"\ud800": "x"}}',
            id="surrogate-env-key",
        ),
    ],
)
def test_edge_requests(edge_served: ServeUnderFuzz, method: str, path: str, body: bytes) -> None:
    """Inputs schemathesis does not generate (it never sends lone surrogates, and keeps
    nesting shallow) answer a 4xx, not an internal error, and serve stays healthy."""
    edge_served.check_raw(method, path, body)
    assert httpx.get(f"{edge_served.process.url}/v1/health", timeout=30).status_code == 200
