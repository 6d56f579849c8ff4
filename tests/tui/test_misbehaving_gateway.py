"""A gateway that answers garbage: the TUI names the failure, keeps running and loses
nothing. The gateway is a function (`MockTransport`) in front of a real local gateway that
runs no engine: the engine is not the subject here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tui.test_flows import Notifications, app_over, local_gateway
from tour import create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.api import MockTransport, Request, Response
from workbench.tui.screens.create_sandbox_screen import CreateSandboxScreen

pytestmark = pytest.mark.usefixtures("tui_dirs")

BAD_GATEWAY = Response(502, b"<html><body>502 Bad Gateway</body></html>", "text/html")
"""What a proxy in front of a gateway that is down answers."""


async def test_sandbox_routes_answering_html_are_named_and_the_app_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    down = {"sandboxes": True}
    with local_gateway(data) as gateway:

        async def handle(request: Request) -> Response:
            if down["sandboxes"] and request.path.startswith("/v1/sandboxes"):
                return BAD_GATEWAY
            return await gateway.handle(request)

        app = app_over(data, MockTransport(handle))
        main = app.main_screen
        notes = Notifications(app, monkeypatch)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: bool(notes.errors()))
            assert notes.errors() == [
                "Listing sandboxes failed: HTTP 502: Bad Gateway (INTERNAL_ERROR, HTTP 502)"
            ]
            await pilot.press("f2")
            await wait_for(pilot, lambda: isinstance(app.screen, CreateSandboxScreen))
            await pilot.press(*"demo", "enter")
            await wait_for(pilot, lambda: len(notes.errors()) == 2)
            assert "HTTP 502" in notes.errors()[1] and "<html>" not in notes.errors()[1]
            assert "demo" not in main.sandbox_infos and app.is_running

            down["sandboxes"] = False  # the gateway is back: the same keys now work
            await pilot.press("f2")
            await wait_for(pilot, lambda: isinstance(app.screen, CreateSandboxScreen))
            await pilot.press(*"demo", "enter")
            await wait_for(pilot, lambda: "demo" in main.sandbox_infos)
            await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("demo") is not None)
            assert len(notes.errors()) == 2


@pytest.mark.usefixtures("python_engine")
async def test_a_run_answered_with_garbage_fails_that_cell_and_the_context_keeps_its_state(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    garbage: list[Response] = []
    with local_gateway(data) as gateway:

        async def handle(request: Request) -> Response:
            if garbage and request.path.endswith("/execute"):
                answer = await gateway.handle(request)  # the run happens; its answer is lost
                assert answer.status == 200
                return garbage.pop(0)
            return await gateway.handle(request)

        app = app_over(data, MockTransport(handle))
        async with app.run_test(size=(120, 40)) as pilot:
            await until_connected(pilot)
            await create_sandbox(pilot)
            repl = await create_context(pilot, "PYTHON")
            await run_cell(pilot, repl, "x = 41")
            garbage.extend(
                [
                    Response.json(200, {"results": "not a list", "logs": {}}),
                    Response(200, b'{"results": [', "application/json"),
                ]
            )
            failures = {
                "x += 1": "Invalid sandbox response (INTERNAL_ERROR, HTTP 500)",
                "x += 0": "HTTP 200: OK (INTERNAL_ERROR, HTTP 200)",  # spec 4.5, rule 1
            }
            for code, failure in failures.items():
                await run_cell(pilot, repl, code)
                cell = repl.transcript.cells[-1]
                assert cell.result is None and cell.failure == failure
                assert not repl.running
            await run_cell(pilot, repl, "x")
            result = repl.transcript.cells[-1].result
            assert result is not None and result.error is None
            assert result.results[0].text == "42"  # both runs happened; nothing was lost


async def test_a_health_answer_listing_odd_features_still_connects(tmp_path: Path) -> None:
    """`features` holding something that is not a name (`[[1]]`) is ignored, where the
    health check raised outside its error handling and never reported (found by a
    review)."""
    data = tmp_path / "data"
    with local_gateway(data) as gateway:

        async def handle(request: Request) -> Response:
            answer = await gateway.handle(request)
            if request.path == "/v1/health":
                body = json.loads(answer.body)
                body["features"] = [[1], {"a": 1}, *body.get("features", [])]
                return Response.json(200, body)
            return answer

        app = app_over(data, MockTransport(handle))
        async with app.run_test(size=(120, 40)) as pilot:
            await until_connected(pilot)
            assert app.main_screen.connection.streams_output  # the real names still count
