"""Limits that hold while a guest is blocked in a host call, and what a guest can put on
the host during a run (issue 11, items 2 and 5).

Every execution of the local backend runs in an engine process of its own: a deadline
or a cancel that the guest cannot honour (it sleeps inside the host) ends that process,
never the caller's thread, and never another sandbox's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engines.isolated import IsolatedSession, WorkerPool, worker_pool
from engines.isolated.write_guard import BYTES_MARGIN
from engines.registry import language_engine
from engines.session import Limits, Outcome
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.core.host_paths import host_path, opaque_name
from workbench.core.workspace import MAX_FILE_BYTES, MAX_TOTAL_BYTES

TIMEOUT = 1.0
SLACK = 3.0
"""Seconds past the deadline allowed for the grace period, a process exit and a busy CI."""

BLOCKING = [
    ("python", "import time\ntime.sleep(45)\n1"),
    ("python", "import time\ntime.sleep(10**6)\n1"),
    ("python", "import select\nselect.select([], [], [], 45)\n1"),
    ("ruby", "sleep 45\n1"),
    ("ruby", "IO.select(nil, nil, nil, 45)\n1"),
    # Perl's poll_oneoff is denied by its engine (sleep returns at once) and JavaScript has
    # no timers: their waits cannot block; busy waits are covered by the epoch deadline.
    ("perl", "my $t = time; 1 while time - $t < 45; 1"),
    ("javascript", "const t = Date.now(); while (Date.now() - t < 45000) {}; 1"),
]


@pytest.fixture
def engines_ready(all_engines: None) -> None:
    del all_engines


@pytest.fixture
async def backend(tmp_path: Path, all_engines: None) -> AsyncIterator[Backend]:
    # Fuel to spare: the deadline, not the fuel budget, must end the busy waits below.
    limits = Limits(timeout_seconds=TIMEOUT, fuel=10**13)
    opened = open_local_backend(tmp_path / "data", limits=limits)
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def roomy_backend(tmp_path: Path, all_engines: None) -> AsyncIterator[Backend]:
    """A backend whose deadline a busy machine never reaches before the limit under test."""
    opened = open_local_backend(tmp_path / "data", limits=Limits(timeout_seconds=60))
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.mark.parametrize(
    ("language", "code"),
    BLOCKING,
    ids=[f"{language}-{index}" for index, (language, _) in enumerate(BLOCKING)],
)
async def test_a_blocked_guest_ends_at_the_deadline(
    backend: Backend, language: str, code: str
) -> None:
    sandbox = backend.sandbox(f"blocked-{language}")
    binding = language.upper()
    assert (await sandbox.interpreter.run_code("1", binding=binding)).error is None
    started = time.monotonic()
    result = await sandbox.interpreter.run_code(code, binding=binding)
    elapsed = time.monotonic() - started
    assert result.error is not None
    assert (result.error.name, result.error.message) == (
        "ExecutionLimitError",
        f"Execution timed out after {TIMEOUT:g} s",
    )
    assert TIMEOUT <= elapsed < TIMEOUT + SLACK
    after = await sandbox.interpreter.run_code("2", binding=binding)
    assert after.error is None and after.results[0].text == "2"


@pytest.mark.parametrize(
    ("language", "code"),
    [("python", "import time\ntime.sleep(10**6)"), ("ruby", "sleep")],
)
async def test_cancel_reaches_a_guest_blocked_in_a_host_call(
    tmp_path: Path, all_engines: None, language: str, code: str
) -> None:
    backend = open_local_backend(tmp_path / "data", limits=Limits(timeout_seconds=60))
    try:
        sandbox = backend.sandbox("cancel-blocked")
        binding = language.upper()
        assert (await sandbox.interpreter.run_code("1", binding=binding)).error is None
        running = asyncio.create_task(sandbox.interpreter.run_code(code, binding=binding))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        assert await sandbox.cancel() is True
        result = await asyncio.wait_for(running, 10)
        assert time.monotonic() - started < SLACK
        assert result.error is not None
        assert result.error.message == "Execution cancelled"
    finally:
        await backend.aclose()


async def test_a_blocked_sandbox_never_delays_another(tmp_path: Path, all_engines: None) -> None:
    # Room for every session to stay resident: an eviction's restore is not what this measures.
    backend = open_local_backend(
        tmp_path / "data", limits=Limits(timeout_seconds=60), max_resident=16
    )
    try:
        quick = backend.sandbox("quick")
        assert (await quick.interpreter.run_code("1", binding="PYTHON")).error is None
        gateway = backend.transport.gateway  # type: ignore[attr-defined]
        names = [f"sleeper-{index}" for index in range(8)]  # more than the default thread pool
        sleepers = [
            asyncio.create_task(
                backend.sandbox(name).interpreter.run_code(
                    "import time\nopen('ready', 'w').close()\ntime.sleep(45)", binding="PYTHON"
                )
            )
            for name in names
        ]
        # Time the quick run only once every sleeper is blocked in its host call (starting
        # eight engine processes on two cores is not what this measures).
        ready = [host_path(gateway.mirror_root, opaque_name(name)) / "ready" for name in names]
        waited = time.monotonic()
        while not all(path.exists() for path in ready):
            assert time.monotonic() - waited < 30, "the sleepers never started"
            await asyncio.sleep(0.05)
        started = time.monotonic()
        answer = await quick.interpreter.run_code("6 * 7", binding="PYTHON")
        assert answer.results[0].text == "42"
        assert time.monotonic() - started < 1.0
        for name in names:
            assert await backend.sandbox(name).cancel() is True
        for sleeper in sleepers:
            error = (await sleeper).error
            assert error is not None and error.message == "Execution cancelled"
    finally:
        await backend.aclose()


async def test_closing_never_waits_for_a_blocked_guest(tmp_path: Path, all_engines: None) -> None:
    backend = open_local_backend(tmp_path / "data", limits=Limits(timeout_seconds=600))
    sandbox = backend.sandbox("closing")
    assert (await sandbox.interpreter.run_code("1", binding="PYTHON")).error is None
    running = asyncio.create_task(
        sandbox.interpreter.run_code("import time\ntime.sleep(10**6)", binding="PYTHON")
    )
    await asyncio.sleep(0.5)
    started = time.monotonic()
    await backend.aclose()
    # The run ends with the backend: an error result or an exception, promptly either way.
    await asyncio.wait({running}, timeout=5)
    assert running.done()
    assert time.monotonic() - started < 2.0
    if running.exception() is None:
        assert running.result().error is not None


def test_a_cancel_while_the_run_waits_for_its_turn_is_kept(
    engines_ready: None, tmp_path: Path
) -> None:
    """A cancel that arrives while the execution still waits for the session (the last
    run's snapshot on its way in holds it) stops that execution instead of being dropped
    as if the session were idle."""
    session = IsolatedSession(
        "python",
        pool=worker_pool(MAX_FILE_BYTES),
        workspace=tmp_path,
        limits=Limits(timeout_seconds=30),
    )
    try:
        assert session.execute("1").result.error is None
        outcomes: list[Outcome] = []
        with session._call_lock:  # as `collect_snapshot` holds it while a snapshot comes in
            runner = threading.Thread(
                target=lambda: outcomes.append(session.execute("import time\ntime.sleep(20)"))
            )
            runner.start()
            time.sleep(0.3)  # the execution is now waiting for the lock
            session.cancel()
        runner.join(10)
        assert not runner.is_alive()
        error = outcomes[0].result.error
        assert error is not None
        assert error.message == "Execution cancelled"
    finally:
        session.close()


def test_a_killed_engine_process_costs_one_run(engines_ready: None, tmp_path: Path) -> None:
    pool = worker_pool(MAX_FILE_BYTES)
    session = IsolatedSession(
        "perl",
        pool=pool,
        workspace=tmp_path,
        # Fuel enough that the loop below is still running when the process is killed.
        limits=Limits(timeout_seconds=30, fuel=10**13),
    )
    try:
        assert session.execute("our $n = 41; 1").result.error is None
        session.take_snapshot()
        assert session.restore_point is not None
        worker = session._worker
        assert worker is not None
        killer = threading.Timer(0.5, os.kill, (worker.process.pid, signal.SIGKILL))
        killer.start()
        crashed = session.execute("1 while 1")
        killer.join()
        assert crashed.result.error is not None
        assert crashed.result.error.name == "EngineError", crashed.result.error
        assert "signal 9" in crashed.result.error.message
        after = session.execute("$n + 1")
        assert after.result.error is None and after.result.results[0].text == "42"
        assert after.boot.value == "restored"
    finally:
        session.close()


def test_a_spare_that_died_while_idle_is_never_handed_out(engines_ready: None) -> None:
    pool = WorkerPool(MAX_FILE_BYTES, spares=0)
    try:
        spare = pool.acquire()
        pool.release(spare)
        os.kill(spare.process.pid, signal.SIGKILL)
        spare.process.wait(timeout=10)
        worker = pool.acquire()
        assert worker is not spare and worker.process.poll() is None
        assert spare.dead
    finally:
        pool.close()


# ----- writes are bounded while the guest runs (item 5) -----------------------------------


class PeakBytes:
    """Polls a directory tree's total size from another thread; keeps the peak."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for folder, _, files in os.walk(self.root):
                for name in files:
                    with contextlib.suppress(OSError):  # removed while we walk
                        total += os.lstat(os.path.join(folder, name)).st_size
            self.peak = max(self.peak, total)

    def __enter__(self) -> PeakBytes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


FLOODS = {
    "python": "data = b'x' * (1 << 20)\nfor i in range(300):\n    open(f'f{i}', 'wb').write(data)",
    "ruby": "data = 'x' * (1 << 20)\n300.times { |i| File.binwrite(\"f#{i}\", data) }",
    "perl": 'my $d = "x" x (1 << 20); for my $i (0..299) { open(my $f, ">", "f$i") or die;'
    " print $f $d; close $f } 1",
}


@pytest.mark.parametrize("language", sorted(FLOODS))
async def test_a_guest_cannot_flood_the_host_during_a_run(
    tmp_path: Path, all_engines: None, language: str
) -> None:
    backend = open_local_backend(tmp_path / "data", limits=Limits(timeout_seconds=30))
    gateway = backend.transport.gateway  # type: ignore[attr-defined]
    try:
        sandbox = backend.sandbox("flood")
        await sandbox.write_file("keep.txt", "kept")
        binding = language.upper()
        assert (await sandbox.interpreter.run_code("1", binding=binding)).error is None
        mirror = host_path(gateway.mirror_root, opaque_name("flood"))
        with PeakBytes(mirror) as peak:
            result = await sandbox.interpreter.run_code(FLOODS[language], binding=binding)
        assert result.error is not None
        assert result.error.name == "ExecutionLimitError"
        assert result.error.message.startswith("Workspace limit exceeded during the run")
        # 300 MiB were asked for; the host saw the limit plus a small margin at most.
        if language_engine(language).kind == "component":
            # Our own WASI host asks the guard before each write: exact, one write past.
            assert peak.peak <= MAX_TOTAL_BYTES + BYTES_MARGIN + MAX_FILE_BYTES
        else:
            # wasmtime's WASI writes without asking: the guard's thread stops the run
            # within the few writes made while it wakes.
            assert peak.peak <= MAX_TOTAL_BYTES + 3 * MAX_FILE_BYTES
        listing = await sandbox.list_files(".")
        assert [entry.name for entry in listing.files] == ["keep.txt"]
    finally:
        await backend.aclose()


async def test_one_file_is_bounded_by_the_kernel(roomy_backend: Backend) -> None:
    gateway = roomy_backend.transport.gateway  # type: ignore[attr-defined]
    sandbox = roomy_backend.sandbox("bigfile")
    assert (await sandbox.interpreter.run_code("1", binding="PYTHON")).error is None
    mirror = host_path(gateway.mirror_root, opaque_name("bigfile"))
    with PeakBytes(mirror) as peak:
        result = await sandbox.interpreter.run_code(
            "chunk = b'x' * (64 << 10)\n"
            "f = open('big', 'wb', buffering=0)\n"
            "try:\n    for _ in range(1024):\n        f.write(chunk)\n"
            "except OSError as error:\n    print('refused', error)",
            binding="PYTHON",
        )
    assert peak.peak <= MAX_FILE_BYTES + (64 << 10)
    assert result.error is not None and "File exceeds" in result.error.message
    assert result.stdout and result.stdout[0].startswith("refused")


async def test_entries_are_bounded_during_the_run(roomy_backend: Backend) -> None:
    sandbox = roomy_backend.sandbox("manydirs")
    result = await sandbox.interpreter.run_code(
        "import os\nfor i in range(100000):\n    os.mkdir(f'd{i}')", binding="PYTHON"
    )
    assert result.error is not None
    assert "more than 4096 entries" in result.error.message
    assert (await sandbox.list_files(".")).files == []


async def test_the_guard_fires_while_entries_keep_coming(roomy_backend: Backend) -> None:
    """A guest that creates entries as fast as the guard reads their events never starves
    the guard's check: the run ends at the entry bound, long before its deadline."""
    sandbox = roomy_backend.sandbox("fastdirs")
    started = time.monotonic()
    result = await sandbox.interpreter.run_code(
        "import os\nfor i in range(100000):\n    os.mkdir(f'directory_{i:06}')", binding="PYTHON"
    )
    assert result.error is not None
    assert "more than 4096 entries created" in result.error.message
    assert time.monotonic() - started < 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_engine_processes_inherit_no_secrets(
    engines_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that runs untrusted code never sees the user's tokens."""
    monkeypatch.setenv("SANDBOX_WORKBENCH_TOKEN", "secret-token-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-key-value")
    pool = WorkerPool(MAX_FILE_BYTES, spares=0)
    try:
        worker = pool.acquire()
        environ = Path(f"/proc/{worker.process.pid}/environ").read_bytes()
        assert b"secret" not in environ
        assert b"PATH=" in environ
        limits = Path(f"/proc/{worker.process.pid}/limits").read_text()
        file_size = next(line for line in limits.splitlines() if line.startswith("Max file size"))
        assert str(MAX_FILE_BYTES + (64 << 10)) in file_size
    finally:
        pool.close()
