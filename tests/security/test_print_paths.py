"""Every line the workbench prints to a terminal goes through one neutralising helper
(`workbench.cli.terminal` for the CLI, `workbench.api.display.warn_untrusted` for the
headless rooms): a new print path that bypasses them fails here, and each path a review
found printing raw text shows an OSC sequence as a visible escape under a pty."""

from __future__ import annotations

import ast
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRINT_HELPERS = {"workbench/cli/terminal.py", "workbench/api/display.py"}
ALLOWED = {
    # Under --debug only: the traceback a user asked for.
    ("workbench/cli/errors.py", "traceback.print_exception"),
    # Rich tables and progress bars of our own text (engine names, states, sizes).
    ("workbench/cli/engine_commands.py", "Console"),
    ("workbench/cli/progress.py", "Console"),
}
OSC = "\x1b]0;PWNED\x07"


def printing_calls(tree: ast.AST) -> list[str]:
    """The calls in `tree` that write to a terminal stream."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name in ("print", "click.echo", "click.secho", "traceback.print_exception"):
            found.append(name)
        elif name in ("Console", "rich.console.Console"):
            found.append("Console")
        elif name.endswith(".write") and any(
            stream in name for stream in ("sys.stdout", "sys.stderr", "sys.__stdout__")
        ):
            found.append(name)
    return found


def test_nothing_prints_around_the_neutralising_helpers() -> None:
    offenders = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in PRINT_HELPERS or relative.startswith("workbench/tui/"):
            continue  # the TUI paints through Textual, neutralised in workbench/tui/untrusted.py
        for call in printing_calls(ast.parse(path.read_text(), relative)):
            if (relative, call) not in ALLOWED:
                offenders.append(f"{relative}: {call}")
    assert offenders == []


def test_the_scan_sees_each_kind_of_print() -> None:
    source = "print(1)\nclick.echo(2)\nsys.stderr.write('x')\nsys.stdout.buffer.write(b'')\n"
    assert printing_calls(ast.parse(source)) == [
        "print",
        "click.echo",
        "sys.stderr.write",
        "sys.stdout.buffer.write",
    ]


def run_in_pty(args: list[str], env: dict[str, str]) -> str:
    """What the command wrote to its terminal (stdout and stderr are the pty)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=ROOT
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def private_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
        "SANDBOX_WORKBENCH_RUNTIME_DIR": str(tmp_path / "run"),
        "SANDBOX_WORKBENCH_NO_DAEMON": "1",
    }


def test_an_error_line_quoting_a_transcript_shows_no_escape(tmp_path: Path) -> None:
    """The CLI's `error:` line, here naming a transcript whose file name holds an OSC."""
    transcript = tmp_path / f"t{OSC}.json"
    transcript.write_text("not json")
    script = str(Path(sys.executable).with_name("sandbox-workbench"))
    shown = run_in_pty([script, "replay", str(transcript)], private_env(tmp_path))
    assert "error: bad transcript" in shown and "\\x1b]0;PWNED\\x07" in shown
    assert "\x1b]" not in shown and "\x07" not in shown


@pytest.mark.parametrize(
    ("content", "problem"),
    [("1" * 5000, "digits"), ("[" * 100_000 + "]" * 100_000, "nests too deeply")],
    ids=["a 5,000-digit number", "100k nested arrays"],
)
def test_a_transcript_past_the_parser_s_limits_is_a_bad_transcript(
    tmp_path: Path, content: str, problem: str
) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(content)
    script = str(Path(sys.executable).with_name("sandbox-workbench"))
    result = subprocess.run(
        [script, "replay", str(transcript)],
        capture_output=True,
        text=True,
        env=private_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: bad transcript") and problem in result.stderr
    assert "Traceback" not in result.stderr and "a bug" not in result.stderr


def test_warn_untrusted_neutralises_on_a_terminal_only(tmp_path: Path) -> None:
    code = f"from workbench.api.display import warn_untrusted\nwarn_untrusted({OSC!r})\n"
    shown = run_in_pty([sys.executable, "-c", code], private_env(tmp_path))
    assert "\\x1b]0;PWNED\\x07" in shown and "\x1b]" not in shown
    piped = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert piped.stderr == OSC + "\n"


def test_a_watch_notice_naming_a_hostile_symlink_shows_no_escape(tmp_path: Path) -> None:
    """`watch` names a symlink it skips; the name holds an OSC sequence."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    (folder / f"link{OSC}").symlink_to(tmp_path)  # out of the folder: skipped, named
    script = str(Path(sys.executable).with_name("sandbox-workbench"))
    shown = run_in_pty(
        [script, "watch", str(folder), "--sandbox", "hostile", "--once"], private_env(tmp_path)
    )
    assert "link\\x1b]0;PWNED\\x07" in shown, shown
    assert "\x1b]" not in shown and "\x07" not in shown


def test_a_listed_name_holding_a_newline_stays_one_entry_on_a_terminal(tmp_path: Path) -> None:
    """`files ls` prints one line per entry: on a terminal a newline or tab in a guest's
    file name is escaped too; on a pipe the name is written as it is (`--json` is exact)."""
    env = private_env(tmp_path)
    script = str(Path(sys.executable).with_name("sandbox-workbench"))
    source = tmp_path / "source.txt"
    source.write_text("x")
    subprocess.run(
        [script, "files", "put", "box", str(source), "a\nb\tc.txt"], env=env, cwd=ROOT, check=True
    )
    shown = run_in_pty([script, "files", "ls", "box"], env)
    [entry] = shown.splitlines()
    assert entry.endswith("a\\x0ab\\x09c.txt"), shown
    piped = subprocess.run(
        [script, "files", "ls", "box"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert piped.stdout.endswith("a\nb\tc.txt\n"), piped.stdout
