"""`sandbox-workbench diff` through the console script, between every pair of the three
backends: local, a real `serve` process and the gateway Worker in workerd.

Also the helpers the transcript tests share: one serve process per test session and a
CLI environment whose config names the remote backends as profiles.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.cli import cli_env, one_error_line, run_cli
from tests.cli.test_conventions import output_on_a_terminal
from tests.conftest import require_engine
from tests.loopback import loopback_server
from tests.serve_process import ServeProcess, serve_process
from tests.workerd.harness import session_gateway
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.backends.remote import open_remote_backend

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("perl_engine")]

_SERVE_KEY = pytest.StashKey[ServeProcess | BaseException]()
TTL_MS = 86_400_000


@pytest.fixture
def perl_engine() -> None:
    require_engine("perl")


def session_serve(request: pytest.FixtureRequest) -> ServeProcess:
    """The session's one serve process for the diff and transcript tests (started on
    first use, stopped when the session ends)."""
    config = request.config
    existing = config.stash.get(_SERVE_KEY, None)
    if isinstance(existing, BaseException):
        pytest.fail(f"serve could not start: {existing}")
    if existing is not None:
        return existing
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    stack = contextlib.ExitStack()
    try:
        served = stack.enter_context(
            serve_process(
                factory.mktemp("diff-served"), env={"SANDBOX_WORKBENCH_IDLE_TTL_MS": str(TTL_MS)}
            )
        )
    except Exception as error:
        stack.close()
        config.stash[_SERVE_KEY] = error
        pytest.fail(f"serve could not start: {error}")
    config.add_cleanup(stack.close)
    config.stash[_SERVE_KEY] = served
    return served


def profiles_env(
    request: pytest.FixtureRequest, tmp_path: Path, *, workerd: bool = True
) -> dict[str, str]:
    """A CLI environment with the profiles `served` (the session's serve process) and,
    with `workerd`, `workerd` (the session's gateway Worker; skips without node)."""
    served = session_serve(request)
    tokens = {"SERVED_TOKEN": served.token}
    config = f'[profiles.served]\nurl = "{served.url}"\ntoken_env = "SERVED_TOKEN"\n'
    if workerd:
        gateway = session_gateway(request)
        tokens["WORKERD_TOKEN"] = gateway.token
        config += f'\n[profiles.workerd]\nurl = "{gateway.url}"\ntoken_env = "WORKERD_TOKEN"\n'
    (tmp_path / "config").mkdir(mode=0o700, exist_ok=True)
    (tmp_path / "config" / "config.toml").write_text(config)
    return cli_env(tmp_path, **tokens)


def open_profile(request: pytest.FixtureRequest, tmp_path: Path, profile: str) -> Backend:
    """The backend a `profiles_env` profile names, opened in the test (for setup and
    checks; the commands under test run through the console script)."""
    if profile == "local":  # through the daemon, which the commands use too
        return open_local_backend(tmp_path / "data")
    if profile == "served":
        served = session_serve(request)
        return open_remote_backend(profile, served.url, served.token)
    return session_gateway(request).backend(profile)


async def sandbox_ids(request: pytest.FixtureRequest, tmp_path: Path, profile: str) -> set[str]:
    async with open_profile(request, tmp_path, profile) as backend:
        return {summary.id for summary in await backend.list_sandboxes()}


PERL_CELL = 'print "hi\\n"; warn "careful\\n"; die "boom\\n"'


async def test_every_pair_of_backends_agrees_and_scratch_sandboxes_go(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = profiles_env(request, tmp_path)
    profiles = ["local", "served", "workerd"]
    for left, right in itertools.combinations(profiles, 2):
        compared = run_cli(
            env, "diff", "-p", left, "--against", right, "-l", "perl", "-c", PERL_CELL, "--json"
        )
        assert compared.returncode == 0, (left, right, compared.stdout, compared.stderr)
        report = json.loads(compared.stdout)
        assert report["same"] is True
        assert (report["left"]["profile"], report["right"]["profile"]) == (left, right)
        for side in ("left", "right"):
            assert report[side]["outcome"] == {
                "stdout": ["hi"],
                "stderr": ["careful"],
                "results": [],
                "error": {"name": "PerlError", "message": "boom"},
            }
    for profile in profiles:  # each side's scratch sandbox was destroyed
        ids = await sandbox_ids(request, tmp_path, profile)
        assert not [name for name in ids if name.startswith("diff-")]
    # Stateless runs compare too (the runtimes' own execute route on each backend).
    stateless = run_cli(
        env, "diff", "--stateless", "-p", "workerd", "--against", "local", "-b", "PERL",
        "-e", "WHO=you", "-c", 'print "hi $ENV{WHO}\\n"; 6 * 7',
    )  # fmt: skip
    assert stateless.returncode == 0, stateless.stderr
    assert stateless.stdout == "  stdout | hi you\n  result | 42\nsame on workerd and local\n"


async def test_a_difference_is_shown_as_a_diff_and_exits_1(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = profiles_env(request, tmp_path, workerd=False)
    sandbox = f"difftest-{uuid.uuid4().hex[:8]}"
    # The same sandbox id on each backend, with a different data.txt (an escape
    # sequence in one, which a terminal must not receive).
    for profile, content in (("local", "one\n"), ("served", "two\x1b[2J\n")):
        async with open_profile(request, tmp_path, profile) as backend:
            await backend.sandbox(sandbox).write_file("data.txt", content)
    cell = 'open my $f, "<", "data.txt"; print scalar <$f>; 6 * 7'
    args = ("diff", "--against", "served", "-s", sandbox, "-b", "PERL", "-c", cell)
    compared = run_cli(env, *args)
    assert compared.returncode == 1, compared.stderr
    assert compared.stdout.splitlines() == [
        "--- local",
        "+++ served",
        "@@ -1,2 +1,2 @@",
        "-stdout | one",
        "+stdout | two\x1b[2J",
        " result | 42",
        "different on local and served: stdout",
    ]
    # On a terminal: coloured, the guest's escape shown, not sent; NO_COLOR: no colour.
    shown = output_on_a_terminal(env, *args)
    assert "\x1b[31m-stdout | one" in shown and "\x1b[32m+stdout | two\\x1b[2J" in shown
    plain = output_on_a_terminal({**env, "NO_COLOR": "1"}, *args)
    assert "+stdout | two\\x1b[2J" in plain and "\x1b" not in plain
    # The given sandbox stays (its file too), with no context left behind.
    for profile in ("local", "served"):
        async with open_profile(request, tmp_path, profile) as backend:
            info = await backend.sandbox(sandbox).get_info()
            assert (info.contexts, info.workspace_files) == ([], 1)
            await backend.sandbox(sandbox).destroy()


def test_usage_and_backend_failures_are_one_line_with_their_exit_code(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    env = profiles_env(request, tmp_path, workerd=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    config = tmp_path / "config" / "config.toml"
    gone = f'\n[profiles.gone]\nurl = "{closed}"\ntoken_env = "SERVED_TOKEN"\n'
    config.write_text(config.read_text() + gone)
    cases = [
        (("diff", "--against", "served", "-c", "1"), 2, "choose exactly one of --binding"),
        (("diff", "--against", "served", "-l", "perl"), 2, "nothing to run"),
        (
            ("diff", "--against", "served", "--stateless", "-s", "x", "-l", "perl", "-c", "1"),
            2,
            "--stateless runs without a sandbox",
        ),
        (("diff", "--against", "nope", "-l", "perl", "-c", "1"), 2, "unknown profile 'nope'"),
        (("diff", "--against", "served", "-b", "COBOL", "-c", "1"), 2, "offers no runtime"),
        (("diff", "--against", "gone", "-l", "perl", "-c", "1"), 3, "connection refused"),
    ]
    for args, code, message in cases:
        failed = run_cli(env, *args)
        assert failed.returncode == code, (args, failed.stderr)
        assert message in failed.stderr, (args, failed.stderr)
        if code == 3 or "nope" in args:
            one_error_line(failed)


@pytest.mark.parametrize("dot_id", [".", ".."])
async def test_a_dot_id_against_a_gateway_is_refused_before_either_side_runs(
    request: pytest.FixtureRequest, tmp_path: Path, dot_id: str
) -> None:
    """`.` and `..` cannot travel in a gateway's URL: the local side ran first, made the
    sandbox, and only then was the gateway's side refused (QA)."""
    env = profiles_env(request, tmp_path, workerd=False)
    failed = run_cli(env, "diff", "--against", "served", "-s", dot_id, "-l", "perl", "-c", "1")
    assert failed.returncode == 2, failed.stderr
    assert "cannot travel in a gateway's URL" in one_error_line(failed)
    assert dot_id not in await sandbox_ids(request, tmp_path, "local")


class OnlyPython(BaseHTTPRequestHandler):
    """A gateway that offers a Python runtime only (and answers nothing else)."""

    def do_GET(self) -> None:
        runtimes = [{"binding": "PYTHON", "language": "python", "engine": "x", "contexts": True}]
        body = json.dumps({"runtimes": runtimes} if self.path == "/v1/runtimes" else {}).encode()
        self.send_response(200 if self.path == "/v1/runtimes" else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_a_runtime_one_side_lacks_is_refused_before_either_side_runs(
    tmp_path: Path,
) -> None:
    """The local side ran first, making the --sandbox there, and only then was the
    gateway found to lack the language (found in review)."""
    env = cli_env(tmp_path, GATEWAY_TOKEN="t" * 32)
    with loopback_server(OnlyPython) as url:
        (tmp_path / "config").mkdir(mode=0o700, exist_ok=True)
        (tmp_path / "config" / "config.toml").write_text(
            f'[profiles.python-only]\nurl = "{url}"\ntoken_env = "GATEWAY_TOKEN"\n'
            "allow_insecure_http = true\n"
        )
        failed = run_cli(
            env, "diff", "--against", "python-only", "-s", "kept", "-l", "perl", "-c", "1"
        )
    assert failed.returncode == 2, failed.stderr
    assert "Error: python-only offers no perl runtime" in failed.stderr
    async with open_local_backend(tmp_path / "data") as backend:
        assert "kept" not in {summary.id for summary in await backend.list_sandboxes()}
