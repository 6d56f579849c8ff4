"""Engine processes are forks of one fork server per pool (issue 23): they share its
imported pages, hold none of its descriptors, report how they ended, and a fork server
that dies is replaced without touching the engine processes already running. Their
cancel channel reaches the execution it names, whatever ran in the process before; an
idle one sleeps."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.cache import EngineCache
from engines.language import PrepareError
from engines.locations import cache_root
from engines.process import EngineProcessPool, ProcessSession, codec, handle, run_stateless
from engines.process.handle import EngineProcessDied
from engines.registry import language_engine
from engines.snapshot import SnapshotDelta
from tests.conftest import wake_ups

pytestmark = pytest.mark.skipif(not handle.FORK_SERVER, reason="needs pidfd and SCM_RIGHTS")

MIB = 1 << 20


def _parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _rollup(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in smaps_rollup")


@pytest.fixture
def pool(all_engines: None) -> Iterator[EngineProcessPool]:
    pool = EngineProcessPool(spares=0)
    yield pool
    pool.close()


def test_engine_processes_are_forks_that_share_the_servers_pages(pool: EngineProcessPool) -> None:
    sessions = [ProcessSession("python", pool=pool) for _ in range(2)]
    try:
        for index, session in enumerate(sessions):
            assert session.execute(f"v = {index}\nv").result.results[0].text == str(index)
        pids = [session._process.process.pid for session in sessions]  # type: ignore[union-attr]
        server = pool._fork_server
        assert server is not None
        assert {_parent_pid(pid) for pid in pids} == {server.process.pid}
        assert _parent_pid(server.process.pid) == os.getpid()
        for pid in pids:
            # The interpreter's and wasmtime's imported objects stay shared copy-on-write:
            # a process started on its own shares none of its anonymous memory.
            assert _rollup(pid, "Shared_Dirty") > 4 * MIB
    finally:
        for session in sessions:
            session.close()


def _answer_41_stored(pool: EngineProcessPool) -> SnapshotDelta:
    """What a Python context that set `answer = 41` stores: its restore point."""
    with ProcessSession("python", pool=pool) as source:
        assert source.execute("answer = 41").result.error is None
        source.take_snapshot()
        source.collect_snapshot()
        assert source.unstored is not None
        return source.unstored


def test_an_engine_process_restores_by_mapping_the_memory_file_the_host_handed_over(
    pool: EngineProcessPool,
) -> None:
    """Issue 23: a new engine process restores a context from a memory file the host
    wrote its blocks into and handed over (no copy through the pipe), maps them
    copy-on-write; the host counts them as the process's memory and keeps no descriptor.
    The process still made a memory file of its own before limiting the size of files it
    writes (sizing it would pass that limit), and the limit holds."""
    stored: list[SnapshotDelta] = []
    sessions = [ProcessSession("python", pool=pool)]
    try:
        assert sessions[0].execute("answer = 41").result.error is None
        sessions[0].take_snapshot()
        sessions[0].collect_snapshot()
        assert sessions[0].unstored is not None
        stored.append(sessions[0].unstored)
        second = ProcessSession("python", pool=pool, restore_source=lambda build: stored[-1])
        sessions.append(second)
        report = second.execute("answer + 1")
        assert report.boot.value == "restored" and report.result.results[0].text == "42"
        pid = second._process.process.pid  # type: ignore[union-attr]
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        assert any("memfd:sandbox-restore" in line and " rw-p " in line for line in maps)
        # not mapped in ahead: the host counts what it handed over
        handed_over = len(stored[-1].blocks) * 4096
        assert second._process.handed_over == handed_over  # type: ignore[union-attr]
        bare = handle.private_bytes(pid)  # an idle process's: steady, give or take a page
        assert second.private_bytes >= bare + handed_over - (256 << 10)
        own_files = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        assert any("memfd:sandbox-snapshot" in target for target in own_files)
        host_files = [os.readlink(fd) for fd in Path("/proc/self/fd").iterdir() if fd.is_symlink()]
        assert not any("sandbox-restore" in target for target in host_files)
        limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
        file_size = next(line for line in limits if line.startswith("Max file size"))
        assert file_size.split()[3:5] == [str(1 << 20), str(1 << 20)]
    finally:
        for session in sessions:
            session.close()


def test_a_restore_source_that_fails_ends_the_process_it_took(
    pool: EngineProcessPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore point is read while the engine process opens the session: a source
    that fails ends that process at once (its answers are unread, so it can serve nobody
    else), the error reaches the caller, and the pool's next session runs."""
    taken: list[handle.EngineProcess] = []
    acquire = pool.acquire

    def recorded() -> handle.EngineProcess:
        taken.append(acquire())
        return taken[-1]

    monkeypatch.setattr(pool, "acquire", recorded)

    def failing(build: str) -> SnapshotDelta | None:
        raise OSError("the store went away")

    with pytest.raises(OSError, match="went away"):
        ProcessSession("python", pool=pool, restore_source=failing)
    [process] = taken
    assert process.dead and process not in pool._idle
    deadline = time.monotonic() + 10
    while process.process.poll() is None:
        assert time.monotonic() < deadline, "the process it took still runs"
        time.sleep(0.02)
    with ProcessSession("python", pool=pool) as session:
        assert session.execute("6 * 7").result.results[0].text == "42"


def test_a_restore_point_goes_only_to_a_session_that_has_not_run(
    pool: EngineProcessPool,
) -> None:
    """A `restore` request anywhere but right after `open` would replace state the guest
    has moved past: it is refused, and the session keeps its state."""
    session = ProcessSession("python", pool=pool)
    try:
        assert session.execute("kept = 7").result.error is None
        session.take_snapshot()
        session.collect_snapshot()
        assert session.unstored is not None
        header, blobs = codec.restore_to_json(session.unstored)
        engine_process = session._process
        assert engine_process is not None
        engine_process.send({"op": "restore", **header}, blobs, deadline=None)
        answer, _ = engine_process.receive(None)
        assert not answer["ok"] and "no session waits for a restore" in answer["message"]
        assert session.execute("kept").result.results[0].text == "7"
        session.reset()  # no live instance now, yet the session has run: still refused
        engine_process.send({"op": "restore", **header}, blobs, deadline=None)
        answer, _ = engine_process.receive(None)
        assert not answer["ok"] and "no session waits for a restore" in answer["message"]
    finally:
        session.close()


def test_each_memory_file_restore_takes_the_file_handed_over_for_it_or_none(
    pool: EngineProcessPool,
) -> None:
    """A `restore` that says `memoryFile` takes the file handed over for it, even when it
    is refused (so the next one never takes a stale one); one whose file did not arrive
    fails the open (the snapshot is not at fault, so it is kept), and one with a file not
    of its memory's size is refused and the session starts fresh."""
    with ProcessSession("python", pool=pool) as source:
        assert source.execute("answer = 41").result.error is None
        source.take_snapshot()
        source.collect_snapshot()
        assert source.unstored is not None
        stored, open_request = source.unstored, source._open_request()
    header, memory_file = codec.restore_memory_file(stored)
    os.close(memory_file)
    restore = {"op": "restore", **header}
    engine_process = pool.acquire()

    def wrong_size_file() -> int:
        wrong = os.memfd_create("wrong")
        os.ftruncate(wrong, 4096)
        return wrong

    def answer_to(*frames: tuple[dict[str, object], int | None]) -> list[dict[str, object]]:
        for request, handed in frames:
            if handed is not None:
                assert engine_process.hand_over(handed, time.monotonic() + 5)
                os.close(handed)
            engine_process.send(request, deadline=None)
        return [engine_process.receive(time.monotonic() + 10)[0] for _ in frames]

    try:
        # refused (no session waits for it), yet its file is taken
        [refused] = answer_to((restore, wrong_size_file()))
        assert "no session waits for a restore" in str(refused["message"])
        # not the restore point's fault: the open fails, the context keeps its snapshot
        opened, restored = answer_to((open_request, None), (restore, None))
        assert opened["ok"] and restored["kind"] == "engine"
        assert "did not arrive" in str(restored["message"])
        opened, restored = answer_to((open_request, None), (restore, wrong_size_file()))
        assert opened["ok"] and "not its size" in str(restored["message"])
        _, right = codec.restore_memory_file(stored)
        opened, restored = answer_to((open_request, None), (restore, right))
        assert opened["ok"] and restored["ok"]
        [ran] = answer_to(({"op": "execute", "seq": 1, "code": "answer + 1"}, None))
        assert ran["ok"] and ran["report"]["result"]["results"][0]["text"] == "42"  # type: ignore[index]
    finally:
        engine_process.kill()


def test_an_engine_process_cannot_send_the_host_descriptors() -> None:
    """The memory file socket is one way: what an engine process sends on it fails, so
    no descriptor it sends sits unread in the host's end, counting against the user's
    limit of descriptors in flight (reached, the host could hand over none, nor fork)."""
    pair = handle._handoff_pair()
    assert pair is not None
    host, engine = pair
    with host, engine:
        with pytest.raises(BrokenPipeError):
            socket.send_fds(engine, [b"memory"], [0])
        socket.send_fds(host, [b"memory"], [0])  # the host's hand-over still goes through
        message, fds, _, _ = socket.recv_fds(engine, 16, 1)
        for fd in fds:
            os.close(fd)
        assert message == b"memory" and len(fds) == 1


def test_a_refused_memory_file_restore_is_not_counted_as_held(pool: EngineProcessPool) -> None:
    """The bytes handed over count as the process's memory only once its session took
    them: a restore point it refuses (not a whole number of 64 KiB pages) is not counted,
    and the session starts fresh and says so."""
    malformed = SnapshotDelta(3 * 4096, {0: memoryview(bytes(4096))}, {}, {}, from_image=True)
    with ProcessSession("python", pool=pool, restore_source=lambda build: malformed) as session:
        report = session.execute("1 + 1")
        assert report.result.results[0].text == "2" and report.restore_point_dropped
        assert session._process is not None and session._process.handed_over == 0


def test_a_memory_file_the_host_cannot_send_goes_through_the_pipe_instead(
    pool: EngineProcessPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-over the kernel refuses (too many descriptors in flight, no memory) sends
    nothing, so the restore point goes through the pipe instead and the context is
    restored; one to a process that is gone fails its open."""
    stored = _answer_41_stored(pool)
    send_fds = socket.send_fds
    refusal: list[OSError] = [OSError(errno.ETOOMANYREFS, "Too many references")]

    def refusing(sock: socket.socket, buffers: list[bytes], fds: list[int]) -> int:
        if buffers == [b"memory"]:
            raise refusal[0]
        return send_fds(sock, buffers, fds)

    monkeypatch.setattr(socket, "send_fds", refusing)
    with ProcessSession("python", pool=pool, restore_source=lambda build: stored) as revisit:
        report = revisit.execute("answer + 1")
        assert report.boot.value == "restored" and report.result.results[0].text == "42"
        assert revisit._process is not None and revisit._process.handed_over == 0
    refusal[0] = BrokenPipeError(errno.EPIPE, "Broken pipe")
    with pytest.raises(PrepareError, match="engine process failed"):
        ProcessSession("python", pool=pool, restore_source=lambda build: stored)


def test_a_restore_point_through_the_pipe_restores_the_same_state(
    pool: EngineProcessPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the host cannot hand over memory files, the restore point's blocks go through
    the pipe, straight into the engine process's own memory file."""
    monkeypatch.setattr(handle.EngineProcess, "takes_memory_files", False)
    stored = _answer_41_stored(pool)
    with ProcessSession("python", pool=pool, restore_source=lambda build: stored) as revisit:
        report = revisit.execute("answer + 1")
        assert report.boot.value == "restored" and report.result.results[0].text == "42"
        pid = revisit._process.process.pid  # type: ignore[union-attr]
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "memfd:sandbox-restore" not in maps and "memfd:sandbox-snapshot" in maps


def test_an_engine_process_holds_no_descriptor_of_the_fork_server(pool: EngineProcessPool) -> None:
    first, second = pool.acquire(), pool.acquire()
    try:
        for engine_process in (first, second):
            targets = {
                int(entry.name): os.readlink(entry)
                for entry in Path(f"/proc/{engine_process.process.pid}/fd").iterdir()
            }
            # Its frame pipes, cancel pipe, memory file socket and log only: no control
            # socket, no pidfd of a sibling.
            assert sum(target.startswith("socket:") for target in targets.values()) == 1
            assert not [target for target in targets.values() if target.startswith("anon")]
            assert sum(target.startswith("pipe:") for target in targets.values()) == 3
    finally:
        pool.release(first)
        pool.release(second)


def test_a_forked_process_reports_how_it_ended(pool: EngineProcessPool) -> None:
    engine_process = pool.acquire()
    os.kill(engine_process.process.pid, signal.SIGKILL)
    assert engine_process.process.wait(timeout=10) == -signal.SIGKILL
    with pytest.raises(EngineProcessDied, match="signal 9"):
        engine_process.send({"op": "close"}, deadline=None)
        engine_process.receive(None)


def test_a_fork_server_that_died_is_replaced_and_running_processes_go_on(
    pool: EngineProcessPool,
) -> None:
    running = ProcessSession("python", pool=pool)
    try:
        assert running.execute("v = 41").result.error is None
        server = pool._fork_server
        assert server is not None
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)
        assert running.execute("v + 1").result.results[0].text == "42"
        fresh = ProcessSession("python", pool=pool)
        try:
            assert fresh.execute("1 + 1").result.results[0].text == "2"
            assert pool._fork_server is not server and pool._fork_server is not None
        finally:
            fresh.close()
    finally:
        running.close()


def test_without_a_fork_server_processes_start_as_new_interpreters(
    all_engines: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handle, "FORK_SERVER", False)
    monkeypatch.setattr("engines.process.pool.FORK_SERVER", False)
    pool = EngineProcessPool(spares=0)
    try:
        session = ProcessSession("python", pool=pool)
        try:
            assert session.execute("6 * 7").result.results[0].text == "42"
            pid = session._process.process.pid  # type: ignore[union-attr]
            assert _parent_pid(pid) == os.getpid() and pool._fork_server is None
        finally:
            session.close()
    finally:
        pool.close()


def test_closing_the_pool_ends_the_fork_server_and_its_processes(pool: EngineProcessPool) -> None:
    engine_process = pool.acquire()
    server = pool._fork_server
    assert server is not None
    pool.close()
    assert server.process.wait(timeout=10) is not None
    # Killed; the server may have ended before it could report how.
    assert engine_process.process.wait(timeout=10) in (-signal.SIGKILL, handle.EXIT_UNKNOWN)
    with pytest.raises(EngineProcessDied):
        pool.acquire()


SLEEP = "import time\ntime.sleep(20)"


def test_a_cancel_reaches_a_session_in_a_process_that_ran_stateless_before(
    pool: EngineProcessPool,
) -> None:
    """Execution numbers run on across everything a reused process did, so a stateless
    run before a session cannot shift them and make the session's cancel miss."""
    assert run_stateless(pool, "python", "1 + 1").results[0].text == "2"
    [reused] = pool._idle
    with ProcessSession("python", pool=pool) as session:
        assert session._process is reused
        threading.Timer(0.5, session.cancel).start()
        started = time.monotonic()
        error = session.execute(SLEEP).result.error
        assert error is not None and error.message == "Execution cancelled"
        assert time.monotonic() - started < 10


def test_a_cancel_that_overtakes_its_request_still_cancels_it(pool: EngineProcessPool) -> None:
    """Cancels have a channel of their own, so one can arrive before the request it names
    was read: that execution starts cancelled, and the next one is not touched."""
    with ProcessSession("python", pool=pool) as session:
        assert session.execute("1").result.error is None
        engine_process = session._process
        assert engine_process is not None
        seq = engine_process.next_seq()
        engine_process.send_cancel(seq)
        time.sleep(0.3)  # the cancel is surely read first
        request = {"op": "execute", "seq": seq, "code": SLEEP, "env": {}, "cwd": "/workspace"}
        started = time.monotonic()
        engine_process.send(request, deadline=None)
        answer, blobs = engine_process.receive(time.monotonic() + 30)
        error = codec.report_from_json(answer["report"], blobs).result.error
        assert error is not None and error.message == "Execution cancelled"
        assert time.monotonic() - started < 10
        assert session.execute("6 * 7").result.results[0].text == "42"


@pytest.mark.parametrize("channel", ["requests", "cancels"])
def test_garbage_from_the_host_ends_the_engine_process(
    pool: EngineProcessPool, channel: str
) -> None:
    """A frame the engine process cannot read, on either channel (and on the requests'
    while a thread reads the one after `open`), ends it with a line in its log: it never
    waits for a request that cannot come, or goes on without its cancels."""
    session = ProcessSession("python", pool=pool)
    try:
        engine_process = session._process
        assert engine_process is not None
        fd = (engine_process._requests if channel == "requests" else engine_process._cancels).fd
        os.write(fd, b"\xff\xff\xff\xff")  # a header longer than any allowed
        assert engine_process.process.wait(timeout=10) == 1
        assert "a channel from the host is broken" in engine_process.stderr_tail()
    finally:
        session.close()


def test_an_idle_engine_process_sleeps(pool: EngineProcessPool) -> None:
    """A context kept all day costs no CPU while nothing runs in it: no thread of its
    engine process wakes up between requests (the deadline backstop waits for a run)."""
    with ProcessSession("python", pool=pool) as session:
        assert session.execute("1 + 1").result.results[0].text == "2"
        pid = session._process.process.pid  # type: ignore[union-attr]
        time.sleep(0.2)  # the answer's own wake-ups are over
        before = wake_ups([pid])
        time.sleep(1.0)
        assert wake_ups([pid]) - before <= 2  # was 20 a second
        assert session.execute("1 + 2").result.results[0].text == "3"  # still answers


def test_a_process_forked_after_a_language_was_used_opens_it_without_loading_it(
    pool: EngineProcessPool,
) -> None:
    """The pool has its fork server load each compiled entry a session opens, so the
    processes forked after start with it loaded (Python's took 6.5 ms a process to
    load); they keep its files open and no other descriptor of the server (their one
    socket is the host's memory file channel)."""
    with ProcessSession("python", pool=pool) as session:
        assert session.execute("v = 41\nv + 1").result.results[0].text == "42"
        assert session.preloaded
        process = session._process
        assert process is not None
        targets = [os.readlink(fd) for fd in Path(f"/proc/{process.process.pid}/fd").iterdir()]
        compiled = str(session._compiled)
        kept = [target for target in targets if target.startswith(compiled)]
        assert kept and sum(target.startswith("socket:") for target in targets) == 1
        # another instance of the same loaded entry in the same process: a fresh image
        session.reset()
        assert session.execute("'v' in globals()").result.results[0].text == "False"


def test_an_entry_replaced_since_it_was_loaded_is_loaded_again(
    pool: EngineProcessPool,
) -> None:
    """The cache replaces an entry by renaming a new one into place: a child opens a
    session of the entry at the path, never of the one its fork server loaded before."""
    with ProcessSession("perl", pool=pool) as session:
        assert session.preloaded and session.execute("1").result.error is None
        compiled = session._compiled
    copy = compiled.with_name(compiled.name + ".copy")
    shutil.copy2(compiled, copy)  # the same bytes and times: the cache's record holds
    os.replace(copy, compiled)
    for _ in range(2):  # the process released above, then a new fork
        with ProcessSession("perl", pool=pool) as session:
            assert not session.preloaded
            assert session.execute("our $x = 2; $x * 21").result.results[0].text == "42"


def test_a_process_forked_before_a_language_was_loaded_is_not_kept(
    pool: EngineProcessPool,
) -> None:
    with ProcessSession("perl", pool=pool) as perl:
        assert perl.execute("1").result.error is None
    [older] = pool._idle  # forked before Python's entry was loaded
    with ProcessSession("python", pool=pool) as python:
        assert python._process is older and not python.preloaded
        assert python.execute("1 + 1").result.results[0].text == "2"
    assert older not in pool._idle and older.dead
    with ProcessSession("python", pool=pool) as python:
        assert python.preloaded


@pytest.mark.parametrize("language", ["perl", "python"])
def test_an_entry_reached_through_a_symlink_is_kept_open_in_the_child(
    pool: EngineProcessPool, tmp_path: Path, language: str
) -> None:
    """A child keeps the descriptors of the entries its server loaded, found by what they
    are: found by name, a cache dir reached through a symlink matched none, the child
    closed them, and every run failed (EBADF, or EACCES where its own pipe took the
    number: a readable file there would have been mapped as the guest's memory)."""
    link = tmp_path / "cache"
    link.symlink_to(cache_root(), target_is_directory=True)
    cache = EngineCache(language_engine(language), root=link)
    for _ in range(2):  # in the process forked after the load, then in that one reused
        with ProcessSession(language, pool=pool, cache=cache) as session:
            assert session.preloaded
            assert session.execute("6 * 7").result.results[0].text == "42"
