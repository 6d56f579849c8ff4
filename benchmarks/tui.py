"""TUI benchmark: launch to the first interactive frame, and the UI's added latency.

    python -m benchmarks.tui    (from the repository root)

1. Launch: a fresh `python` process runs the workbench headless and reports when its
   first screen is ready; in tmux (when installed) the real `python -m workbench` is
   started and the screen polled until the footer shows. Target: <= 1.0 s.
2. Added latency: `1+1` in a Perl context, sent through the UI (the run key, the
   worker, the message, the transcript) against the same call on the API directly.
   Target: <= 30 ms added (median of 20).
3. Typing in a file of about a MiB: CPU per key in the workbench's file editor against
   Textual's own text area holding the same text (the baseline, in the same run).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from textual import events
from textual.app import App, ComposeResult
from textual.widgets import TextArea

from tour import create_context, create_sandbox, until_connected, wait_for
from workbench.backends.local import open_local_backend
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.file_editor import FileEditor

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_TARGET_S = 1.0
ADDED_LATENCY_TARGET_MS = 30.0
ROUNDS = 20

HEADLESS_LAUNCH = """
import sys, time
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.file_editor import FileEditor

async def ready(pilot):
    print(time.time(), flush=True)
    pilot.app.exit()

WorkbenchApp().run(headless=True, auto_pilot=ready)
"""


def scratch_env(directory: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SANDBOX_WORKBENCH_DATA_DIR": str(directory / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(directory / "config"),
    }


def headless_launch_seconds(directory: Path) -> float:
    started = time.time()
    completed = subprocess.run(
        [sys.executable, "-c", HEADLESS_LAUNCH],
        env=scratch_env(directory),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(completed.stdout.split()[-1]) - started


def tmux_launch_seconds(directory: Path) -> float | None:
    if shutil.which("tmux") is None:
        return None
    session = f"sbw-bench-{uuid.uuid4().hex[:8]}"
    env = " ".join(
        f"{key}={value!r}"
        for key, value in scratch_env(directory).items()
        if key.startswith("SANDBOX_WORKBENCH")
    )
    command = f"cd {str(ROOT)!r} && env {env} TERM=xterm-256color {sys.executable} -m workbench"
    started = time.monotonic()
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True
    )
    try:
        while time.monotonic() - started < 30:
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if "Quit" in screen and "profile" in screen:
                return time.monotonic() - started
            time.sleep(0.01)
        return None
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


async def added_latency_ms(directory: Path) -> tuple[float, float]:
    """(median UI round trip, median API call) for `1+1`, in milliseconds."""
    data = directory / "latency"
    app = WorkbenchApp(
        data_dir=data, backend_factory=lambda name: open_local_backend(data, embedded=True)
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot, "bench")
        repl = await create_context(pilot, "PERL")
        assert app.backend is not None
        interpreter = app.backend.sandbox("bench").interpreter
        ui_times: list[float] = []
        api_times: list[float] = []
        for _ in range(ROUNDS + 2):
            started = time.perf_counter()
            await interpreter.run_code("1+1", context=repl.context.id)
            api_times.append(time.perf_counter() - started)

            repl.set_code("1+1")
            cells = len(repl.transcript.cells)
            key = events.Key("ctrl+r", None)
            key.set_sender(app)
            started = time.perf_counter()
            app.post_message(key)
            while len(repl.transcript.cells) == cells:
                await asyncio.sleep(0.0005)
            ui_times.append(time.perf_counter() - started)
            await wait_for(pilot, lambda: not repl.running)
            await asyncio.sleep(0.05)  # a person reads the result before the next run
        # The first rounds warm the engine and the widgets.
        return (
            statistics.median(ui_times[2:]) * 1000,
            statistics.median(api_times[2:]) * 1000,
        )


BIG_FILE = ("total = sum(range(10)) + len('abcdefghijklmnopqrstuvwxyz')  # line\n" * 16000)[
    : 1 << 20
]
KEYS = 30


async def typing_cpu_ms(editor: TextArea) -> float:
    """CPU milliseconds per key typed into `editor` holding `BIG_FILE` (median of KEYS),
    each key painted before the next."""

    class Typing(App[None]):
        def compose(self) -> ComposeResult:
            yield editor

    app = Typing()
    async with app.run_test(size=(120, 36)) as pilot:
        editor.focus()
        await pilot.pause()
        samples = []
        for _ in range(KEYS + 3):
            started = time.process_time()
            await pilot.press("a")
            samples.append((time.process_time() - started) * 1000)
        return statistics.median(samples[3:])


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        headless = min(headless_launch_seconds(directory) for _ in range(3))
        print(
            f"launch (headless, fresh process): {headless:.3f} s  (target {LAUNCH_TARGET_S} s, "
            f"ratio {headless / LAUNCH_TARGET_S:.2f})"
        )
        in_tmux = tmux_launch_seconds(directory)
        if in_tmux is None:
            print("launch (tmux): skipped, tmux is not installed")
        else:
            print(
                f"launch (tmux, real terminal): {in_tmux:.3f} s  (target {LAUNCH_TARGET_S} s, "
                f"ratio {in_tmux / LAUNCH_TARGET_S:.2f})"
            )
        ui_ms, api_ms = asyncio.run(added_latency_ms(directory))
        added = ui_ms - api_ms
        print(
            f"1+1 via API: {api_ms:.2f} ms; via UI: {ui_ms:.2f} ms; added {added:.2f} ms  "
            f"(target {ADDED_LATENCY_TARGET_MS} ms, ratio {added / ADDED_LATENCY_TARGET_MS:.2f})"
        )
    ours = asyncio.run(typing_cpu_ms(FileEditor("big.py", BIG_FILE)))
    baseline = asyncio.run(
        typing_cpu_ms(TextArea(BIG_FILE, soft_wrap=False, show_line_numbers=True))
    )
    print(
        f"typing in a 1 MiB file: {ours:.1f} ms of CPU a key in the file editor, "
        f"{baseline:.1f} ms in Textual's TextArea (ratio {ours / baseline:.2f})"
    )


if __name__ == "__main__":
    main()
