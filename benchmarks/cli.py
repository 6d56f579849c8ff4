"""The command line against the local daemon: how long a command takes from start to exit,
and how much memory the client process needs, against `sandbox-workbench --version` in the
same run (the floor: Python and click starting). Medians of 9 runs, in a private data
dir whose daemon is started first and stopped at the end. The commands run with their
bytecode compiled first, as an installed package has it (`PYTHONDONTWRITEBYTECODE` would
make every start compile the sources: tens of milliseconds).
Targets: `run -s S -c 'x + 1'` in a warm context ≤ 150 ms, stateless `run -c '1+1'`
≤ 150 ms, `sandboxes list` ≤ 120 ms, the client's peak ≤ 60 MiB.
Run: `python -m benchmarks cli`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 9
SCRIPT = Path(sys.executable).parent / "sandbox-workbench"
COMMANDS = {
    "--version": ["--version"],
    "run -s S -c 'x + 1' (warm context)": ["run", "-s", "bench", "-b", "PYTHON", "-c", "x + 1"],
    "run -b PYTHON -c '1+1' (stateless)": ["run", "-b", "PYTHON", "-c", "1+1"],
    "sandboxes list": ["sandboxes", "list"],
}
TARGETS_MS = {
    "run -s S -c 'x + 1' (warm context)": 150,
    "run -b PYTHON -c '1+1' (stateless)": 150,
    "sandboxes list": 120,
}
PEAK_TARGET_MIB = 60


def timed(env: dict[str, str], args: list[str]) -> tuple[float, float]:
    """(wall milliseconds, peak RSS MiB) of one command."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(SCRIPT), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = (time.perf_counter() - started) * 1000
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{args} failed: {process.stderr.read() if process.stderr else ''}")
    peak = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / (1 << 20)
    return elapsed, peak


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sbw-cli-") as scratch:
        base = Path(scratch)
        env = {
            **os.environ,
            "SANDBOX_WORKBENCH_DATA_DIR": str(base / "data"),
            "SANDBOX_WORKBENCH_CONFIG_DIR": str(base / "config"),
            "SANDBOX_WORKBENCH_RUNTIME_DIR": str(base / "run"),
            "SANDBOX_WORKBENCH_STATE_DIR": str(base / "state"),
        }
        env.pop("SANDBOX_WORKBENCH_NO_DAEMON", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        root = Path(__file__).resolve().parents[1]
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "workbench", "engines"],
            cwd=root,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        try:
            timed(env, ["run", "-s", "bench", "-b", "PYTHON", "-c", "x = 41"])  # the daemon
            timed(env, ["run", "-b", "PYTHON", "-c", "1"])  # and a stateless engine, warm
            print(f"{'command':<38} {'median':>9} {'vs --version':>13} {'peak RSS':>10}  target")
            floor = None
            for name, args in COMMANDS.items():
                samples = [timed(env, args) for _ in range(RUNS)]
                wall = statistics.median(sample[0] for sample in samples)
                peak = max(sample[1] for sample in samples)
                floor = floor or wall
                target = TARGETS_MS.get(name)
                verdict = "" if target is None else ("met" if wall <= target else "NOT met")
                shown = f"≤ {target} ms, {verdict}" if target else ""
                print(
                    f"{name:<38} {wall:>6.0f} ms {wall / floor:>12.2f}x {peak:>6.0f} MiB  {shown}"
                )
            print(f"client peak target ≤ {PEAK_TARGET_MIB} MiB")
        finally:
            subprocess.run([str(SCRIPT), "daemon", "stop"], env=env, capture_output=True)
