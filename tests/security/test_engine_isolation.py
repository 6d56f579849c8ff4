"""Limits that hold while a guest is blocked in a host call (issue 11, item 2).

Every execution of the local backend runs in an engine process of its own: a deadline
or a cancel that the guest cannot honour (it sleeps inside the host) ends that process,
never the caller's thread, and never another sandbox's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import engines.process.session as session_module
from engines.process import EngineProcessPool, ProcessSession, engine_process_pool
from engines.process.child import LOG_BYTES
from engines.process.handle import FORK_SERVER, EngineProcess, ForkServer
from engines.result import ExecutionReport, Limits
from engines.snapshot import SnapshotDelta
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.core.workspace import GUEST_LIMITS

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
    opened = open_local_backend(tmp_path / "data", limits=limits, embedded=True)
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
    backend = open_local_backend(
        tmp_path / "data", limits=Limits(timeout_seconds=60), embedded=True
    )
    try:
        sandbox = backend.sandbox("cancel-blocked")
        binding = language.upper()
        assert (await sandbox.interpreter.run_code("1", binding=binding)).error is None
        running = asyncio.create_task(sandbox.interpreter.run_code(code, binding=binding))
        await asyncio.sleep(0.5)
        deadline = time.monotonic() + 10
        started = time.monotonic()
        while not await sandbox.cancel():  # the run starts after the first one's snapshot
            assert time.monotonic() < deadline, "the run never started"
            await asyncio.sleep(0.1)
            started = time.monotonic()
        result = await asyncio.wait_for(running, 10)
        assert time.monotonic() - started < SLACK
        assert result.error is not None
        assert result.error.message == "Execution cancelled"
    finally:
        await backend.aclose()


async def test_a_blocked_sandbox_never_delays_another(tmp_path: Path, all_engines: None) -> None:
    # Room for every session to stay resident: an eviction's restore is not what this measures.
    backend = open_local_backend(
        tmp_path / "data", limits=Limits(timeout_seconds=60), max_resident=16, embedded=True
    )
    try:
        quick = backend.sandbox("quick")
        assert (await quick.interpreter.run_code("1", binding="PYTHON")).error is None
        gateway = backend.transport.gateway  # type: ignore[attr-defined]
        names = [f"sleeper-{index}" for index in range(8)]  # more than the default thread pool
        sleepers = [
            asyncio.create_task(
                backend.sandbox(name).interpreter.run_code(
                    "import time\ntime.sleep(45)", binding="PYTHON"
                )
            )
            for name in names
        ]
        # Time the quick run only once every sleeper is blocked in its host call (starting
        # eight engine processes on two cores is not what this measures).
        waited = time.monotonic()
        while not _all_blocked(gateway, len(names)):
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


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _all_blocked(gateway: object, count: int) -> bool:
    """`count` sessions are in a guest call, and their engine processes use no CPU."""
    sessions = [
        session
        for session in gateway.sessions._sessions.values()  # type: ignore[attr-defined]
        if session._in_call and session._process is not None
    ]
    if len(sessions) < count:
        return False
    pids = [session._process.process.pid for session in sessions]
    before = [_cpu_ticks(pid) for pid in pids]
    time.sleep(0.3)
    return before == [_cpu_ticks(pid) for pid in pids]


async def test_closing_never_waits_for_a_blocked_guest(tmp_path: Path, all_engines: None) -> None:
    backend = open_local_backend(
        tmp_path / "data", limits=Limits(timeout_seconds=600), embedded=True
    )
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


def python_session() -> ProcessSession:
    """A Python session of the process-wide pool whose runs may take 30 s."""
    return ProcessSession(
        "python",
        pool=engine_process_pool(),
        workspace=GUEST_LIMITS,
        limits=Limits(timeout_seconds=30),
    )


def stopped_before_its_snapshot(session: ProcessSession) -> EngineProcess:
    """The session's engine process, stopped (SIGSTOP stands in for one that hangs) and
    then asked for the snapshot of its last run, which it cannot answer until continued."""
    engine_process = session._process
    assert engine_process is not None
    os.kill(engine_process.process.pid, signal.SIGSTOP)
    session.take_snapshot()
    return engine_process


def test_a_cancel_while_the_run_waits_for_its_turn_is_kept(
    engines_ready: None, tmp_path: Path
) -> None:
    """A cancel that arrives while the execution still waits for the session (the last
    run's snapshot on its way in holds it) stops that execution instead of being dropped
    as if the session were idle."""
    session = python_session()
    try:
        assert session.execute("1").result.error is None
        reports: list[ExecutionReport] = []
        with session._call_lock:  # as `collect_snapshot` holds it while a snapshot comes in
            runner = threading.Thread(
                target=lambda: reports.append(session.execute("import time\ntime.sleep(20)"))
            )
            runner.start()
            time.sleep(0.3)  # the execution is now waiting for the lock
            session.cancel()
        runner.join(10)
        assert not runner.is_alive()
        error = reports[0].result.error
        assert error is not None
        assert error.message == "Execution cancelled"
    finally:
        session.close()


def test_a_cancel_while_the_last_snapshot_hangs_ends_the_run(engines_ready: None) -> None:
    """A run waits for the last run's snapshot before its request; a cancel in that wait
    gives the snapshot a short grace, then kills an engine process that hangs in it
    (SIGSTOP stands in for one). Before, the run waited up to 120 s."""
    session = python_session()
    try:
        assert session.execute("x = 41").result.error is None
        engine_process = stopped_before_its_snapshot(session)  # never answered
        reports: list[ExecutionReport] = []
        runner = threading.Thread(target=lambda: reports.append(session.execute("x + 1")))
        runner.start()
        time.sleep(0.3)  # the run now waits for the snapshot
        session.cancel()
        runner.join(session_module.CANCEL_GRACE_SECONDS + SLACK + 5)
        assert not runner.is_alive(), "the cancel did not end the run"
        error = reports[0].result.error
        assert error is not None
        assert error.message == "Execution cancelled"
        assert engine_process.dead
        # The state of the run whose snapshot never came is lost, as in a crash.
        after = session.execute("1 + 1")
        assert after.result.error is None and after.result.results[0].text == "2"
    finally:
        session.close()


def test_a_cancel_armed_for_one_snapshot_never_kills_a_later_one(
    engines_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill a cancel arms belongs to the snapshot it was armed for: that snapshot
    came in time, so a later one of the same process, slower than the grace, is kept."""
    monkeypatch.setattr(session_module, "CANCEL_GRACE_SECONDS", 1.0)
    session = python_session()
    try:
        assert session.execute("x = 1").result.error is None
        engine_process = stopped_before_its_snapshot(session)
        pid = engine_process.process.pid
        runner = threading.Thread(target=session.execute, args=("x = 2",))
        runner.start()
        time.sleep(0.2)  # the run waits for the snapshot
        armed = time.monotonic()
        session.cancel()
        os.kill(pid, signal.SIGCONT)  # the snapshot comes in well within the grace
        runner.join(10)
        assert not runner.is_alive()
        assert session.execute("x = 3").result.error is None
        os.kill(pid, signal.SIGSTOP)
        session.take_snapshot()
        collector = threading.Thread(target=session.collect_snapshot)
        collector.start()
        time.sleep(max(0.0, armed + 2.0 - time.monotonic()))  # past the first grace
        os.kill(pid, signal.SIGCONT)
        collector.join(10)
        assert not engine_process.dead
        after = session.execute("x")
        assert after.result.results[0].text == "3"
        assert after.boot.value == "resident"
    finally:
        session.close()


async def test_a_cancel_while_a_runs_snapshot_hangs_ends_the_call(
    tmp_path: Path, all_engines: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the local backend a run's snapshot is collected before the run is
    answered; a cancel then gives it the grace, and an engine process that hangs in it is
    killed: the call ends, and the context goes back to its last snapshot."""
    monkeypatch.setattr(session_module, "CANCEL_GRACE_SECONDS", 0.5)
    backend = open_local_backend(
        tmp_path / "data", limits=Limits(timeout_seconds=60), embedded=True
    )
    try:
        sandbox = backend.sandbox("hung-snapshot")
        assert (await sandbox.interpreter.run_code("x = 41", binding="PYTHON")).error is None
        stop_before = {"snapshot": True}
        take_snapshot = ProcessSession.take_snapshot

        def stopped_first(session: ProcessSession) -> None:
            if stop_before["snapshot"] and session._process is not None:
                stop_before["snapshot"] = False
                os.kill(session._process.process.pid, signal.SIGSTOP)  # never answers
            take_snapshot(session)

        monkeypatch.setattr(ProcessSession, "take_snapshot", stopped_first)
        running = asyncio.create_task(sandbox.interpreter.run_code("x = 42", binding="PYTHON"))
        deadline = time.monotonic() + 10
        while stop_before["snapshot"]:
            assert time.monotonic() < deadline, "the run never reached its snapshot"
            await asyncio.sleep(0.05)
        assert await sandbox.cancel()
        await asyncio.wait_for(running, 10)  # it waited up to 120 s
        after = await asyncio.wait_for(sandbox.interpreter.run_code("x", binding="PYTHON"), 30)
        assert after.error is None
        assert [entry.text for entry in after.results] == ["41"]
    finally:
        await backend.aclose()


def killed_during_a_loop(session: ProcessSession) -> ExecutionReport:
    """A Perl busy loop whose engine process is killed (SIGKILL) half a second in."""
    engine_process = session._process
    assert engine_process is not None
    killer = threading.Timer(0.5, os.kill, (engine_process.process.pid, signal.SIGKILL))
    killer.start()
    try:
        return session.execute("1 while 1")
    finally:
        killer.join()


def test_a_killed_engine_process_costs_one_run(engines_ready: None) -> None:
    pool = engine_process_pool()
    session = ProcessSession(
        "perl",
        pool=pool,
        workspace=GUEST_LIMITS,
        # Fuel enough that the loop below is still running when the process is killed.
        limits=Limits(timeout_seconds=30, fuel=10**13),
    )
    try:
        assert session.execute("our $n = 41; 1").result.error is None
        session.take_snapshot()
        session.collect_snapshot()
        assert session.unstored is not None
        crashed = killed_during_a_loop(session)
        assert crashed.result.error is not None
        assert crashed.result.error.name == "EngineError", crashed.result.error
        assert "signal 9" in crashed.result.error.message
        after = session.execute("$n + 1")
        assert after.result.error is None and after.result.results[0].text == "42"
        assert after.boot.value == "restored"
    finally:
        session.close()


def test_with_a_restore_source_the_host_keeps_no_copy_of_the_guest_memory(
    engines_ready: None,
) -> None:
    """Issue 23: the host keeps only blocks that differ from the engine's image, of
    snapshots not stored yet; a new engine process reads the stored snapshot from the
    source (a run whose snapshot was not stored is lost with the process, as the owner
    stores every snapshot it takes)."""
    stored: list[SnapshotDelta] = []
    session = ProcessSession(
        "perl",
        pool=engine_process_pool(),
        workspace=GUEST_LIMITS,
        limits=Limits(timeout_seconds=30, fuel=10**13),
        restore_source=lambda build: stored[-1] if stored else None,
    )
    try:
        assert session.execute("our $n = 41; 1").result.error is None
        session.take_snapshot()
        session.collect_snapshot()
        first = session.unstored
        assert first is not None and first.from_image
        assert 0 < len(first.blocks) < first.length // 4096 / 4  # not the image
        stored.append(first)
        session.unstored = None  # as the owner does once it stored them
        assert session.execute("$n = 42; 1").result.error is None
        session.take_snapshot()
        session.collect_snapshot()
        later = session.unstored
        assert later is not None and not later.from_image
        assert 0 < len(later.blocks) < len(first.blocks)
        crashed = killed_during_a_loop(session)
        assert crashed.result.error is not None and crashed.result.error.name == "EngineError"
        after = session.execute("$n + 1")
        assert after.result.error is None and after.result.results[0].text == "42"
        assert after.boot.value == "restored" and session.unstored is None
    finally:
        session.close()


def test_a_spare_that_died_while_idle_is_never_handed_out(engines_ready: None) -> None:
    pool = EngineProcessPool(spares=0)
    try:
        spare = pool.acquire()
        pool.release(spare)
        os.kill(spare.process.pid, signal.SIGKILL)
        spare.process.wait(timeout=10)
        engine_process = pool.acquire()
        assert engine_process is not spare and engine_process.process.poll() is None
        assert spare.dead
    finally:
        pool.close()


def test_a_spare_killed_while_idle_is_never_handed_out_before_it_has_exited(
    engines_ready: None,
) -> None:
    """A kill that lands on a process after it went back to the pool (a cancel's, racing
    the open it meant to end) marks it dead before the process has exited: the pool
    checked only whether it had exited, and could hand it to the next session."""
    pool = EngineProcessPool(spares=0)
    try:
        spare = pool.acquire()
        pool.release(spare)
        spare.dead = True  # as `kill` leaves it until the process has exited (microseconds)
        engine_process = pool.acquire()
        assert engine_process is not spare and not engine_process.dead
        assert spare.process.wait(timeout=10) is not None  # the pool ended it
    finally:
        pool.close()


@pytest.mark.skipif(not FORK_SERVER, reason="engine processes are forks of a fork server")
def test_a_kill_never_waits_for_word_of_an_exit(
    engines_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel kills under its session's lock. `kill` asked first whether the process
    had ended, which for a process that has just exited waits up to 2 s for the fork
    server to say so (made slow here: that word comes from another thread)."""
    pool = EngineProcessPool(spares=0)
    try:
        engine_process = pool.acquire()
        pid = engine_process.process.pid
        report = ForkServer.exit_code

        def slow(server: ForkServer, exited: int, timeout: float) -> int | None:
            if exited == pid:
                time.sleep(timeout)
            return report(server, exited, timeout)

        monkeypatch.setattr(ForkServer, "exit_code", slow)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)  # it has exited; the fork server has not yet been asked
        started = time.monotonic()
        engine_process.kill()
        assert time.monotonic() - started < 0.5
        assert engine_process.dead
    finally:
        pool.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_engine_processes_inherit_no_secrets(
    engines_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that runs untrusted code never sees the user's tokens, and writes no
    file larger than its own log."""
    monkeypatch.setenv("SANDBOX_WORKBENCH_TOKEN", "secret-token-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-key-value")
    pool = EngineProcessPool(spares=0)
    try:
        engine_process = pool.acquire()
        environ = Path(f"/proc/{engine_process.process.pid}/environ").read_bytes()
        assert b"secret" not in environ
        assert b"PATH=" in environ
        limits = Path(f"/proc/{engine_process.process.pid}/limits").read_text()
        file_size = next(line for line in limits.splitlines() if line.startswith("Max file size"))
        assert str(LOG_BYTES) in file_size
    finally:
        pool.close()


class _StuckSession:
    """What the backstop sees of a guest blocked in a host call past its deadline."""

    def __init__(self) -> None:
        self.in_call_since: float | None = time.monotonic() - 10
        self.limits = Limits(timeout_seconds=0.1)

    def timeout_message(self) -> str:
        return "Execution timed out"


@pytest.mark.parametrize("ends_meanwhile", [False, True])
def test_the_backstop_answers_only_for_the_run_it_watched(
    monkeypatch: pytest.MonkeyPatch, ends_meanwhile: bool
) -> None:
    """The backstop answers for a stuck run and ends the process; but when that run ends
    while the backstop writes its report, and the next request has begun, the report
    would be taken for the next request's answer: then it sends nothing."""
    import select
    import types

    from engines.process import child, codec

    exits: list[int] = []
    monkeypatch.setattr(child, "os", types.SimpleNamespace(_exit=exits.append))
    reader, writer = os.pipe()
    responder = child.Responder(writer)

    def report(session: _StuckSession, code: str, message: str) -> dict[str, str]:
        if ends_meanwhile:  # as `execute` ends the run, then the next request begins
            with responder._backstop:
                responder._running_seq, responder._done_seq = 0, 7
            session.in_call_since = None
            responder._answered = False
        return {"message": message}

    monkeypatch.setattr(codec, "abandoned_report", report)
    responder.session = _StuckSession()  # type: ignore[assignment]
    responder._answered = False
    with responder._backstop:
        responder._running_seq = 7
    stop = threading.Event()

    def tick() -> None:  # the engine process's interval timer, in this process
        if stop.wait(0.05):
            raise InterruptedError  # the test is over: ends the watcher

    def watch() -> None:
        with contextlib.suppress(InterruptedError):
            responder.watch_deadlines(tick)

    threading.Thread(target=watch, daemon=True).start()
    try:
        readable, _, _ = select.select([reader], [], [], 1.0)
        assert bool(readable) is not ends_meanwhile
        deadline = time.monotonic() + 2
        while not ends_meanwhile and not exits and time.monotonic() < deadline:
            time.sleep(0.01)  # the exit follows the answer
        assert exits == ([] if ends_meanwhile else [0])
    finally:
        stop.set()
        with responder._backstop:
            responder._running_seq = 0
        responder.session = None
        os.close(reader)
        os.close(writer)


STUCK_ENGINE_PROCESS = """
import sys, time
from engines.process import child

class Stuck:
    \"\"\"A session whose guest is stuck in a host call that honours no deadline.\"\"\"

    def __init__(self, language_engine, *, limits, **_):
        self.language_engine, self.limits = language_engine, limits
        self.in_call_since = self.restore_point = None
        self.alive = True

    def prepare(self): pass
    def close(self): pass
    def interrupt(self, reason): pass
    def timeout_message(self): return "timed out in a host call"
    def captured_logs(self): return ["before the host call"], []

    def execute(self, *args, **kwargs):
        self.in_call_since = time.monotonic()
        time.sleep(3600)

child.Session = Stuck
child.main(int(sys.argv[1]))
"""


def test_the_backstop_ends_a_real_engine_process_whose_guest_ignores_its_deadline() -> None:
    """The engine process's own backstop, as it runs there: the execution arms its
    interval timer, the backstop's thread takes the signal (blocked everywhere else, so it
    kills nothing), answers for the stuck run with what the guest printed, and the
    process exits; a guest that honours nothing still ends at its deadline plus grace."""
    from engines.process import codec
    from engines.process.child import GRACE_SECONDS
    from engines.process.frames import FrameReader, write_frame

    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    cancels_read, cancels_write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-c", STUCK_ENGINE_PROCESS, str(cancels_read)],
        stdin=requests_read,
        stdout=answers_write,
        pass_fds=(cancels_read,),
        cwd=Path(__file__).resolve().parents[2],
    )
    for fd in (requests_read, answers_write, cancels_read):
        os.close(fd)
    answers = FrameReader(answers_read)
    try:
        assert answers.read(time.monotonic() + 30)[0]["ready"] is True
        limits = codec.limits_to_json(Limits(timeout_seconds=0.2))
        open_request = {"op": "open", "language": "python", "compiled": "/none", "limits": limits}
        write_frame(requests_write, open_request)
        assert answers.read(time.monotonic() + 10)[0]["ok"] is True
        started = time.monotonic()
        write_frame(requests_write, {"op": "execute", "seq": 1, "code": "stuck()"})
        answer, blobs = answers.read(time.monotonic() + 10)
        elapsed = time.monotonic() - started
        assert answer["exiting"] is True
        report = codec.report_from_json(answer["report"], blobs)
        assert report.result.error is not None
        assert report.result.error.message == "timed out in a host call"
        assert report.result.stdout == ["before the host call"]
        assert 0.2 + GRACE_SECONDS <= elapsed < 0.2 + GRACE_SECONDS + SLACK
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for fd in (requests_write, answers_read, cancels_write):
            os.close(fd)


def test_a_responder_outside_an_engine_process_arms_no_timer() -> None:
    """Only an engine process's `main` blocks the timer's signal: a `Responder` made
    anywhere else (a test, a tool) runs executions without arming it, where its signal
    would end the process."""
    script = STUCK_ENGINE_PROCESS.replace("time.sleep(3600)", "time.sleep(0.3); raise OSError")
    script = script.replace(
        "child.main(int(sys.argv[1]))",
        "responder = child.Responder(1)\n"
        "responder.session = Stuck(None, limits=None)\n"
        "try:\n"
        "    responder.execute({'code': 'x', 'seq': 1}, [])\n"
        "except OSError:\n"
        "    print('survived')",
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, "0"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (completed.returncode, completed.stdout) == (0, "survived\n"), completed.stderr


def revisit_into_a_stopped_process(
    monkeypatch: pytest.MonkeyPatch,
    then: Callable[[ProcessSession], None],
    *,
    memory_file: bool = False,
) -> ExecutionReport:
    """A Python context holding 2 MB is evicted; its revisit opens an engine process that
    stopped reading (SIGSTOP stands in for a wedged one) before the restore point is
    sent: through its pipe, more than the pipe holds, or (`memory_file`) handed over as a
    memory file. `then` acts on the session meanwhile; the revisit's report, once it
    ended (within 10 s), and the context's state after it are checked."""
    if not memory_file:
        monkeypatch.setattr(EngineProcess, "takes_memory_files", False)
    stored: list[SnapshotDelta] = []
    pool = EngineProcessPool(spares=0)
    session = ProcessSession(
        "python",
        pool=pool,
        workspace=GUEST_LIMITS,
        limits=Limits(timeout_seconds=30),
        restore_source=lambda build: stored[-1] if stored else None,
    )
    stopped: list[int] = []
    acquire = pool.acquire

    def acquire_stopped() -> EngineProcess:
        engine_process = acquire()
        os.kill(engine_process.process.pid, signal.SIGSTOP)
        stopped.append(engine_process.process.pid)
        return engine_process

    try:
        assert session.execute("blob = bytes(range(256)) * 8000").result.error is None
        session.take_snapshot()
        session.collect_snapshot()
        assert session.unstored is not None
        stored.append(session.unstored)
        session.unstored = None
        session._lost()  # evicted: the next run restores the blob into a new process
        monkeypatch.setattr(pool, "acquire", acquire_stopped)
        reports: list[ExecutionReport] = []
        runner = threading.Thread(target=lambda: reports.append(session.execute("len(blob)")))
        runner.start()
        time.sleep(0.5)  # the restore point is being written into the full pipe
        then(session)
        runner.join(10)
        assert not runner.is_alive(), "the revisit still waits for the stopped process"
        monkeypatch.undo()
        again = session.execute("len(blob)")  # a process that reads: nothing was lost
        assert again.result.error is None and again.result.results[0].text == "2048000"
        return reports[0]
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        session.close()
        pool.close()


@pytest.mark.parametrize("memory_file", [False, True], ids=["pipe", "memory-file"])
def test_a_cancel_reaches_a_revisit_whose_engine_process_stopped_reading(
    engines_ready: None, monkeypatch: pytest.MonkeyPatch, memory_file: bool
) -> None:
    """A cancel while the session is opened (the restore point being written, or its
    answer awaited) kills the process being opened; before, it waited for the open,
    which waited for ever."""
    report = revisit_into_a_stopped_process(
        monkeypatch, lambda session: session.cancel(), memory_file=memory_file
    )
    assert report.result.error is not None
    assert report.result.error.message == "Execution cancelled"


@pytest.mark.parametrize("memory_file", [False, True], ids=["pipe", "memory-file"])
def test_a_request_the_engine_process_never_reads_ends_at_its_deadline(
    engines_ready: None, monkeypatch: pytest.MonkeyPatch, memory_file: bool
) -> None:
    """A request's write waits for the process up to the request's deadline, then the
    process is killed and the run fails; before, the write blocked for ever. A restore
    point handed over as a memory file fills no pipe: the open's wait for an answer ends
    at the same deadline, and says so."""
    monkeypatch.setattr(session_module, "REQUEST_SECONDS", 1.5)
    report = revisit_into_a_stopped_process(
        monkeypatch, lambda session: None, memory_file=memory_file
    )
    assert report.result.error is not None
    assert report.result.error.name == "EngineError"
    expected = "no answer within 1.5 s" if memory_file else "stopped reading its requests"
    assert expected in report.result.error.message


@pytest.mark.parametrize("memory_file", [False, True], ids=["pipe", "memory-file"])
async def test_a_revisit_given_up_while_its_engine_process_hangs_frees_the_context(
    tmp_path: Path, engines_ready: None, monkeypatch: pytest.MonkeyPatch, memory_file: bool
) -> None:
    """A run that finds its context evicted opens a session for it in a new engine
    process; one that hangs (SIGSTOP) while it is opened, its restore point on its way in
    (through the pipe or as a memory file), is killed when the caller gives up, so the
    context's next run starts at once, restored. Before, the open went on (for ever, then
    up to its 120 s deadline) and held the context."""
    if not memory_file:
        monkeypatch.setattr(EngineProcess, "takes_memory_files", False)
    backend = open_local_backend(tmp_path / "data", embedded=True, max_resident=1)
    stopped: list[int] = []
    acquire = EngineProcessPool.acquire

    def acquire_stopped(pool: EngineProcessPool) -> EngineProcess:
        engine_process = acquire(pool)
        os.kill(engine_process.process.pid, signal.SIGSTOP)
        stopped.append(engine_process.process.pid)
        return engine_process

    try:
        sandbox = backend.sandbox("hangs")
        kept = await sandbox.interpreter.create_code_context("PYTHON")
        other = await sandbox.interpreter.create_code_context("PYTHON")
        made = await sandbox.interpreter.run_code("blob = bytes(range(256)) * 8000", context=kept)
        assert made.error is None
        assert (await sandbox.interpreter.run_code("1", context=other)).error is None  # evicts
        monkeypatch.setattr(EngineProcessPool, "acquire", acquire_stopped)
        revisit = asyncio.ensure_future(sandbox.interpreter.run_code("len(blob)", context=kept))
        await asyncio.sleep(1.0)  # writing the restore point into the stopped process
        assert stopped and not revisit.done()
        revisit.cancel()
        monkeypatch.undo()
        again = await asyncio.wait_for(
            sandbox.interpreter.run_code("len(blob)", context=kept), timeout=20
        )
        assert again.error is None and again.results[0].text == "2048000"
        # Its history says it was cancelled, and nothing of a fresh start (found by a
        # review: "the context had no snapshot to restore; it started fresh").
        cancelled = [
            entry.result
            for entry in await sandbox.interpreter.history(kept)
            if entry.result is not None and entry.result.error is not None
        ]
        assert [result.error.message for result in cancelled if result.error] == [
            "Execution cancelled"
        ]
        session = cancelled[0].session
        assert session is not None and session.boot == "restored"  # where its state still is
        assert not any("fresh" in note for note in session.notes)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await backend.aclose()


def test_a_cancel_as_the_open_ends_is_a_cancel_not_an_engine_error(engines_ready: None) -> None:
    """A cancel landing once the open's answers are in but before the session knows it
    is open kills the process it was opened in: the run is "Execution cancelled", not
    the engine error of the killed process (found by a review)."""
    pool = EngineProcessPool(spares=0)
    session = ProcessSession("python", pool=pool, limits=Limits(timeout_seconds=30))
    session._lost()  # the next execution opens a new process
    acquire = pool.acquire

    def acquire_then_cancel_after_the_open() -> EngineProcess:
        engine_process = acquire()
        receive = engine_process.receive

        def receive_then_cancel(deadline: float | None) -> tuple[dict[str, Any], list[memoryview]]:
            answer = receive(deadline)
            if session._opening is engine_process:  # the open's last answer is in
                canceller = threading.Thread(target=session.cancel)
                canceller.start()
                canceller.join()
            return answer

        engine_process.receive = receive_then_cancel  # type: ignore[method-assign]
        return engine_process

    pool.acquire = acquire_then_cancel_after_the_open  # type: ignore[method-assign]
    try:
        report = session.execute("6 * 7")
        assert report.result.error is not None
        assert (report.result.error.name, report.result.error.message) == (
            "ExecutionLimitError",
            "Execution cancelled",
        )
    finally:
        session.close()
        pool.close()
