"""The contract between the core and the runtime Workers, as `gateway init` renders them.

The core stand-in probes `GET /interpreter` before it creates a context and runs code in
a context through the runtime Worker's `executeInContext` RPC; the rendered runtime
Workers re-export the runtime stand-ins, so what their configs bind (an `INTERPRETER`, or
none for Ruby) decides what the contract allows, as on Cloudflare.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import require_engine
from tests.workerd.harness import WorkerdGateway

NO_INTERPRETER = (
    "Code contexts are not supported: this Worker has no INTERPRETER Durable Object binding"
)


@pytest.fixture
def served(gateway: WorkerdGateway) -> Iterator[httpx.Client]:
    """The serve process behind the stand-ins, reached directly."""
    with httpx.Client(
        base_url=gateway.serve.url,
        headers={"authorization": f"Bearer {gateway.serve.token}"},
        timeout=httpx.Timeout(120.0),
    ) as opened:
        yield opened


@pytest.fixture
def sandbox_id(client: httpx.Client) -> Iterator[str]:
    identifier = f"rc-{uuid.uuid4().hex[:16]}"
    yield identifier
    client.delete(f"/v1/sandboxes/{identifier}")


def test_context_runs_reach_the_runtime_workers_rpc_entry_point(
    client: httpx.Client, served: httpx.Client, sandbox_id: str
) -> None:
    """A Ruby context that exists (serve's local engines have them, with Ruby contexts on)
    is run through the rendered Ruby Worker's `executeInContext`, which has no
    INTERPRETER to give it to."""
    created = served.post(f"/v1/sandboxes/{sandbox_id}/contexts", json={"binding": "RUBY"})
    assert created.status_code == 201, created.text
    context_id = created.json()["id"]
    response = client.post(
        f"/v1/sandboxes/{sandbox_id}/execute", json={"code": "1", "contextId": context_id}
    )
    assert response.status_code == 400, response.text
    assert response.json()["message"] == NO_INTERPRETER


def test_a_runtime_without_contexts_refuses_them_and_runs_statelessly(
    client: httpx.Client, sandbox_id: str
) -> None:
    require_engine("ruby")
    refused = client.post(f"/v1/sandboxes/{sandbox_id}/contexts", json={"binding": "RUBY"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"] == ("Code contexts are not supported by binding 'RUBY' (ruby)")
    assert client.post(
        f"/v1/sandboxes/{sandbox_id}/env", json={"envVars": {"GREETING": "hi"}}
    ).is_success
    ran = client.post(
        f"/v1/sandboxes/{sandbox_id}/execute",
        json={"code": 'ENV["GREETING"] + ENV["NAME"]', "binding": "RUBY", "envVars": {"NAME": "!"}},
    )
    assert ran.status_code == 200, ran.text
    result = ran.json()
    assert result["results"] == [{"text": '"hi!"'}]
    # The stateless fallback (spec 2.4.1 step 9): no context, no execution count.
    assert "context" not in result
    assert "executionCount" not in result
    listed = client.get(f"/v1/sandboxes/{sandbox_id}/contexts")
    assert listed.json()["contexts"] == []


def test_context_state_lives_across_runs_through_the_rpc(
    client: httpx.Client, sandbox_id: str
) -> None:
    require_engine("python")
    path = f"/v1/sandboxes/{sandbox_id}/execute"
    first = client.post(path, json={"code": "x = 41", "binding": "PYTHON"})
    assert first.status_code == 200, first.text
    context_id = first.json()["context"]["id"]
    second = client.post(path, json={"code": "x + 1", "contextId": context_id})
    assert second.status_code == 200, second.text
    assert second.json()["results"] == [{"text": "42"}]
    assert second.json()["context"]["executions"] == 2
