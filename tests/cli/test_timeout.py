"""`--timeout` on `run` and `serve`, and `$SANDBOX_WORKBENCH_TIMEOUT_S`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from engines.process.child import GRACE_SECONDS
from engines.process.session import BACKSTOP_SECONDS
from tests.cli import cli_env, one_error_line, run_cli, serving
from tests.conftest import require_engine
from tests.loopback import loopback_server
from workbench.api.client import ANSWER_MARGIN

SLEEPER = "import time; time.sleep(45)"


def test_run_timeout_stops_the_guest_on_the_local_backend(tmp_path: Path) -> None:
    require_engine("python")
    env = cli_env(tmp_path)
    started = time.monotonic()
    timed_out = run_cli(env, "run", "--timeout", "1", "-l", "python", "-c", SLEEPER)
    elapsed = time.monotonic() - started
    assert timed_out.returncode == 1, timed_out.stderr
    assert "ExecutionLimitError: Execution timed out after 1 s" in timed_out.stderr
    assert elapsed < 10  # process start + 1 s, far from the 30 s default and the 45 s sleep


def test_diff_and_replay_take_a_timeout_too(tmp_path: Path) -> None:
    """`diff` and `replay` had no --timeout (QA): a loop waited the 30 s default on each
    side of a diff, and every cell of a replay."""
    require_engine("python")
    env = cli_env(tmp_path)
    started = time.monotonic()
    compared = run_cli(
        env, "diff", "--against", "local", "--timeout", "1", "-l", "python", "-c", SLEEPER
    )
    assert compared.returncode == 0, compared.stderr
    assert "Execution timed out after 1 s" in compared.stdout
    assert "same on local and local" in compared.stdout
    transcript = tmp_path / "sleeps.json"
    error = {"name": "EngineError", "message": "not what it did"}
    cells = [
        {"code": SLEEPER, "outcome": {"stdout": [], "stderr": [], "results": [], "error": error}}
    ]
    context = {"binding": "PYTHON", "language": "python", "cwd": "/workspace", "envVars": {}}
    recorded = {"format": "sandbox-workbench-transcript", "version": 1, "context": context}
    transcript.write_text(json.dumps({**recorded, "cells": cells}))
    replayed = run_cli(env, "replay", "--timeout", "1", "--json", str(transcript))
    assert replayed.returncode == 1, replayed.stderr
    (cell,) = json.loads(replayed.stdout)["cells"]
    assert cell["observed"]["error"]["message"] == "Execution timed out after 1 s"
    assert time.monotonic() - started < 20  # three runs of a second, far from three times 30 s


def test_the_reset_note_follows_the_error_it_explains(tmp_path: Path) -> None:
    require_engine("python")
    env = cli_env(tmp_path)
    timed_out = run_cli(env, "run", "-s", "kept", "--timeout", "1", "-l", "python", "-c", SLEEPER)
    assert timed_out.returncode == 1, timed_out.stderr
    lines = timed_out.stderr.splitlines()
    error = lines.index("ExecutionLimitError: Execution timed out after 1 s")
    assert lines[error + 1 :] == ["note: the interpreter was reset after this error"]


def test_bad_timeouts_are_one_line_usage_errors(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    for value in ("0", "-3", "abc", "nan", "inf", "100000"):  # past a day: the gateway's cap
        refused = run_cli(env, "run", "--timeout", value, "-l", "python", "-c", "1")
        assert refused.returncode == 2, refused.stderr
        assert "--timeout must be a positive number of seconds" in refused.stderr
    # The variable is checked by every command that opens a backend, not only `run`.
    for args in (("sandboxes", "list"), ("run", "-l", "python", "-c", "1")):
        bad_env = run_cli({**env, "SANDBOX_WORKBENCH_TIMEOUT_S": "soon"}, *args)
        assert bad_env.returncode == 2
        assert one_error_line(bad_env) == (
            "error: SANDBOX_WORKBENCH_TIMEOUT_S must be a positive number of seconds, at most "
            "86400 (a day), not 'soon'"
        )


def test_serve_timeout_is_the_engine_limit_and_run_timeout_the_client_wait(
    tmp_path: Path,
) -> None:
    require_engine("python")
    token = "test-token-0123456789"
    env = cli_env(tmp_path, DEV_TOKEN=token, SANDBOX_WORKBENCH_TOKEN=token)
    with serving(env, "--timeout", "2", "--data-dir", str(tmp_path / "served")) as (_, url):
        added = run_cli(env, "profiles", "add", "dev", "--url", url, "--token-env", "DEV_TOKEN")
        assert added.returncode == 0, added.stderr
        # The server's own limit stops the guest (the client would wait 30 s).
        limited = run_cli(env, "run", "-p", "dev", "-l", "python", "-c", SLEEPER)
        assert limited.returncode == 1
        assert "Execution timed out after 2 s" in limited.stderr
        # A shorter client wait gives up first: exit 3, the gateway keeps its limit.
        started = time.monotonic()
        waited = run_cli(env, "run", "-p", "dev", "--timeout", "0.5", "-b", "PYTHON", "-c", SLEEPER)
        assert time.monotonic() - started < 10
        assert waited.returncode == 3
        assert one_error_line(waited) == (
            f"error: the gateway at {url} did not answer in time (waited 0.5 s)"
        )


def test_a_client_waits_past_the_host_s_last_resort() -> None:
    """An engine process that does not answer is killed `BACKSTOP_SECONDS` after the
    run's deadline (its own grace first), and the run's timeout result then goes out:
    a client that gave up as early (both waited 10 s) reported "did not answer in time"
    instead."""
    assert ANSWER_MARGIN >= BACKSTOP_SECONDS + GRACE_SECONDS + 2


@contextmanager
def gateway_streaming_for_ever() -> Iterator[str]:
    """A loopback gateway whose executions stream a line of output every 0.2 s, never
    ending; its other answers are empty JSON objects."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._json(b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if not self.path.endswith("/execute"):
                self._json(b"{}")
                return
            self.send_response(200)
            self.send_header("content-type", "application/x-ndjson")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            line = b'{"type": "output", "stream": "stdout", "line": "still going"}\n'
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass  # the client gave up

        def _json(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(Handler) as url:
        yield url


def test_run_timeout_bounds_a_streamed_answer_on_a_remote_profile(tmp_path: Path) -> None:
    """Each streamed line started the wait again, so `run --timeout 2` against a gateway
    streaming for ever waited for ever (and against `serve`, until its own limit)."""
    env = cli_env(tmp_path, TOKEN="t" * 20)
    with gateway_streaming_for_ever() as url:
        run_cli(env, "profiles", "add", "streams", "--url", url, "--token-env", "TOKEN")
        context = "00000000-0000-4000-8000-000000000000"
        started = time.monotonic()
        waited = run_cli(
            env, "run", "-p", "streams", "--timeout", "2", "-s", "box", "--context", context,
            "-c", "1", timeout=30,
        )  # fmt: skip
        assert time.monotonic() - started < 15
        assert waited.returncode == 3, waited.stderr
        assert one_error_line(waited) == (
            f"error: the gateway at {url} did not answer in time (waited 2 s)"
        )
