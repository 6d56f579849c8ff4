"""Guest- and sandbox-controlled text cannot send escape sequences to the user's terminal.

The CLI runs as the real console script with stdout/stderr on a pseudo-terminal; the
same commands piped, and with --json, must stay byte-exact.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_engine
from workbench.api.display import neutralise

CONSOLE_SCRIPT = str(Path(sys.executable).with_name("sandbox-workbench"))
OSC52 = "\x1b]52;c;SGVsbG8=\x07"
"""Sets the terminal's clipboard to "Hello"."""
OUR_COLOURS = re.compile(rb"\x1b\[(?:31|33|0)m")
"""The SGR codes the CLI itself adds on a terminal (red errors, yellow warnings, reset)."""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }


def on_terminal(env: dict[str, str], *args: str) -> tuple[int, bytes]:
    """Run the CLI with stdout and stderr on one pseudo-terminal; its exit code and what
    the terminal received (with the line discipline's \\r\\n turned back into \\n)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [CONSOLE_SCRIPT, *args],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    received = bytearray()
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            received += chunk
    finally:
        os.close(controller)
    return process.wait(timeout=120), bytes(received).replace(b"\r\n", b"\n")


def piped(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [CONSOLE_SCRIPT, *args], input=stdin, capture_output=True, env=env, timeout=120
    )


def test_neutralise_makes_every_control_character_visible() -> None:
    controls = [chr(code) for code in [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F]]
    controls += [chr(code) for code in range(0x80, 0xA0)]
    for control in controls:
        assert neutralise(f"a{control}b") == f"a\\x{ord(control):02x}b"
    # The bidi controls that reorder what follows them (QA), as `\\uNNNN`; the marks
    # right-to-left text needs (U+200E, U+200F) and the zero-width joiners stay.
    for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]:
        assert neutralise(f"a{chr(code)}b") == f"a\\u{code:04x}b"
    kept = "tab\tnew\nline é ü 日本 🙂 no-break\xa0space ~ \u200e\u200f\u200d שלום"
    assert neutralise(kept) == kept
    assert neutralise(OSC52) == "\\x1b]52;c;SGVsbG8=\\x07"


def test_run_stdout_on_a_terminal_carries_no_escape(env: dict[str, str]) -> None:
    require_engine("python")
    code = f"print({OSC52!r}); print('\\x1b[2J\\x9b31m\\rred')"
    status, received = on_terminal(env, "run", "-l", "python", "-c", code)
    assert status == 0, received
    assert b"\x1b" not in received
    assert "\x9b" not in received.decode()  # nor the 8-bit CSI
    assert received == b"\\x1b]52;c;SGVsbG8=\\x07\n\\x1b[2J\\x9b31m\\x0dred\n"


def test_run_stderr_error_and_traceback_on_a_terminal(env: dict[str, str]) -> None:
    require_engine("python")
    code = (
        "import sys\n"
        "print('\\x1b]0;title\\x07', file=sys.stderr)\n"
        "raise ValueError('\\x1b]52;c;SGVsbG8=\\x07')"
    )
    status, received = on_terminal(env, "run", "-l", "python", "-c", code)
    assert status == 1, received
    assert b"\x1b" not in OUR_COLOURS.sub(b"", received)
    text = received.decode()
    assert "\\x1b]0;title\\x07\n" in text
    assert "ValueError: \\x1b]52;c;SGVsbG8=\\x07" in text


def test_run_piped_and_json_stay_exact(env: dict[str, str]) -> None:
    require_engine("python")
    code = (
        f"import sys; print({OSC52!r}); print('\\x1b[31mred\\x9b'); "
        "print('\\x1b]0;t\\x07', file=sys.stderr)"
    )
    plain = piped(env, "run", "-l", "python", "-c", code)
    assert plain.returncode == 0
    assert plain.stdout == f"{OSC52}\n\x1b[31mred\x9b\n".encode()
    assert plain.stderr == b"\x1b]0;t\x07\n"
    as_json = piped(env, "run", "-l", "python", "--json", "-c", code)
    assert json.loads(as_json.stdout)["logs"]["stdout"] == [OSC52, "\x1b[31mred\x9b"]
    status, received = on_terminal(env, "run", "-l", "python", "--json", "-c", code)
    assert status == 0, received
    assert b"\x1b" not in received  # JSON escapes C0 controls as \u001b
    assert json.loads(received)["logs"]["stdout"] == [OSC52, "\x1b[31mred\x9b"]


def test_files_ls_and_cat_on_a_terminal_and_piped(env: dict[str, str]) -> None:
    evil_name = "/workspace/n\x1b]0;evil\x07.txt"
    content = f"a{OSC52}\n\u009b\n".encode() + b"\x9b\xff\x1b[2J"
    assert piped(env, "files", "put", "demo", "-", evil_name, stdin=content).returncode == 0

    status, listing = on_terminal(env, "files", "ls", "demo")
    assert status == 0, listing
    assert b"\x1b" not in listing
    assert listing.endswith(b"  n\\x1b]0;evil\\x07.txt\n")
    assert piped(env, "files", "ls", "demo").stdout.endswith(f"  {evil_name[11:]}\n".encode())

    status, shown = on_terminal(env, "files", "cat", "demo", evil_name)
    assert status == 0, shown
    assert shown == b"a\\x1b]52;c;SGVsbG8=\\x07\n\\x9b\n\\x9b\\xff\\x1b[2J"
    assert piped(env, "files", "cat", "demo", evil_name).stdout == content

    # What a file command says of a path is one line on a terminal (QA: the newline of a
    # name written by `files put` began a line of its own).
    for command in (
        ("files", "put", "demo", "-", "two\nlines.txt"),
        ("files", "mkdir", "demo", "dir\nname"),
        ("files", "rm", "demo", "two\nlines.txt"),
    ):
        status, said = on_terminal(env, *command)
        assert status == 0, said
        assert b"\\x0a" in said and not re.search(rb"^(lines|name)", said, re.M), said
    status, said = on_terminal(env, "files", "cat", "demo", "no\nsuch.txt")  # an error too
    assert status == 4 and said.startswith(b"error: ") and said.count(b"\n") == 1, said


def test_a_reader_that_stops_early_ends_the_command_quietly(env: dict[str, str]) -> None:
    """`run … | head -1`: the lines stream while the daemon answers, and the closed pipe
    is the reader's doing: no `error:` line blaming the daemon, the exit code of a
    Python tool whose stdout broke (1)."""
    require_engine("perl")
    process = subprocess.Popen(
        [CONSOLE_SCRIPT, "run", "-s", "box", "-b", "PERL", "-c", 'print "x\\n" x 20000'],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == b"x\n"
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=60) == 1
    assert stderr == b"", stderr


def test_a_transcript_exported_to_a_terminal_stays_valid_json(env: dict[str, str]) -> None:
    """`transcript export -o -` printed JSON through the text path, whose `\\x9b` and
    `\\x7f` are no JSON escapes: what a terminal showed did not parse (found by an attack
    review). JSON goes out as `echo_json` writes it."""
    require_engine("perl")
    ran = piped(env, "run", "-s", "box", "-b", "PERL", "--json", "-c", 'print "a\\x{9b}b\\x7f"; 1')
    assert ran.returncode == 0, ran.stderr
    context_id = json.loads(ran.stdout)["context"]["id"]
    try:
        for file_format in ("json", "transcript", "ipynb"):
            status, shown = on_terminal(
                env, "transcript", "export", "-s", "box", "--context", context_id, "-o", "-",
                "--format", file_format,
            )  # fmt: skip
            assert status == 0, shown
            assert b"\x1b" not in shown and b"\xc2\x9b" not in shown
            assert "a\x9bb\x7f" in json.dumps(json.loads(shown), ensure_ascii=False)
    finally:
        piped(env, "daemon", "stop")
