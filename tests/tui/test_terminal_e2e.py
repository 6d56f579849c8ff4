"""End to end: the real `sandbox-workbench` (`python -m workbench`) in tmux, driven with
send-keys and read with capture-pane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("perl_engine")]

ROOT = Path(__file__).resolve().parents[2]


def tmux(session: str, *args: str) -> str:
    """Run tmux on a private server (socket named after the session), so a developer's
    own tmux server and its options never leak into the test."""
    completed = subprocess.run(
        ["tmux", "-L", session, *args], capture_output=True, text=True, check=True
    )
    return completed.stdout


@pytest.fixture
def session(tmp_path: Path) -> Iterator[str]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed; the end-to-end terminal test needs it")
    name = f"sbw-e2e-{uuid.uuid4().hex[:8]}"
    env = {
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
        "SANDBOX_WORKBENCH_CACHE_DIR": os.environ.get("SANDBOX_WORKBENCH_CACHE_DIR", ""),
        "TERM": "xterm-256color",
    }
    exports = " ".join(f"{key}={value!r}" for key, value in env.items() if value)
    # COLUMNS/LINES left in the environment by earlier tests would override the pane size
    command = f"cd {str(ROOT)!r} && env -u COLUMNS -u LINES {exports} {sys.executable} -m workbench"
    tmux(name, "new-session", "-d", "-s", name, "-x", "120", "-y", "40", command)
    # Pin the size: with `window-size latest` a detached window can follow another
    # client's (or the 80x24 default) size, which would push dialogs off screen.
    tmux(name, "set-window-option", "-t", name, "window-size", "manual")
    tmux(name, "resize-window", "-t", name, "-x", "120", "-y", "40")
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)
        # A killed server leaves its socket behind (hundreds piled up in /tmp/tmux-UID).
        sockets = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
        (sockets / name).unlink(missing_ok=True)


def screen(name: str) -> str:
    return tmux(name, "capture-pane", "-p", "-t", name)


def wait_for_text(name: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(name)
        if text in shown:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared; the screen shows:\n{screen(name)}")


def wait_for_absence(name: str, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text in screen(name):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} stayed; the screen shows:\n{screen(name)}")
        time.sleep(0.2)


def send(name: str, *keys: str) -> None:
    tmux(name, "send-keys", "-t", name, *keys)


def open_perl_repl(session: str) -> None:
    """Create a sandbox and a Perl context in it; the REPL's editor has the focus."""
    wait_for_text(session, "connected")
    send(session, "F2")
    wait_for_text(session, "sandbox id, e.g. my-sandbox")  # the dialog's; the footer names F2
    send(session, "-l", "e2e-box")
    send(session, "Enter")
    wait_for_text(session, "contexts (0)")  # created, loaded and selected
    send(session, "F3")
    wait_for_text(session, "New code context")
    send(session, "Enter")  # open the binding list
    wait_for_text(session, "PERL (perl)")
    send(session, "-l", "PERL")
    send(session, "Enter")  # chosen: the list closes
    wait_for_absence(session, "JAVASCRIPT (javascript)")
    send(session, "C-s")  # create, wherever the focus is (Tabs raced the closing list)
    wait_for_text(session, "code… (Enter: newline")


def test_create_sandbox_context_and_run_a_cell(session: str) -> None:
    open_perl_repl(session)
    send(session, "-l", 'print "from tmux\\n"; 6*7')
    time.sleep(0.5)
    send(session, "C-r")
    # Wait for the whole cell: "42" alone can show up elsewhere first (a clock, an id).
    wait_for_text(session, "In [1]")
    shown = wait_for_text(session, "from tmux")
    assert "42" in shown.split("In [1]", 1)[1]
    send(session, "C-q")


def test_the_run_key_runs_all_the_code_typed_before_it(session: str) -> None:
    """Code and ctrl+r in one write (a paste without bracketed paste, ssh): the cell runs
    with every character that came before the key, none left behind in the editor."""
    open_perl_repl(session)
    code = "print qq(head-marker);" + " 1;" * 150 + " print qq(\\ntail-end-marker-xyz)"
    send(session, code, "C-r")  # not `-l`: one send-keys, so the bytes arrive together
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ran = screen(session).partition("In [1]")[2]
        output = [line.strip(" │▏▕┃") for line in ran.splitlines()]
        if "tail-end-marker-xyz" in output:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the whole cell never ran; the screen shows:\n{screen(session)}")
    assert "head-marker" in ran and "In [2]" not in ran
    assert "code… (Enter: newline" in screen(session)  # the editor is empty again
    send(session, "C-q")


def test_alt_keys_work_from_the_editor_and_type_nothing(session: str) -> None:
    """tmux, like most terminals, sends alt+h as ESC h: it opens the history search and
    leaves the code alone."""
    open_perl_repl(session)
    send(session, "-l", "abc")
    wait_for_text(session, "1  abc")
    send(session, "M-h")
    wait_for_text(session, "Search history")
    send(session, "Escape")
    deadline = time.monotonic() + 10
    while "Search history" in screen(session):
        assert time.monotonic() < deadline, "the history search never closed"
        time.sleep(0.2)
    shown = screen(session)
    assert "1  abc " in shown and "abch" not in shown
    send(session, "C-q")


def test_the_inspector_opens_from_the_editor_and_lists_the_names(session: str) -> None:
    """alt+g (ESC g in tmux) from the editor opens the inspector beside the REPL; it lists
    the names the cell made, read from a copy of the context, and types nothing."""
    open_perl_repl(session)
    send(session, "-l", "our $answer = 42; our @seen = (1, 2)")
    time.sleep(0.5)
    send(session, "C-r")
    wait_for_text(session, "In [1]")
    send(session, "M-g")
    shown = wait_for_text(session, "2 names · after run 1 · a copy,")  # the line wraps
    assert "$answer" in shown and "@seen" in shown
    assert "[1,2]" in shown and "42" in shown
    assert "code… (Enter: newline" in shown  # the editor is still empty: no `g` typed
    send(session, "C-q")
