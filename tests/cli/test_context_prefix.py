"""`--context` takes a unique prefix of a context id, as git takes short hashes (the TUI
shows 8 characters), and names the matches when a prefix is ambiguous."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli import cli_env, one_error_line, run_cli
from workbench.api import Backend, MockTransport, Request, Response
from workbench.backends.local import open_local_backend, open_local_gateway
from workbench.cli import common
from workbench.cli.main import main


async def contexts_sharing_a_first_character(data: Path) -> tuple[str, list[str]]:
    """A sandbox with 8 contexts (the limit), two of whose ids start alike: 8 random hex
    digits collide 88% of the time, so a few sandboxes are tried at most."""
    backend = open_local_backend(data, embedded=True)
    try:
        for attempt in range(20):
            sandbox = backend.sandbox(f"box{attempt}")
            ids = [(await sandbox.interpreter.create_code_context("PERL")).id for _ in range(8)]
            if max(Counter(context_id[0] for context_id in ids).values()) > 1:
                return sandbox.id, ids
        raise AssertionError("no two of 160 context ids share a first character")
    finally:
        await backend.aclose()


def test_a_unique_prefix_names_a_context_and_an_ambiguous_one_names_the_matches(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path)
    box, ids = asyncio.run(contexts_sharing_a_first_character(tmp_path / "data"))
    chosen = ids[0]
    short = chosen[:8]
    assert [other for other in ids if other.startswith(short)] == [chosen]
    defined = run_cli(env, "--no-daemon", "run", "-s", box, "--context", short, "-c", "our $v = 7")
    assert defined.returncode == 0, defined.stderr
    read = run_cli(env, "--no-daemon", "run", "-s", box, "--context", chosen, "-c", "$v * 6")
    assert (read.returncode, read.stdout) == (0, "42\n")
    shared, _ = Counter(context_id[0] for context_id in ids).most_common(1)[0]
    matching = sorted(context_id for context_id in ids if context_id.startswith(shared))
    ambiguous = run_cli(env, "--no-daemon", "run", "-s", box, "--context", shared, "-c", "1")
    assert ambiguous.returncode == 2
    message = one_error_line(ambiguous)
    assert f"--context {shared} matches {len(matching)} contexts" in message
    assert all(f"{context_id} (PERL)" in message for context_id in matching)
    unknown = run_cli(env, "--no-daemon", "run", "-s", box, "--context", "zz", "-c", "1")
    assert unknown.returncode == 4, unknown.stderr


async def a_context_with_a_run(data: Path) -> str:
    """The id of a context of sandbox `box` that ran one cell."""
    backend = open_local_backend(data, embedded=True)
    try:
        interpreter = backend.sandbox("box").interpreter
        context = await interpreter.create_code_context("PERL")
        await interpreter.run_code("6 * 7", context=context)
        return context.id
    finally:
        await backend.aclose()


def test_transcript_export_lists_the_sandboxes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, perl_engine: None
) -> None:
    """One listing of the sandboxes tells whether the sandbox exists, before a prefix of the
    context id is resolved (listing its contexts would make it); the command asked, then
    the export asked again. Run in this process, so that a gateway in front of the real
    local one counts the requests."""
    data = tmp_path / "data"
    context_id = asyncio.run(a_context_with_a_run(data))
    gateway = open_local_gateway(data)
    listings: list[Request] = []

    async def counting(request: Request) -> Response:
        if (request.method, request.path) == ("GET", "/v1/sandboxes"):
            listings.append(request)
        return await gateway.handle(request)

    def backend(*args: object, **kwargs: object) -> Backend:
        return Backend(MockTransport(counting), name="local")

    monkeypatch.setattr(common, "open_backend", backend)
    monkeypatch.delenv("SANDBOX_WORKBENCH_PROFILE", raising=False)
    try:
        for given in (context_id[:8], context_id):
            listings.clear()
            args = ["transcript", "export", "-s", "box", "--context", given, "-o", "-"]
            exported = CliRunner().invoke(main, args)
            assert exported.exit_code == 0, exported.output
            assert json.loads(exported.stdout)["source"]["context"] == context_id
            assert len(listings) == 1, given
    finally:
        gateway.cancel_all()
        gateway.close()
