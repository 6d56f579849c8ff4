"""The CLI's error boundary: every expected failure is one `error:` line and an exit code
(0 ok, 1 guest error or failure, 2 usage, 3 backend unreachable or unusable, 4 not
found); `--debug` or $SANDBOX_WORKBENCH_DEBUG shows the traceback."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.cli import ROOT, SCRIPT, cli_env, one_error_line, run_cli, serving
from tests.conftest import require_engine
from tests.loopback import loopback_server


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_help_documents_the_exit_codes(tmp_path: Path) -> None:
    shown = run_cli(cli_env(tmp_path), "--help").stdout
    assert "Exit codes:" in shown
    for line in ("0  ok", "2  usage or configuration error", "4  not found: a /workspace file"):
        assert line in shown


def test_config_values_of_the_wrong_type_name_key_and_file(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TOKEN="x")
    path = write_config(tmp_path, "profiles = 3\n")
    refused = run_cli(env, "profiles", "list")
    assert refused.returncode == 2
    assert one_error_line(refused) == (
        f"error: {path}: profiles must be a table, not an integer (3); fix or remove it"
    )
    write_config(tmp_path, '[profiles.staging]\nurl = "https://gw.example"\ntoken_env = 5\n')
    for args in (("profiles", "list"), ("sandboxes", "list", "-p", "staging")):
        refused = run_cli(env, *args)
        assert refused.returncode == 2
        assert one_error_line(refused) == (
            f"error: {path}: profiles.staging.token_env must be a string, not an integer (5); "
            "fix or remove it"
        )
    write_config(tmp_path, "[ui]\ntheme = [1]\n")
    assert "ui.theme must be a string, not an array" in one_error_line(
        run_cli(env, "profiles", "list")
    )
    write_config(tmp_path, "not toml at all [\n")
    assert f"cannot read {path}" in one_error_line(run_cli(env, "profiles", "list"))
    # TOML's parser recurses once per level: 600 levels were a RecursionError, "a bug".
    write_config(tmp_path, "x = " + "[" * 600 + "]" * 600 + "\n")
    assert one_error_line(run_cli(env, "profiles", "list")) == (
        f"error: cannot read {path}: it nests too deeply"
    )


def test_a_broken_config_is_named_once_on_the_local_profile(tmp_path: Path) -> None:
    """The local profile needs no config, so it goes on, but says the file is broken."""
    env = cli_env(tmp_path)
    path = write_config(tmp_path, "profiles = 3\n")
    listed = run_cli(env, "--no-daemon", "sandboxes", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == (
        f"warning: {path}: profiles must be a table, not an integer (3); fix or remove it "
        "(the local profile goes on without it)\n"
    )


def test_an_unreadable_local_store_is_exit_3_and_debug_shows_why(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    database = tmp_path / "data" / "workbench.sqlite3"
    database.parent.mkdir(parents=True)
    database.write_bytes(b"this is not a database, " * 100)
    corrupt = run_cli(env, "sandboxes", "list")
    assert corrupt.returncode == 3
    assert one_error_line(corrupt) == (
        f"error: cannot open the local store {database}: file is not a database; "
        "move the file aside or use another --data-dir"
    )
    for debug_env, args in (({}, ("--debug",)), ({"SANDBOX_WORKBENCH_DEBUG": "1"}, ())):
        traced = run_cli({**env, **debug_env}, *args, "sandboxes", "list")
        assert traced.returncode == 3
        assert "Traceback (most recent call last)" in traced.stderr
        assert "sqlite3.DatabaseError: file is not a database" in traced.stderr

    database.unlink()
    with sqlite3.connect(database) as newer:
        newer.execute("PRAGMA user_version = 99")
    newer.close()
    refused = run_cli(env, "files", "ls", "box")
    assert refused.returncode == 3
    assert "has schema version 99" in one_error_line(refused)


def test_serve_on_a_busy_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_cli(cli_env(tmp_path), "serve", "--port", str(port))
    assert busy.returncode == 1
    assert one_error_line(busy) == (
        f"error: port {port} on 127.0.0.1 is already in use (another `serve`?): stop that "
        "server or choose another --port (0 picks a free one)"
    )


@contextmanager
def gateway_answering(body: bytes, status: int = 200) -> Iterator[str]:
    """A loopback HTTP server that answers every request with `body`."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(Handler) as url:
        yield url


def test_out_of_range_numbers_and_undecodable_code_are_usage_errors(tmp_path: Path) -> None:
    """Each ended in "unexpected …" (OverflowError, UnicodeDecodeError) or, for a port past
    65535, in serve listening on another port; a code file's byte order mark was a guest's
    syntax error."""
    env = cli_env(tmp_path)
    binary = tmp_path / "code.bin"
    binary.write_bytes(b"print(1)\n\xad\xff")
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf6 * 7\n")  # some editors start UTF-8 files so: not code
    require_engine("python")
    ran = run_cli(env, "run", "-l", "python", str(bom))
    assert (ran.returncode, ran.stdout) == (0, "42\n"), ran.stderr
    piped = run_cli(env, "run", "-l", "python", "-", stdin="\ufeff6 * 7\n")
    assert (piped.returncode, piped.stdout) == (0, "42\n"), piped.stderr
    run_cli(env, "daemon", "stop")
    for args, expected in [
        (("run", "-l", "python", str(binary)), "not UTF-8 text (byte 0xad at offset 9)"),
        (("serve", "--port", "99999", "--token", "t" * 20), "99999 is not in the range"),
        (("serve", "--port", "-1", "--token", "t" * 20), "-1 is not in the range"),
        (("daemon", "logs", "-n", "9" * 20), "is not in the range"),
        (("watch", str(tmp_path), "--once", "--debounce", "nan"), "nan is not a number"),
        (("watch", str(tmp_path), "--once", "--debounce", "-1"), "is not in the range"),
    ]:
        refused = run_cli(env, *args)
        assert refused.returncode == 2 and expected in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stderr


def test_code_and_files_too_large_are_refused_before_they_are_read_whole(
    tmp_path: Path,
) -> None:
    """`run` of `/dev/zero` (a file or stdin) and `files put` of it read until memory ran
    out; now they read one byte past the limit, refuse, and start no daemon."""
    env = cli_env(tmp_path)
    big = tmp_path / "big.pl"
    big.write_text("#" * 5_000_000)
    for args in (("run", "-b", "PERL", str(big)), ("run", "-s", "box", "-b", "PERL", "/dev/zero")):
        refused = run_cli(env, *args)
        assert refused.returncode == 2
        assert one_error_line(refused).endswith(" is over 65,536 bytes: a run takes no more")
    with Path("/dev/zero").open("rb") as zeros:
        from_stdin = subprocess.run(
            [str(SCRIPT), "run", "-b", "PERL", "-"],
            stdin=zeros,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert from_stdin.returncode == 2
    assert one_error_line(from_stdin) == "error: stdin is over 65,536 bytes: a run takes no more"
    refused = run_cli(env, "files", "put", "box", "/dev/zero", "/workspace/zeros")
    assert refused.returncode == 2
    assert one_error_line(refused) == (
        "error: /dev/zero is over 1,048,576 bytes: a workspace file holds at most 1 MiB"
    )
    assert not (tmp_path / "data").exists()  # nothing was sent


def test_a_code_file_s_line_ends_are_read_as_text_mode_reads_them(tmp_path: Path) -> None:
    """Reading code as bytes (to bound it) sent a CRLF file's carriage returns to the
    guest, where they end up in its strings (found by a review)."""
    require_engine("perl")
    env = cli_env(tmp_path)
    script = tmp_path / "crlf.pl"
    script.write_bytes(b'my $text = "one\r\ntwo";\r\nlength $text\r')
    try:
        for source, stdin in ((str(script), None), ("-", script.read_bytes().decode())):
            ran = run_cli(env, "run", "-b", "PERL", "--json", source, stdin=stdin)
            assert ran.returncode == 0, ran.stderr
            answer = json.loads(ran.stdout)
            assert answer["code"] == 'my $text = "one\ntwo";\nlength $text\n'
            assert answer["results"] == [{"text": "7"}]
    finally:
        run_cli(env, "daemon", "stop")


def test_code_at_the_size_limit_in_any_script_fits_the_daemon_s_body_cap(
    tmp_path: Path,
) -> None:
    """64 KiB of code of three-byte characters is a 96 KiB body only as UTF-8 JSON (as
    httpx sends it); escaped as `\\uXXXX` it was twice that, refused as too large."""
    require_engine("python")
    env = cli_env(tmp_path)
    code = tmp_path / "wide.py"
    code.write_text("len('" + "中" * 21_840 + "')", encoding="utf-8")
    assert 65_000 < code.stat().st_size <= 65_536
    try:
        ran = run_cli(env, "run", "-l", "python", str(code))
        assert (ran.returncode, ran.stdout.strip(), ran.stderr) == (0, "21840", "")
    finally:
        run_cli(env, "daemon", "stop")


def test_a_file_past_the_workspace_limit_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    """`files put` of more than 1 MiB names the workspace's limit (past about 1.5 MiB the
    base64 body would be refused unread, as `Request too large`)."""
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_NO_DAEMON="1")
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * 3_000_000)
    refused = run_cli(env, "files", "put", "box", str(big))
    assert refused.returncode == 2
    assert one_error_line(refused) == (
        f"error: {big} is over 1,048,576 bytes: a workspace file holds at most 1 MiB"
    )
    exactly = tmp_path / "exactly.bin"
    exactly.write_bytes(b"\0" * 1_048_576)
    assert run_cli(env, "files", "put", "box", str(exactly)).returncode == 0


def test_malformed_gateway_answers_are_exit_3(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TOKEN="t" * 20)
    answers = [
        b'{"sandboxes": [{"id": "a"}]}',  # entries without their fields
        b'{"sandboxes": 5}',
        b"[1, 2, 3]",
    ]
    for body in answers:
        with gateway_answering(body) as url:
            run_cli(env, "profiles", "add", "odd", "--url", url, "--token-env", "TOKEN", "--force")
            listed = run_cli(env, "sandboxes", "list", "-p", "odd")
            assert listed.returncode == 3, listed.stderr
            line = one_error_line(listed)
            assert line.startswith(
                f"error: the gateway at {url} sent an answer this workbench does not understand"
            )


def test_a_token_no_header_can_carry_is_refused_without_showing_it(tmp_path: Path) -> None:
    """A token pasted with its line end went into the header, and httpx's refusal printed
    it ("Illegal header value b'Bearer …\\n'"); a non-ASCII one was "a bug"."""
    secret = "SECRET123TOKEN"
    with gateway_answering(b'{"sandboxes": []}') as url:
        for token in (f"{secret}\n", f"{secret} ", f"{secret}\u2713"):
            env = cli_env(tmp_path, TOKEN=token)
            run_cli(env, "profiles", "add", "odd", "--url", url, "--token-env", "TOKEN", "--force")
            listed = run_cli(env, "sandboxes", "list", "-p", "odd")
            assert listed.returncode == 2, listed.stderr
            assert one_error_line(listed) == (
                "error: profile 'odd': its token (environment variable TOKEN) holds a space, "
                "a line end or a character outside visible ASCII, which no gateway can match"
            )
            assert secret not in listed.stdout + listed.stderr


def test_answers_that_cannot_be_read_are_exit_3_and_say_why(tmp_path: Path) -> None:
    """A body not JSON (a proxy's page, a wrong URL) was "HTTP 200: OK (INTERNAL_ERROR)",
    exit 1, or for a 404 "not found" (exit 4); a bare 401 gave no hint of the token."""
    env = cli_env(tmp_path, TOKEN="t" * 20)
    understand = "sent an answer this workbench does not understand"
    for status, expected in [
        (200, f"{understand} (HTTP 200 OK with a body not JSON)"),
        (404, f"{understand} (HTTP 404 Not Found with a body not JSON)"),
        (401, "refused the request (HTTP 401 Unauthorized with a body not JSON)"),
    ]:
        with gateway_answering(b"<html>no</html>", status) as url:
            run_cli(env, "profiles", "add", "odd", "--url", url, "--token-env", "TOKEN", "--force")
            listed = run_cli(env, "sandboxes", "list", "-p", "odd")
            assert listed.returncode == 3, listed.stderr
            line = one_error_line(listed)
            assert line.startswith(f"error: the gateway at {url} {expected}"), line
            if status == 401:
                assert line.endswith(": check the profile's token")


def test_a_malformed_execution_answer_is_exit_3_with_what_was_wrong(tmp_path: Path) -> None:
    """`run` checked an execution answer's shape without saying why, so the CLI took it
    for one of its own errors (exit 1, "Invalid sandbox response"), not the gateway's."""
    env = cli_env(tmp_path, TOKEN="t" * 20)
    with gateway_answering(b'{"results": "not a list"}') as url:
        run_cli(env, "profiles", "add", "odd", "--url", url, "--token-env", "TOKEN", "--force")
        for sandbox in (("-s", "box"), ()):
            ran = run_cli(env, "run", *sandbox, "-b", "PYTHON", "-c", "1+1", "-p", "odd")
            assert ran.returncode == 3, ran.stderr
            line = one_error_line(ran)
            assert line.startswith(f"error: the gateway at {url} sent an answer"), line
            assert "an execution's answer needs a results list" in line


def test_keyring_failures_are_one_line(tmp_path: Path) -> None:
    env = cli_env(tmp_path, PYTHON_KEYRING_BACKEND="tests.cli.BrokenKeyring")
    write_config(tmp_path, '[profiles.k]\nurl = "https://gw.example"\ntoken_keyring = true\n')
    read = run_cli(env, "sandboxes", "list", "-p", "k")
    assert read.returncode == 2
    assert one_error_line(read) == (
        "error: the OS keyring failed to read the token of profile 'k': "
        "the keyring daemon is not answering"
    )
    stored = run_cli(
        env,
        "profiles",
        "add",
        "j",
        "--url",
        "https://gw.example",
        "--keyring",
        "--token-stdin",
        stdin="a-token\n",
    )
    assert stored.returncode == 1
    assert "the OS keyring failed to store the token of profile 'j'" in one_error_line(stored)
    none = run_cli(
        {**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"},
        "sandboxes",
        "list",
        "-p",
        "k",
    )
    assert none.returncode == 2
    assert "no OS keyring is available here" in one_error_line(none)
    # Piped, without --token-stdin: no prompt that warns it may echo, and a keyring that
    # is not there is said before a token is read (QA).
    no_keyring = {**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    add = ("profiles", "add", "x5", "--url", "https://gw.example", "--keyring")
    piped = run_cli(no_keyring, *add, stdin="a-token\n")
    assert piped.returncode == 1
    assert one_error_line(piped).startswith("error: no OS keyring is available here")
    assert "Warning" not in piped.stderr and "Token:" not in piped.stderr
    file_keyring = {
        **env,
        "PYTHON_KEYRING_BACKEND": "tests.cli.FileKeyring",
        "TEST_KEYRING_FILE": str(tmp_path / "keyring.json"),
    }
    kept = run_cli(file_keyring, *add, stdin="a-token\n")
    assert kept.returncode == 0, kept.stderr
    assert "token from OS keyring" in kept.stdout and "Token:" not in kept.stderr


def test_not_found_is_exit_4_and_auth_failure_exit_3(tmp_path: Path) -> None:
    require_engine("python")
    env = cli_env(tmp_path)
    missing_file = run_cli(env, "files", "cat", "box", "nope.txt")
    assert missing_file.returncode == 4
    assert "FILE_NOT_FOUND" in one_error_line(missing_file)
    missing_context = run_cli(env, "run", "-s", "box", "--context", "nope", "-c", "1")
    assert missing_context.returncode == 4
    assert "CONTEXT_NOT_FOUND" in one_error_line(missing_context)

    token = "test-token-0123456789"
    env = {**env, "SANDBOX_WORKBENCH_TOKEN": token, "WRONG": "w" * 20}
    with serving(env, "--data-dir", str(tmp_path / "served")) as (_, url):
        run_cli(env, "profiles", "add", "dev", "--url", url, "--token-env", "WRONG")
        refused = run_cli(env, "sandboxes", "list", "-p", "dev")
    assert refused.returncode == 3
    assert one_error_line(refused) == (
        "error: Missing or invalid bearer token (UNAUTHORIZED, HTTP 401): check the profile's token"
    )


CTRL_C_WHILE_IMPORTING = """
import builtins, sys
real_import = builtins.__import__

import importlib
real_import_module = importlib.import_module
target = sys.argv[1]

def interrupted(name, *args, **kwargs):  # Ctrl+C lands while the CLI imports its modules
    if name == target:
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)

def interrupted_module(name, *args, **kwargs):  # or a command's own (imported lazily)
    if name == target:
        raise KeyboardInterrupt
    return real_import_module(name, *args, **kwargs)

builtins.__import__ = interrupted
importlib.import_module = interrupted_module
sys.argv = ["sandbox-workbench", "sandboxes", "list"]
from workbench.__main__ import run
run()
"""


@pytest.mark.parametrize("module", ["workbench.cli.main", "workbench.cli.sandbox_commands"])
def test_ctrl_c_while_the_cli_imports_exits_130_without_a_traceback(
    tmp_path: Path, module: str
) -> None:
    """The command's first tenth of a second is imports: a Ctrl+C there printed Python's
    traceback (or click's "Aborted!" in a command's own modules). Now it ends the command
    as a Ctrl+C anywhere else does."""
    completed = subprocess.run(
        [sys.executable, "-c", CTRL_C_WHILE_IMPORTING, module],
        env=cli_env(tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (completed.returncode, completed.stdout, completed.stderr) == (130, "", "")


def test_the_command_and_python_m_start_the_same_entry() -> None:
    """`sandbox-workbench` (the installed script) and `python -m workbench` both start
    through the entry that handles that Ctrl+C."""
    assert "from workbench.__main__ import run" in SCRIPT.read_text()
    completed = subprocess.run(
        [sys.executable, "-m", "workbench", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0 and "version" in completed.stdout, completed.stderr
