"""`sandbox-workbench watch` as a real subprocess: sync, run on change, JSON lines,
clean stop on SIGINT."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from tests.cli import cli_env, run_cli
from tests.conftest import require_engine
from workbench.backends.local import open_local_backend
from workbench.cli.main import COMMANDS


def watch_argv() -> list[str]:
    """`python -m workbench watch`, or the command module directly until it is registered."""
    if "watch" in COMMANDS:
        return [sys.executable, "-m", "workbench", "watch"]
    return [
        sys.executable,
        "-c",
        "from workbench.cli.watch_command import watch_command; watch_command()",
    ]


class JsonLines:
    """Reads a process's stdout (or `stream`) on a thread so the test can wait with
    timeouts."""

    def __init__(self, process: subprocess.Popen[str], stream: IO[str] | None = None) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        source = stream or process.stdout
        assert source is not None

        def pump() -> None:
            for line in source:
                self.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def next(self, timeout: float = 30) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    def until(self, text: str, timeout: float = 30) -> list[str]:
        """The lines read up to the first that holds `text` (which is the last)."""
        seen: list[str] = []
        while not any(text in line for line in seen):
            seen.append(self.lines.get(timeout=timeout))
        return seen


@pytest.fixture
def perl() -> None:
    require_engine("perl")


SANDBOX = ["--sandbox", "watched"]


@pytest.mark.usefixtures("perl")
def test_watch_runs_the_entry_after_each_change_and_stops_on_sigint(tmp_path: Path) -> None:
    folder = tmp_path / "My Project"
    folder.mkdir()
    (folder / "Greeting.pm").write_text("package Greeting; sub text { 'hello' } 1;\n")
    (folder / "main.pl").write_text('use Greeting; print Greeting::text(), " v1\\n";\n')
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    process = subprocess.Popen(
        [*watch_argv(), str(folder), "--run", "main.pl", "--json", "--debounce", "0.03", *SANDBOX],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    try:
        lines = JsonLines(process)
        first = lines.next()
        assert first["event"] == "run" and first["logs"]["stdout"] == ["hello v1"]
        assert first["sync"]["uploaded"] == 2 and first["language"] == "perl"

        (folder / "main.pl").write_text('use Greeting; print Greeting::text(), " v2\\n";\n')
        second = lines.next()
        assert second["logs"]["stdout"] == ["hello v2"]
        assert second["sync"]["uploaded"] == 1

        # An edited helper module is re-read on the next run.
        (folder / "Greeting.pm").write_text("package Greeting; sub text { 'bye' } 1;\n")
        third = lines.next()
        assert third["logs"]["stdout"] == ["bye v2"]

        (folder / "main.pl").write_text('die "broken\\n";\n')
        failed = lines.next()
        assert failed["error"]["message"].startswith("broken")

        # Another client destroys the sandbox: the next save fills it again, module too.
        destroyed = subprocess.run(
            [sys.executable, "-m", "workbench", "sandboxes", "destroy", "watched", "-y"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert destroyed.returncode == 0, destroyed.stderr
        (folder / "main.pl").write_text('use Greeting; print Greeting::text(), " v3\\n";\n')
        refilled = lines.next()
        assert refilled["logs"]["stdout"] == ["bye v3"], refilled
        assert [notice["code"] for notice in refilled["sync"]["notices"]] == ["SANDBOX_REPLACED"]
        assert refilled["sync"]["uploaded"] == 2 and refilled["sync"]["conflicts"] == []
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stderr  # stopped by Ctrl+C (it was 0; QA)
    assert "Traceback" not in stderr
    # While watching it can delete: it names the backend once, on stderr only.
    announced = [json.loads(line) for line in stderr.splitlines() if '"backend"' in line]
    assert [(line["event"], line["profile"]) for line in announced] == [("backend", "local")]


def test_watch_rejects_an_invalid_sandbox_id(tmp_path: Path) -> None:
    completed = subprocess.run(
        [*watch_argv(), str(tmp_path), "--sandbox", "-bad-", "--once"],
        capture_output=True,
        text=True,
        env={**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")},
        timeout=60,
    )
    assert completed.returncode == 2
    assert "Invalid sandbox id" in completed.stderr


@pytest.mark.parametrize(
    ("source", "stdout", "traceback"),
    [
        (
            'print("v3")\nraise RuntimeError("watch boom")\n',
            ["v3"],
            ["RuntimeError: watch boom", '  File "/workspace/main.py", line 2, in <module>'],
        ),
        ("x = (\n", [], ["SyntaxError: '(' was never closed (main.py, line 1)"]),
    ],
    ids=["raised", "syntax-error"],
)
def test_a_python_entry_s_traceback_starts_at_the_entry_file(
    tmp_path: Path, source: str, stdout: list[str], traceback: list[str]
) -> None:
    """The generated runner's frames (and runpy's) are not the user's: `watch --once`
    shows the error from the entry file's frame on, as `python main.py` would, and an
    error before the entry ran (a SyntaxError) without any of them."""
    require_engine("python")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text(source)
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [*watch_argv(), str(folder), "--run", "main.py", "--json", "--once"],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=120,
    )
    try:
        run = next(
            value
            for value in map(json.loads, done.stdout.splitlines())
            if value.get("event") == "run"
        )
        assert run["logs"]["stdout"] == stdout
        assert run["error"]["traceback"] == traceback
    finally:
        subprocess.run(
            [sys.executable, "-m", "workbench", "daemon", "stop"],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )


async def test_a_package_renamed_between_runs_leaves_nothing_behind(tmp_path: Path) -> None:
    """QA: the watch's own run of the entry wrote `pkg/__pycache__/*.pyc` into the
    sandbox, which the sync may not delete (it did not make them): once `pkg` was renamed,
    it stayed in the sandbox, where it could still be imported."""
    require_engine("python")
    folder = tmp_path / "project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "m.py").write_text("X = 'from the package'\n")
    (folder / "main.py").write_text("from pkg import m\nprint(m.X)\n")
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    env["SANDBOX_WORKBENCH_NO_DAEMON"] = "1"
    watch = [*watch_argv(), str(folder), *SANDBOX, "--run", "main.py", "--json", "--once"]
    done = subprocess.run(watch, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "from the package" in done.stdout
    (folder / "pkg").rename(folder / "lib")
    (folder / "main.py").write_text("from lib import m\nprint(m.X)\n")
    again = subprocess.run(watch, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "kept pkg" not in again.stdout + again.stderr
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        listing = await backend.sandbox("watched").list_files("/workspace", recursive=True)
    assert sorted(entry.absolute_path for entry in listing.files) == [
        "/workspace/lib",
        "/workspace/lib/__init__.py",
        "/workspace/lib/m.py",
        "/workspace/main.py",
    ]


def test_a_run_s_output_is_printed_as_it_comes(tmp_path: Path) -> None:
    """QA: an entry printing every second showed nothing until it ended (`run` streams)."""
    require_engine("python")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text(
        "import time\nprint('first', flush=True)\ntime.sleep(2.5)\nprint('second')\n"
    )
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    env["SANDBOX_WORKBENCH_NO_DAEMON"] = "1"
    process = subprocess.Popen(
        [*watch_argv(), str(folder), *SANDBOX, "--run", "main.py", "--once"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    came: list[tuple[str, float]] = []
    for line in process.stdout:
        came.append((line.strip(), time.monotonic()))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert [text for text, _ in came] == ["first", "second"], stderr
    assert came[1][1] - came[0][1] > 1.5  # "first" before the run ended


def test_sigint_cancels_a_running_entry_at_once(tmp_path: Path) -> None:
    """Ctrl-C while the entry runs stops the watch now, cancelling the run, instead of
    waiting for it to end (or to time out)."""
    require_engine("python")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text("import time\ntime.sleep(60)\n")
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    process = subprocess.Popen(
        [*watch_argv(), str(folder), "--run", "main.py", "--timeout", "90"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    assert process.stderr is not None
    try:
        seen = []
        for line in process.stderr:
            seen.append(line)
            if "running main.py" in line:
                break
        assert any("running main.py" in line for line in seen), seen
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, rest
    assert "cancelled the run of main.py" in rest and "stopped" in rest
    assert "Traceback" not in rest


def test_an_empty_sandbox_or_context_is_a_usage_error(tmp_path: Path) -> None:
    """An empty `--sandbox` used to fall back to the folder's name, silently."""
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    for option in ("--sandbox", "--context", "--binding"):
        done = subprocess.run(
            [*watch_argv(), str(tmp_path), option, "", "--once"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert f"Invalid value for '{option}'" in done.stderr and "must not be empty" in done.stderr


def test_an_entry_of_another_language_than_its_binding_is_refused(tmp_path: Path) -> None:
    require_engine("perl")
    (tmp_path / "main.py").write_text("print(1)\n")
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [*watch_argv(), str(tmp_path), "--run", "main.py", "-b", "PERL", "--once"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    try:
        assert done.returncode == 2, done.stderr
        assert (
            "main.py is a python file, and this context runs perl. Give --binding or "
            "--context of its language." in " ".join(done.stderr.split())
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "workbench", "daemon", "stop"],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )


def test_a_daemon_killed_while_the_entry_runs_does_not_end_the_watch(tmp_path: Path) -> None:
    """The run's answer cut off by the daemon's end was the watch's end too (QA); the
    watch says so, and the next change runs the entry on a daemon started again."""
    require_engine("python")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text("import time\ntime.sleep(60)\n")
    env = cli_env(tmp_path)
    process = subprocess.Popen(
        [*watch_argv(), str(folder), "--run", "main.py", "--debounce", "0.03"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    assert process.stdout is not None and process.stderr is not None
    stderr = JsonLines(process, process.stderr)
    try:
        stderr.until("running main.py")
        status = run_cli(env, "daemon", "status", "--json")
        os.kill(int(json.loads(status.stdout)["pid"]), signal.SIGKILL)
        failed = stderr.until("error: the run of main.py failed")
        assert "next change runs it again" in failed[-1], failed
        (folder / "main.py").write_text("print('back')\n")
        stderr.until("running main.py")
        assert process.stdout.readline() == "back\n"
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        run_cli(env, "daemon", "stop")
    assert process.returncode == 143  # stopped by SIGTERM, as the README's table says
    assert not any("Traceback" in line for line in stderr.lines.queue)
