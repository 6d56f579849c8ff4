"""Copy as curl (`alt+u`): the current cell's request for a remote profile's gateway, the
token as a variable reference; run against a real `serve` process, it does what the cell
did."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_diff import session_serve
from tests.tui.test_flows import Notifications, make_app
from tour import (
    create_context,
    create_sandbox,
    local_backend_factory,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.backends.remote import open_remote_backend
from workbench.config import Config, RemoteProfile
from workbench.transcripts.documents import DEFAULT_TOKEN_VARIABLE, curl_command
from workbench.tui.app import WorkbenchApp

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def test_the_command_is_quoted_for_the_shell_and_never_holds_a_control_character() -> None:
    code = "print 'it''s' . \"$HOME `id` $(id)\";\n\x1b]52;c;x\x07 # \u00e9\u0085"
    body = {"code": code, "contextId": "ctx"}
    command = curl_command("https://gw.example/", "a b/c", body, "NOT A NAME")
    assert not [ch for ch in command if (ord(ch) < 32 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F]
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:5] == [
        "curl",
        "-sS",
        "-X",
        "POST",
        "https://gw.example/v1/sandboxes/a%20b%2Fc/execute",
    ]
    assert f"Authorization: Bearer ${{{DEFAULT_TOKEN_VARIABLE}}}" in words
    assert json.loads(words[-1]) == body


async def test_alt_u_copies_a_curl_command_that_runs_the_cell(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = session_serve(request)
    monkeypatch.setenv("STAGING_TOKEN", served.token)
    config = Config(
        profiles={"staging": RemoteProfile("staging", served.url, token_env="STAGING_TOKEN")},
        path=tmp_path / "config" / "config.toml",
    )
    config.save()
    data = tmp_path / "data"
    app = WorkbenchApp("staging", data, backend_factory=local_backend_factory(data), config=config)
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=(140, 45)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "curl-box")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "our $n = 41")
        await run_cell(pilot, repl, "$n + 1")
        await pilot.press("alt+u")
        await wait_for(pilot, lambda: bool(copied))
    command = copied[0]
    assert "Bearer ${STAGING_TOKEN}" in command and served.token not in command
    environment = {**os.environ, "STAGING_TOKEN": served.token}
    ran = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=environment, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    assert answer["results"] == [{"text": "42"}] and answer["context"]["id"] == repl.context.id
    assert answer["executionCount"] == 3  # the same context, one run on
    async with open_remote_backend("staging", served.url, served.token) as backend:
        await backend.sandbox("curl-box").destroy()


async def test_alt_u_on_the_local_backend_says_what_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "1")
        await pilot.press("alt+u")
        await wait_for(pilot, lambda: bool(notes.calls))
    assert "Copy as curl needs a remote profile" in notes.calls[-1][0]
