"""`transcript export` and `replay` through the console script across the three
backends: local, a real `serve` process and the gateway Worker in workerd."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.cli import one_error_line, run_cli
from tests.cli.test_diff import open_profile, profiles_env, sandbox_ids
from tests.conftest import require_engine
from workbench.transcripts import parse_transcript, replay_transcript

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("perl_engine")]

TIMED_OUT = {
    "stdout": [],
    "stderr": [],
    "results": [],
    "error": {"name": "ExecutionLimitError", "message": "Execution timed out after 1 s"},
}
"""The outcome of a run stopped at a limit of one second."""

CELLS = [
    'open my $f, "<", "in.txt"; print scalar <$f>; our $n = 41',
    '$n + 1 . " $ENV{GREETING}"',
    'warn "careful\\n"; die "boom\\n"',
]


@pytest.fixture
def perl_engine() -> None:
    require_engine("perl")


async def record(
    request: pytest.FixtureRequest, tmp_path: Path, profile: str, sandbox_id: str
) -> str:
    """Run `CELLS` in a new context of the sandbox on `profile`; the context's id."""
    async with open_profile(request, tmp_path, profile) as backend:
        sandbox = backend.sandbox(sandbox_id)
        await sandbox.set_env_vars({"GREETING": "hello"})
        await sandbox.write_file("in.txt", "from a file\n")
        context = await sandbox.interpreter.create_code_context("PERL")
        for code in CELLS:
            await sandbox.interpreter.run_code(code, context=context)
        return context.id


async def test_a_transcript_from_local_replays_on_every_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = profiles_env(request, tmp_path)
    context_id = await record(request, tmp_path, "local", "recorded")
    path = tmp_path / "session.json"
    args = ("transcript", "export", "-s", "recorded", "--context", context_id, "-o", str(path))
    exported = run_cli(env, *args, "--with-env", "--with-files")
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr == f"wrote 3 cells to {path}\n"
    into_a_folder = run_cli(env, *args[:-1], str(tmp_path), "--force")  # --force cannot help
    assert into_a_folder.returncode == 2
    assert one_error_line(into_a_folder) == f"error: {tmp_path} is a directory: name a file in it"
    # Said before the backend is asked: none of the export's notes come first (QA).
    nowhere = tmp_path / "no" / "such.json"
    into_nowhere = run_cli(env, *args[:-1], str(nowhere))
    assert into_nowhere.returncode == 2
    assert into_nowhere.stderr == f"error: {nowhere.parent} is not a directory: nothing written\n"
    assert run_cli(env, *args).stderr == f"error: {path} exists; pass --force to overwrite it\n"
    # A name ending in a slash wrote a file without it (found by an attack review).
    for output in (f"{tmp_path}/new/", ""):
        no_file = run_cli(env, *args[:-1], output)
        assert no_file.returncode == 2
        assert one_error_line(no_file) == f"error: {output!r} names no file: give the file's name"
    assert not (tmp_path / "new").exists()
    data = json.loads(path.read_text())
    assert data["sandbox"] == {"envVars": {"GREETING": "hello"}}
    assert data["cells"][2]["outcome"]["error"] == {"name": "PerlError", "message": "boom"}
    for profile in ("local", "served", "workerd"):
        replayed = run_cli(env, "replay", str(path), "-p", profile)
        assert replayed.returncode == 0, (profile, replayed.stdout, replayed.stderr)
        assert replayed.stdout.splitlines()[1].startswith("cell 2  same  │ $n + 1")
        assert replayed.stdout.endswith(f"all 3 cells agree on {profile}\n")
        left = await sandbox_ids(request, tmp_path, profile)
        assert not [name for name in left if name.startswith("replay-")]

    # An edited outcome is reported as a divergence, on the deployed-like gateway too.
    data["cells"][1]["outcome"]["results"] = [{"text": "43 hello"}]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    diverged = run_cli(env, "replay", str(edited), "-p", "workerd")
    assert diverged.returncode == 1, diverged.stderr
    assert 'cell 2  differs: results  │ $n + 1 . " $ENV{GREETING}"\n' in diverged.stdout
    assert "-result | 43 hello\n+result | 42 hello\n" in diverged.stdout
    assert diverged.stdout.endswith("1 of 3 cells diverged on workerd\n")
    as_json = json.loads(run_cli(env, "replay", str(edited), "-p", "served", "--json").stdout)
    assert (as_json["same"], as_json["divergences"]) == (False, 1)
    assert [cell["differences"] for cell in as_json["cells"]] == [[], ["results"], []]


async def test_export_needs_history_and_replay_a_readable_file(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = profiles_env(request, tmp_path)
    sandbox_id = f"recorded-{uuid.uuid4().hex[:8]}"
    # serve keeps history: its transcript replays locally (env var keys only: not set).
    served_context = await record(request, tmp_path, "served", sandbox_id)
    args = ("transcript", "export", "-s", sandbox_id, "--context", served_context)
    path = tmp_path / "served.json"
    exported = run_cli(env, *args, "-p", "served", "-o", str(path), "--with-files")
    assert exported.returncode == 0, exported.stderr
    assert "env var values are left out" in exported.stderr
    replayed = run_cli(env, "replay", str(path), "--json")
    assert replayed.returncode == 1
    report = json.loads(replayed.stdout)
    assert report["unsetEnvVars"] == ["GREETING"]
    assert report["cells"][1]["observed"]["results"] == [{"text": "42 "}]
    assert "no recorded value for GREETING" in replayed.stderr
    refused = run_cli(env, *args, "-p", "served", "-o", str(path))
    assert refused.returncode == 2
    assert one_error_line(refused) == f"error: {path} exists; pass --force to overwrite it"
    # The Worker gateway keeps no history: say so (exit 2), write nothing.
    gateway_context = await record(request, tmp_path, "workerd", sandbox_id)
    missing = tmp_path / "gateway.json"
    args = ("transcript", "export", "-s", sandbox_id, "-p", "workerd", "-o", str(missing))
    failed = run_cli(env, *args, "--context", gateway_context)
    assert failed.returncode == 2
    assert "keeps no execution history" in one_error_line(failed)
    assert not missing.exists()
    unknown = run_cli(env, *args, "--context", "nope")
    assert unknown.returncode == 4
    assert one_error_line(unknown) == f"error: sandbox {sandbox_id} has no context 'nope'"
    # A bad file is exit 2 with the field it got wrong.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "sandbox-workbench-transcript", "version": 1}))
    rejected = run_cli(env, "replay", str(bad))
    assert rejected.returncode == 2
    assert (
        one_error_line(rejected) == f"error: bad transcript: {bad}: context must be a JSON object"
    )
    for profile in ("served", "workerd"):
        async with open_profile(request, tmp_path, profile) as backend:
            await backend.sandbox(sandbox_id).destroy()


async def test_a_cell_recorded_at_its_time_limit_replays_under_it_on_serve(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`serve` stops a run at its request's limit as the local backend does (its health
    says so): a cell recorded as timed out is replayed under that limit there too, and
    the client waits past it for the answer (waiting exactly as long raced it; found in
    review)."""
    require_engine("python")
    profiles_env(request, tmp_path, workerd=False)
    cells = [{"code": "import time\ntime.sleep(5)\nprint('late')", "outcome": TIMED_OUT}]
    context = {"binding": "PYTHON", "language": "python", "cwd": "/workspace", "envVars": {}}
    transcript = parse_transcript(
        {"format": "sandbox-workbench-transcript", "version": 1, "context": context, "cells": cells}
    )
    async with open_profile(request, tmp_path, "served") as backend:
        started = time.monotonic()
        report = await replay_transcript(backend, transcript)
        assert report.divergences == [], report.divergences
        assert time.monotonic() - started < 4
