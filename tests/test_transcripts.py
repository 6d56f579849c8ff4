"""The transcript format (its reader's checks), the comparison of outcomes, replay on the
local backend, and the pytest plugin that makes a folder of transcripts a test suite."""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.cli import SCRIPT, cli_env, run_cli
from tests.conftest import require_engine
from workbench.api import (
    Backend,
    ContextRef,
    ExecutionError,
    ExecutionResult,
    MockTransport,
    ResultEntry,
    Usage,
    timed_out_after,
)
from workbench.backends.local import open_local_backend
from workbench.protocol.http import Request, Response
from workbench.transcripts import (
    ContextSpec,
    Outcome,
    RecordedCell,
    ReplayError,
    Transcript,
    TranscriptError,
    Workspace,
    WorkspaceFile,
    differing_fields,
    export_context,
    outcome_lines,
    parse_transcript,
    read_transcript,
    replay_transcript,
    write_private_text,
)
from workbench.transcripts.outcomes import SHOWN_OUTCOME_CHARS

ROOT = Path(__file__).resolve().parent.parent


def result(duration_ms: float = 1.0, **fields: Any) -> ExecutionResult:
    return ExecutionResult("x", "perl", "zeroperl", duration_ms, **fields)


def test_outcomes_ignore_timing_usage_counts_and_boot_notes() -> None:
    from engines.result import SessionState

    first = result(
        stdout=["a"],
        results=[ResultEntry(json={"k": [1, 2]}, is_json=True)],
        error=ExecutionError("E", "m", ["frame 1"], 3),
        usage=Usage(10, 100, 5),
        execution_count=1,
        context=ContextRef("c1", "/workspace", 1),
    )
    second = result(
        999.0,
        stdout=["a"],
        results=[ResultEntry(json={"k": [1, 2]}, is_json=True)],
        error=ExecutionError("E", "m", ["another frame"], None),
        usage=Usage(99, 100, 0),
        execution_count=7,
        context=ContextRef("c2", "/workspace", 7, snapshot_ms=2.0),
        session=SessionState("fresh", ("started fresh",)),
    )
    assert Outcome.of(first) == Outcome.of(second)
    changed = result(stdout=["a"], stderr=["warn"], error=ExecutionError("E", "other"))
    assert differing_fields(Outcome.of(first), Outcome.of(changed)) == [
        "stderr",
        "results",
        "error",
    ]


GOOD: dict[str, Any] = {
    "format": "sandbox-workbench-transcript",
    "version": 1,
    "context": {"binding": "PERL", "language": "perl", "cwd": "/workspace", "envVars": {}},
    "sandbox": {"envVars": {"TOKEN": None}},
    "workspace": {
        "directories": ["data"],
        "files": [{"path": "data/in.txt", "content": base64.b64encode(b"\x00\xff").decode()}],
    },
    "cells": [
        {
            "code": "1",
            "outcome": {"stdout": [], "stderr": [], "results": [{"text": "1"}], "error": None},
        },
        {"code": "die", "outcome": None},
    ],
}


def test_a_transcript_round_trips_through_its_file(tmp_path: Path) -> None:
    transcript = parse_transcript(GOOD)
    assert transcript.workspace is not None
    assert transcript.workspace.files == (WorkspaceFile("data/in.txt", b"\x00\xff"),)
    assert transcript.sandbox_env_vars == {"TOKEN": None}
    assert transcript.cells[1] == RecordedCell("die", None)
    path = tmp_path / "t.json"
    write_private_text(path, transcript.dumps(), overwrite=False)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert read_transcript(path) == transcript
    with pytest.raises(FileExistsError):
        write_private_text(path, "{}", overwrite=False)


WRITE_PAST_A_SIZE_LIMIT = """
import errno, resource, signal, sys
from pathlib import Path
from workbench.transcripts import write_private_text
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_private_text(Path(sys.argv[1]), "x" * 100_000, overwrite=True)
except OSError as error:
    print(errno.errorcode[error.errno])
"""


def test_an_overwrite_that_fails_keeps_the_file_it_was_to_replace(tmp_path: Path) -> None:
    """A write that fails (past a file size limit here, as on a full disk) leaves the old
    file as it was and no file of its own; the file used to be emptied first."""
    path = tmp_path / "cells.md"
    path.write_text("the last export")
    failed = subprocess.run(
        [sys.executable, "-c", WRITE_PAST_A_SIZE_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.stdout.strip() == "EFBIG", failed.stderr
    assert path.read_text() == "the last export"
    assert [entry.name for entry in tmp_path.iterdir()] == ["cells.md"]


def test_an_overwrite_of_what_is_not_a_file_writes_into_it(tmp_path: Path) -> None:
    """A FIFO (or `/dev/null`) at the path is written to, as before the writes became
    atomic: replacing it would have put a regular file where `/dev/null` was."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_private_text(fifo, "through the pipe", overwrite=True)
    reader.join(10)
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def with_change(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "the file must be a JSON object"),
        ({**GOOD, "format": "other"}, "not a sandbox-workbench transcript"),
        ({**GOOD, "version": 2}, "transcript version 2 is newer than this sandbox-workbench"),
        ({**GOOD, "version": "1"}, '"version" must be a positive integer'),
        (with_change(("context", "binding"), ""), "context.binding must be a non-empty string"),
        (with_change(("context", "envVars"), {"1X": "v"}), "'1X' is not a valid env var name"),
        (with_change(("sandbox", "envVars"), {"K": 1}), "sandbox.envVars.K must be a string"),
        (with_change(("cells", 0, "code"), ""), "cells[0].code must be a non-empty string"),
        (
            with_change(("cells", 0, "outcome", "stdout"), "a"),
            "cells[0].outcome.stdout must be a list of strings",
        ),
        (
            with_change(("cells", 0, "outcome", "results"), [{"text": 1}]),
            'cells[0].outcome.results[0] must be {"text": string} or {"json": value}',
        ),
        (
            with_change(("cells", 0, "outcome", "error"), {"name": "E"}),
            "cells[0].outcome.error.message must be a string",
        ),
        (
            with_change(("workspace", "files", 0, "path"), "../escape"),
            "workspace.files[0].path must be a relative path inside /workspace",
        ),
        (
            with_change(("workspace", "directories"), ["/etc"]),
            "workspace.directories[0] must be a relative path inside /workspace",
        ),
        (
            with_change(("workspace", "files", 0, "content"), "not base64!"),
            "workspace.files[0].content is not valid base64",
        ),
        # These were found only as the replay reached them, and named neither cell nor
        # file (found by an attack review).
        (with_change(("cells", 0, "code"), " \n\t"), "cells[0].code: Non-empty code is required"),
        (with_change(("cells", 0, "code"), "#" * 65_537), "cells[0].code: Code exceeds 64 KiB"),
        (
            with_change(("workspace", "directories"), ["data/in.txt/deeper"]),
            "workspace: data/in.txt/deeper lies under the file data/in.txt",
        ),
        (
            with_change(("workspace", "directories"), [f"d{n}" for n in range(4_096)]),
            "workspace: 4,098 entries, more than a sandbox holds (4,096)",
        ),
        # A workspace of files named as keys replayed as an empty one (QA).
        (
            {**GOOD, "workspace": {"../../x": "Zm9v", "data.csv": "MQ=="}},
            "workspace holds directories and files, not '../../x', 'data.csv'",
        ),
    ],
)
def test_the_reader_names_the_first_bad_field(data: Any, message: str) -> None:
    with pytest.raises(TranscriptError) as raised:
        parse_transcript(data)
    assert message in str(raised.value)


def test_unreadable_files_are_one_line_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": ')
    with pytest.raises(TranscriptError, match=r"broken.json is not JSON \(line 1, column 12"):
        read_transcript(broken)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(TranscriptError, match="is not UTF-8 text"):
        read_transcript(binary)
    with pytest.raises(TranscriptError, match=r"cannot read .*missing\.json: No such file"):
        read_transcript(tmp_path / "missing.json")
    # Found by an attack review: five million tiny cells took 2.4 GiB to parse; NaN came
    # back out of `replay --json` as no JSON; a long integer's message was Python's
    # advice; a FIFO waited for a writer for ever.
    many = tmp_path / "many.json"
    many.write_text('{"cells": [' + ",".join(['{"code": "1"}'] * 600_000) + "]}")
    with pytest.raises(TranscriptError, match=r"many\.json holds more than 1,000,000 values"):
        read_transcript(many)
    for name, text, message in [
        ("nan.json", '{"cells": [NaN]}', "NaN is not a JSON value"),
        ("long.json", '{"version": ' + "9" * 5_000 + "}", "an integer of over 4,300 digits"),
    ]:
        (tmp_path / name).write_text(text)
        with pytest.raises(TranscriptError, match=f"{name}: {message}$"):
            read_transcript(tmp_path / name)
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(TranscriptError, match=r"fifo\.json: it is not a regular file"):
        read_transcript(tmp_path / "fifo.json")


@pytest.fixture
async def local(tmp_path: Path) -> Any:
    require_engine("perl")
    backend = open_local_backend(tmp_path / "data", embedded=True)
    try:
        yield backend
    finally:
        await backend.aclose()


async def test_export_then_replay_recreates_env_and_files_and_spots_edits(
    local: Backend,
) -> None:
    sandbox = local.sandbox("source")
    await sandbox.set_env_vars({"GREETING": "hello"})
    await sandbox.mkdir("data/empty", recursive=True)
    await sandbox.write_file("data/in.txt", "from a file\n")
    context = await sandbox.interpreter.create_code_context("PERL", "/workspace/data")
    cells = [
        'open my $f, "<", "in.txt"; print scalar <$f>; our $n = 41',
        '$n + 1 . " $ENV{GREETING}"',
        "-d 'empty' ? 'kept' : 'gone'",
    ]
    for code in cells:
        await sandbox.interpreter.run_code(code, context=context)

    exported = await export_context(local, "source", context.id, with_env=True, with_files=True)
    transcript = exported.transcript
    assert transcript.context == ContextSpec("PERL", "perl", "/workspace/data", {})
    assert transcript.workspace == Workspace(
        ("data", "data/empty"), (WorkspaceFile("data/in.txt", b"from a file\n"),)
    )
    report = await replay_transcript(local, transcript)
    assert [cell.differences for cell in report.cells] == [[], [], []]
    assert report.cells[1].observed.results == (ResultEntry(text="42 hello"),)

    # Without values the env var is named but not set: that cell diverges.
    keys_only = await export_context(local, "source", context.id, with_files=True)
    assert keys_only.transcript.sandbox_env_vars == {"GREETING": None}
    assert keys_only.replay_notes == [
        "env var values are left out (keys only); --with-env includes them"
    ]
    report = await replay_transcript(local, keys_only.transcript)
    assert report.unset_env_vars == ["GREETING"]
    assert [cell.number for cell in report.divergences] == [2]

    # An edited outcome is a divergence, in exactly the edited part.
    data = transcript.to_json()
    data["cells"][2]["outcome"]["results"] = [{"text": "gone"}]
    report = await replay_transcript(local, parse_transcript(data))
    assert [(cell.number, cell.differences) for cell in report.divergences] == [(3, ["results"])]
    # Every scratch sandbox was destroyed; the source is untouched.
    assert [summary.id for summary in await local.list_sandboxes()] == ["source"]


async def test_a_transcript_that_cannot_run_here_says_why(local: Backend) -> None:
    from workbench.transcripts import ReplayError

    transcript = Transcript(ContextSpec("COBOL", "cobol"), (RecordedCell("1", None),))
    with pytest.raises(ReplayError, match="local offers no runtime 'COBOL' or 'cobol'"):
        await replay_transcript(local, transcript)


def test_the_pytest_plugin_is_declared_as_an_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = project["project"]["entry-points"]["pytest11"]
    assert plugins == {"sandbox_workbench": "workbench.transcripts.pytest_plugin"}
    assert "workbench.transcripts" in project["tool"]["setuptools"]["packages"]


def run_pytest(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest in `project` with only the plugin loaded (as its entry point would be)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "workbench.transcripts.pytest_plugin", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTHONPATH": str(ROOT),
            **env,
        },
    )


def test_the_pytest_plugin_shows_a_diverging_cells_output_neutralised(tmp_path: Path) -> None:
    """Guest output in a failure report reaches the terminal through pytest as it is: an
    OSC sequence in it is shown as visible escapes."""
    require_engine("perl")
    project = tmp_path / "project"
    (project / "transcripts").mkdir(parents=True)
    cell = {"code": 'print "\\e]0;PWNED\\a"; 1', "outcome": {"results": [{"text": "1"}]}}
    hostile = {**GOOD, "workspace": None, "sandbox": {}, "cells": [cell]}
    (project / "transcripts" / "hostile.json").write_text(json.dumps(hostile))
    env = {
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }
    # A file name is shown escaped too, in the test's id (the short summary, -v).
    (project / "transcripts" / "name\x1b]0;T\x07\n.json").write_text(json.dumps(hostile))
    (project / "transcripts" / b"bytes\xff.json".decode(errors="surrogateescape")).write_text(
        json.dumps(hostile)
    )
    ran = run_pytest(
        project, "-p", "no:cacheprovider", "-rA", "--sandbox-transcripts", "transcripts", **env
    )
    assert ran.returncode == 1, ran.stdout
    assert "+stdout | \\x1b]0;PWNED\\x07" in ran.stdout
    assert "\x1b]" not in ran.stdout and "\x07" not in ran.stdout
    assert "FAILED transcripts/name\\x1b]0;T\\x07\\x0a.json::replay" in ran.stdout
    assert "FAILED transcripts/bytes\\udcff.json::replay" in ran.stdout
    assert "3 failed" in ran.stdout


def test_the_pytest_plugin_replays_each_file_as_a_test(tmp_path: Path) -> None:
    require_engine("perl")
    project = tmp_path / "project"
    folder = project / "transcripts"
    folder.mkdir(parents=True)
    (project / "test_own.py").write_text("def test_own():\n    pass\n")
    cell = {"code": "6 * 7", "outcome": {"results": [{"text": "42"}]}}
    good = {**GOOD, "workspace": None, "sandbox": {}, "cells": [cell]}
    (folder / "good.json").write_text(json.dumps(good))
    edited = copy.deepcopy(good)
    edited["cells"][0]["outcome"]["results"] = [{"text": "43"}]
    (folder / "edited.json").write_text(json.dumps(edited))
    (folder / "notes.txt").write_text("not collected")
    env = {
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }
    ran = run_pytest(
        project, "-p", "no:cacheprovider", "--sandbox-transcripts", "transcripts", **env
    )
    assert ran.returncode == 1, ran.stdout
    assert "sandbox transcripts: " in ran.stdout and " on profile local" in ran.stdout
    assert "1 failed, 2 passed" in ran.stdout
    assert "FAILED transcripts/edited.json::replay" in ran.stdout
    failure = ran.stdout[ran.stdout.index("replay edited.json on local") :]
    assert "cell 1 differs (results):\n  >>> 6 * 7\n--- recorded\n+++ local" in failure
    assert "-result | 43\n+result | 42" in failure
    # Without the option nothing changes; a wrong folder is a usage error.
    plain = run_pytest(project, "-p", "no:cacheprovider", **env)
    assert "1 passed" in plain.stdout and "transcripts" not in plain.stdout
    wrong = run_pytest(project, "--sandbox-transcripts", "nowhere", **env)
    assert wrong.returncode == 4 and "nowhere is not a directory" in wrong.stderr
    unknown = run_pytest(
        project, "--sandbox-transcripts", "transcripts", "--sandbox-profile", "staging", **env
    )
    assert unknown.returncode == 1
    assert "unknown profile 'staging'" in unknown.stdout


def test_the_pytest_plugin_takes_a_folder_named_through_dotdot_and_neutralises_failures(
    tmp_path: Path,
) -> None:
    """`--sandbox-transcripts ../transcripts` collected nothing, and passed (paths were
    compared as text, `..` and all); a failure's message from the transcript or the
    gateway (here a cwd with an OSC sequence) reached the terminal raw (found by an
    attack review)."""
    require_engine("perl")
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_own.py").write_text("def test_own():\n    pass\n")
    folder = tmp_path / "transcripts"
    folder.mkdir()
    cell = {"code": "6 * 7", "outcome": {"results": [{"text": "42"}]}}
    good = {**GOOD, "workspace": None, "sandbox": {}, "cells": [cell]}
    (folder / "good.json").write_text(json.dumps(good))
    hostile = copy.deepcopy(good)
    hostile["context"]["cwd"] = "/../../etc\x1b]0;T\x07"
    (folder / "hostile.json").write_text(json.dumps(hostile))
    env = {
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }
    ran = run_pytest(
        project, "-p", "no:cacheprovider", "--sandbox-transcripts", "../transcripts", **env
    )
    assert ran.returncode == 1, ran.stdout
    assert "1 failed, 2 passed" in ran.stdout
    assert "Path escapes /workspace: /../../etc\\x1b]0;T\\x07" in ran.stdout
    assert "\x1b]" not in ran.stdout and "\x07" not in ran.stdout


async def test_a_context_transcript_on_a_gateway_running_its_language_statelessly_fails() -> None:
    """Only a local extension's contexts (Ruby's) are a known difference: a gateway that
    ran Python statelessly turned every Python transcript's replay green (found by an
    attack review)."""
    runtimes = {
        "runtimes": [
            {"binding": "PYTHON", "language": "python", "engine": "x", "contexts": False},
            {"binding": "RUBY", "language": "ruby", "engine": "x", "contexts": False},
        ]
    }

    def handle(request: Request) -> Response:
        assert (request.method, request.path) == ("GET", "/v1/runtimes"), request
        return Response(200, json.dumps(runtimes).encode())

    gateway = Backend(MockTransport(handle), name="stateless")
    python = parse_transcript(
        {**GOOD, "context": {"binding": "PYTHON", "language": "python", "cwd": "/workspace"}}
    )
    with pytest.raises(ReplayError, match="runs PYTHON statelessly only"):
        await replay_transcript(gateway, python)
    ruby = parse_transcript(
        {**GOOD, "context": {"binding": "RUBY", "language": "ruby", "cwd": "/workspace"}}
    )
    report = await replay_transcript(gateway, ruby)
    assert report.known_difference is not None and not report.cells


async def test_an_export_says_where_a_checkpoint_was_restored(local: Backend) -> None:
    """A restore is a comment in the history: the export says what it did, since a replay
    runs the comment and so goes on from another state."""
    sandbox = local.sandbox("restored")
    interpreter = sandbox.interpreter
    context = await interpreter.create_code_context("PERL")
    await interpreter.run_code("our $n = 1", context=context)
    await interpreter.save_checkpoint(context, "one")
    await interpreter.run_code("$n = 2", context=context)
    await interpreter.restore_checkpoint(context, "one")
    await interpreter.run_code("$n", context=context)

    exported = await export_context(local, "restored", context.id)
    assert [cell.code for cell in exported.transcript.cells][2] == "# restored checkpoint one"
    assert exported.replay_notes == [
        "run 3 restored checkpoint one: the runs after it started from that checkpoint's "
        "state, which a replay (from a fresh context) does not have, so they may differ there"
    ]
    report = await replay_transcript(local, exported.transcript)
    assert [cell.number for cell in report.divergences] == [4]  # as the note says


async def test_a_replay_starts_where_the_context_was_created(local: Backend) -> None:
    """QA: the export recorded the cwd after the last run, so a context whose cells
    changed directory (or that was created in a directory that did not exist) diverged
    from its own recording when replayed; a fork's history starts where its origin's did."""
    sandbox = local.sandbox("moving")
    interpreter = sandbox.interpreter
    await sandbox.mkdir("sub")
    moved = await interpreter.create_code_context("PERL")
    missing = await interpreter.create_code_context("PERL", "/workspace/nowhere")
    where = "use Cwd; getcwd()"
    for context, cells in [(moved, [where, f'chdir "sub"; {where}']), (missing, [where])]:
        for code in cells:
            await interpreter.run_code(code, context=context)
    fork = await interpreter.fork_code_context(moved)
    await interpreter.run_code(where, context=fork)

    for context, start in [(moved, "/workspace"), (missing, "/workspace/nowhere"),
                           (fork, "/workspace")]:  # fmt: skip
        exported = await export_context(local, "moving", context.id, with_files=True)
        assert exported.transcript.context.cwd == start
        report = await replay_transcript(local, exported.transcript)
        assert report.divergences == [], report.divergences


async def test_a_context_stored_before_its_start_was_kept_says_so(tmp_path: Path) -> None:
    """A store written before the starting cwd was kept exports the cwd it has now, and
    says that its first runs may not have had it (found in review)."""
    import sqlite3

    from workbench.paths import DATABASE_NAME

    require_engine("perl")
    data = tmp_path / "data"
    async with open_local_backend(data, embedded=True) as backend:
        context = await backend.sandbox("old").interpreter.create_code_context("PERL")
        await backend.sandbox("old").interpreter.run_code("1", context=context)
    database = next(data.rglob(DATABASE_NAME))
    with sqlite3.connect(database) as connection:
        ((value,),) = connection.execute("SELECT value FROM contexts").fetchall()
        stored = json.loads(value)
        del stored["startCwd"]
        connection.execute("UPDATE contexts SET value = ?", (json.dumps(stored),))
    async with open_local_backend(data, embedded=True) as backend:
        exported = await export_context(backend, "old", context.id)
    assert exported.transcript.context.cwd == "/workspace"
    assert exported.replay_notes == [
        "the backend does not say where the context started (a context stored before that "
        "was kept, or an older serve): the transcript starts in its cwd now, /workspace, "
        "which its first runs may not have had"
    ]


def _scratch_sandboxes(env: dict[str, str]) -> list[str]:
    listed = run_cli(env, "sandboxes", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    ids = [sandbox["id"] for sandbox in json.loads(listed.stdout)["sandboxes"]]
    return [sandbox_id for sandbox_id in ids if sandbox_id.startswith("replay-")]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_replay_stopped_by_sigterm_or_sighup_removes_its_scratch_sandbox(
    tmp_path: Path, python_engine: None, stop: signal.Signals
) -> None:
    """`replay` runs in a scratch sandbox it destroys when it ends; stopped with SIGTERM
    (a service manager, `timeout`, a CI job's end) or SIGHUP (its terminal closed) it
    ended where it stood and left the sandbox behind. Now either ends it as Ctrl+C does:
    cleaned up, exit 128 + the signal."""
    env = cli_env(tmp_path)
    transcript = tmp_path / "slow.json"
    # The scratch sandbox is listed once its first run is stored: then the second runs.
    first = {"code": "x = 1", "outcome": {"results": []}}
    cell = {"code": "import time\ntime.sleep(60)", "outcome": {"results": []}}
    context = {"binding": "PYTHON", "language": "python", "cwd": "/workspace", "envVars": {}}
    transcript.write_text(
        json.dumps(
            {
                "format": "sandbox-workbench-transcript",
                "version": 1,
                "context": context,
                "cells": [first, cell],
            }
        )
    )
    replay = subprocess.Popen(
        [str(SCRIPT), "replay", str(transcript)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not _scratch_sandboxes(env):
            assert replay.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.0)  # its second cell is running
        replay.send_signal(stop)
        _, stderr = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.wait()
    assert replay.returncode == 128 + stop, (_, stderr)
    assert b"Traceback" not in stderr
    assert _scratch_sandboxes(env) == []


async def test_a_transcript_replays_in_its_language_whatever_its_binding_runs(
    local: Backend,
) -> None:
    """A hand-edited `"binding": "PERL", "language": "python"` replayed its Python cells
    as Perl (QA): the language decides, as binding names are a deployment's own (found in
    review), and a language the backend does not run is refused."""
    require_engine("python")
    mismatched = with_change(("context", "language"), "python")
    mismatched["workspace"] = None
    mismatched["cells"] = [{"code": "6 * 7", "outcome": {"results": [{"text": "42"}]}}]
    report = await replay_transcript(local, parse_transcript(mismatched))
    assert report.binding == "PYTHON" and report.divergences == []
    with pytest.raises(ReplayError) as refused:
        await replay_transcript(local, parse_transcript(with_change(("context",), {
            "binding": "PERL", "language": "cobol", "cwd": "/workspace", "envVars": {}
        })))  # fmt: skip
    assert str(refused.value).startswith("local offers no runtime 'cobol' (it offers: ")


async def test_a_cell_recorded_at_its_time_limit_is_replayed_under_it(local: Backend) -> None:
    """A run stopped by `run --timeout 1` replayed under the backend's 30 s, ran to its end
    and diverged (or waited the whole limit for a loop; QA). Its replay has its limit."""
    require_engine("python")
    sandbox = local.sandbox("limited")
    interpreter = sandbox.interpreter
    context = await interpreter.create_code_context("PYTHON")
    late = "import time\ntime.sleep(3)\nprint('late')"
    stopped = await interpreter.run_code(late, context=context, timeout=1)
    assert stopped.error is not None
    assert timed_out_after(stopped.error.name, stopped.error.message) == 1.0
    await interpreter.run_code("6 * 7", context=context)
    exported = await export_context(local, "limited", context.id)
    started = time.monotonic()
    report = await replay_transcript(local, exported.transcript)
    assert report.divergences == [], report.divergences
    assert time.monotonic() - started < 3
    messages = [
        "Execution timed out after 0.5 s",
        "Execution timed out after 30 s",
        "Execution timed out after 2e+05 s",  # past a day
        "Execution timed out after 0 s",
        "Execution timed out after 2 s!",
        "Execution fuel exhausted",
    ]
    seconds = [timed_out_after("ExecutionLimitError", message) for message in messages]
    assert seconds == [0.5, 30.0, None, None, None, None]
    assert timed_out_after("EngineError", "Execution timed out after 2 s") is None


def test_a_hand_made_outcome_past_what_a_run_prints_is_shown_clipped(tmp_path: Path) -> None:
    """A transcript's recorded stdout of 20 MiB reached the terminal whole, from `replay`
    and the pytest plugin (QA): what is shown of an outcome stops past what a run can
    print, and says how much more there is."""
    require_engine("perl")
    huge = "A" * (20 << 20)
    lines = outcome_lines(Outcome(stdout=("small", huge, "after")))
    assert lines[0] == "stdout | small"
    assert len(lines) == 3 and len(lines[1]) == SHOWN_OUTCOME_CHARS - len(lines[0])
    hidden = len(huge) + len("stdout | ") * 2 + len("after") - len(lines[1])
    assert lines[2] == f"… {hidden:,} more characters, more than a run prints, not shown"
    real = Outcome(stdout=tuple("x" * 160 for _ in range(200)), results=(ResultEntry("1"),))
    assert "more characters" not in outcome_lines(real)[-1]

    transcript = copy.deepcopy(GOOD)
    transcript["workspace"] = None
    transcript["cells"] = [{"code": "1", "outcome": {"stdout": [huge], "results": []}}]
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(transcript))
    replayed = run_cli(cli_env(tmp_path), "replay", str(path))
    assert replayed.returncode == 1, replayed.stderr
    assert len(replayed.stdout) < 2 * SHOWN_OUTCOME_CHARS
    assert "more characters, more than a run prints, not shown" in replayed.stdout
