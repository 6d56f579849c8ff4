"""A runtime Worker at another version than the gateway's core, in workerd.

The gateway and the core stand-in are at the pinned versions; the PYTHON runtime Worker
re-exports a stand-in of another version that speaks interpreter protocol 2 and has no
`executeInContext` (built without the version check: it stands for a Worker deployed by
hand). As with the real packages, the core refuses to create contexts on it, runs in its
existing contexts fail with a 502, and the versions reports show it: the remote backend
warns once on stderr, the TUI in its status bar, Runtimes tab and a notification.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.cli import cli_env, one_error_line, run_cli
from tests.conftest import require_engine
from tests.serve_process import serve_process
from tests.workerd.harness import (
    TEMPLATES,
    TTL_MS,
    WorkerdGateway,
    missing_node_tools,
    pinned_standins,
    workerd_gateway,
)
from tour import until_connected, wait_for
from workbench.deploy.versions import load_versions
from workbench.tui.app import WorkbenchApp

OTHER_VERSION = "0.3.0"
OTHER_PROTOCOL = 2
PINNED = load_versions(TEMPLATES)
REFUSED = "Binding 'PYTHON' speaks interpreter protocol 2; this caller supports 1"
WARNING = (
    "runtime PYTHON ({engine}) speaks interpreter protocol 2, but @sandbox-workers/core "
    f"{PINNED.core} expects 1: its code contexts will fail; deploy the runtime at the pinned "
    "version (sandbox-workbench gateway init)"
)


@pytest.fixture(scope="module")
def mismatch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerdGateway]:
    reason = missing_node_tools()
    if reason is not None:
        pytest.skip(reason)
    standins = [
        replace(standin, version=OTHER_VERSION, protocol=OTHER_PROTOCOL)
        if standin.package == "@sandbox-workers/python"
        else standin
        for standin in pinned_standins()
    ]
    with (
        serve_process(
            tmp_path_factory.mktemp("mismatch-served"),
            env={"SANDBOX_WORKBENCH_IDLE_TTL_MS": str(TTL_MS)},
        ) as serve,
        workerd_gateway(
            tmp_path_factory.mktemp("mismatch-gateway"),
            serve,
            bindings=["PYTHON"],
            standins=standins,
            unchecked={"PYTHON"},
        ) as gateway,
    ):
        yield gateway


@pytest.fixture
def client(mismatch: WorkerdGateway) -> Iterator[httpx.Client]:
    with mismatch.client() as opened:
        yield opened


def engine_of(client: httpx.Client) -> str:
    engine = client.get("/v1/runtimes").json()["runtimes"][0]["engine"]
    assert isinstance(engine, str)
    return engine


def context_in_serve(mismatch: WorkerdGateway) -> tuple[str, str]:
    """A sandbox with a PYTHON context made before the runtime changed version (made in
    serve itself, which holds the state behind the stand-ins)."""
    sandbox_id = f"mm-{uuid.uuid4().hex[:16]}"
    created = httpx.post(
        f"{mismatch.serve.url}/v1/sandboxes/{sandbox_id}/contexts",
        json={"binding": "PYTHON"},
        headers={"authorization": f"Bearer {mismatch.serve.token}"},
    )
    assert created.status_code == 201, created.text
    return sandbox_id, created.json()["id"]


def test_health_shows_the_runtime_of_another_protocol(mismatch: WorkerdGateway) -> None:
    health = httpx.get(f"{mismatch.url}/v1/health").json()
    assert health["core"] == {
        "name": "@sandbox-workers/core",
        "version": PINNED.core,
        "interpreterProtocol": 1,
    }
    assert [(entry["binding"], entry["protocol"]) for entry in health["runtimes"]] == [
        ("PYTHON", OTHER_PROTOCOL)
    ]


def test_no_context_can_be_made_on_it(client: httpx.Client) -> None:
    sandbox_id = f"mm-{uuid.uuid4().hex[:16]}"
    try:
        created = client.post(f"/v1/sandboxes/{sandbox_id}/contexts", json={"binding": "PYTHON"})
        assert created.status_code == 400, created.text
        assert created.json()["message"] == REFUSED
        # A run on the binding needs its default context, so it is refused the same way.
        ran = client.post(
            f"/v1/sandboxes/{sandbox_id}/execute", json={"code": "1", "binding": "PYTHON"}
        )
        assert ran.status_code == 400, ran.text
        assert ran.json()["message"] == REFUSED
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")


def test_runs_in_its_existing_contexts_fail_with_a_502(
    mismatch: WorkerdGateway, client: httpx.Client
) -> None:
    sandbox_id, context_id = context_in_serve(mismatch)
    try:
        for body in ({"code": "1", "contextId": context_id}, {"code": "1", "binding": "PYTHON"}):
            ran = client.post(f"/v1/sandboxes/{sandbox_id}/execute", json=body)
            assert ran.status_code == 502, ran.text
            error = ran.json()
            assert error["code"] == "INTERNAL_ERROR"
            assert error["message"].startswith("Binding 'PYTHON' failed: ")
            assert "executeInContext" in error["message"]
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")


async def test_the_remote_backend_warns_once(
    mismatch: WorkerdGateway, client: httpx.Client
) -> None:
    warnings: list[str] = []
    backend = mismatch.backend("mismatch", warn=warnings.append)
    try:
        await backend.health()
        await backend.runtimes()
        await backend.health()
    finally:
        await backend.aclose()
    expected = f"warning: {mismatch.url}: " + WARNING.format(engine=engine_of(client))
    assert warnings == [expected]
    # A run that fails with the 502 explains itself the same way, to a fresh client.
    sandbox_id, context_id = context_in_serve(mismatch)
    warnings.clear()
    backend = mismatch.backend("mismatch", warn=warnings.append)
    try:
        with pytest.raises(Exception, match="Binding 'PYTHON' failed"):
            await backend.sandbox(sandbox_id).interpreter.run_code("1", context=context_id)
    finally:
        await backend.aclose()
        client.delete(f"/v1/sandboxes/{sandbox_id}")
    assert warnings == [expected]


def test_the_command_line_warns_in_one_line_on_stderr(
    mismatch: WorkerdGateway, client: httpx.Client, tmp_path: Path
) -> None:
    require_engine("python")
    env = cli_env(tmp_path, MISMATCH_TOKEN=mismatch.token)
    added = run_cli(
        env, "profiles", "add", "mm", "--url", mismatch.url, "--token-env", "MISMATCH_TOKEN"
    )
    assert added.returncode == 0, added.stderr
    expected = f"warning: {mismatch.url}: " + WARNING.format(engine=engine_of(client))
    # A stateless run works (the runtime's /execute is unchanged) and says what is wrong.
    ran = run_cli(env, "run", "--profile", "mm", "-l", "python", "-c", "6 * 7")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "42"
    assert ran.stderr.splitlines().count(expected) == 1
    # A run in a context fails: the warning, then the one error line.
    sandbox_id, context_id = context_in_serve(mismatch)
    try:
        failed = run_cli(
            env, "run", "--profile", "mm", "-s", sandbox_id, "--context", context_id, "-c", "1"
        )
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")
    assert failed.returncode != 0
    assert failed.stderr.splitlines().count(expected) == 1
    assert "Binding 'PYTHON' failed" in one_error_line(failed)


async def test_the_tui_shows_it(
    mismatch: WorkerdGateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SANDBOX_WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    app = WorkbenchApp(
        "mm",
        tmp_path / "data",
        backend_factory=lambda name: mismatch.backend(name, warn=lambda line: None),
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        main = app.main_screen
        await wait_for(pilot, lambda: main.status.version_warning != "")
        # The notification is posted with the warning and shown once its message is
        # handled: read it then, not after the Runtimes tab fills (a CI run found none
        # there; a notification also times out after 5 s).
        mismatch_title = "Runtime version mismatch"
        await wait_for(pilot, lambda: any(n.title == mismatch_title for n in app._notifications))
        notes = [(note.title, note.message) for note in app._notifications]
        assert main.status.versions == f"@sandbox-workers/core {PINNED.core} · protocol 1"
        assert main.status.version_warning == "PYTHON speaks protocol 2"
        await wait_for(pilot, lambda: bool(main.runtimes_table.protocols))
        cell = main.runtimes_table.get_cell("PYTHON", "protocol")
        assert str(cell) == "2 ≠ core's 1"
        assert sum(title == "Runtime version mismatch" for title, _ in notes) == 1
        assert any("runtime PYTHON" in message and "protocol 2" in message for _, message in notes)
        # Once per profile: none added since (the first may have timed out).
        assert sum(n.title == mismatch_title for n in app._notifications) <= 1
