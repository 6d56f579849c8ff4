"""The shared host (engines.session) on every real engine: limits, cancel, trap recovery,
persistence and snapshots behave the same way for all four languages."""

from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import wasmtime

from engines import snapshot as snapshots
from engines.host import make_engine, new_store
from engines.process.handle import private_bytes
from engines.registry import LANGUAGES, language_engine
from engines.result import RESET_NOTE, Boot, ExecutionReport, Limits
from engines.session import Session
from engines.snapshot import (
    ARM_AFTER,
    BLOCK_BYTES,
    BlockMemory,
    MemorySnapshot,
    SnapshotDelta,
    block_memory,
    sparse_snapshot,
)
from engines.vfs import PathState, TreeUpdate, VirtualFS
from tests.conftest import require_engine
from tests.engines import blocks_counted_as_written, run, whole_memory
from tests.engines.prepared import put_files


@dataclass(frozen=True)
class Snippets:
    value: str
    value_text: str
    loop: str
    flood: str
    big_result: str
    x_text: str
    """A string of `{count}` x's as the result."""
    longest_x_text: int
    """The most x's whose result (its compact JSON) is within the result limit."""
    define: str
    use: str
    use_text: str
    read_env: str
    env_text: str
    allocate: str
    io: str
    """Writes "out" then "two lines" (two lines) to stdout and "err" to stderr."""
    write: str
    """Writes "kept" to `note.txt`."""
    write_and_fail: str
    """Writes "lost" to `note.txt` and `other.txt`, then raises."""
    read_given: str
    """Reads `given.txt`, whose content "from owner" is `given_text`."""
    given_text: str


SNIPPETS = {
    "javascript": Snippets(
        value="1+1",
        value_text="2",
        loop="for (;;) {}",
        flood="for (let i = 0; i < 300; i++) console.log(i)",
        big_result="'x'.repeat(70000)",
        x_text="'x'.repeat({count})",
        longest_x_text=65_523,
        define="let answer = 41",
        use="answer + 1",
        use_text="42",
        read_env="process.env.GREETING",
        env_text="'hola'",
        allocate="new Uint8Array(200 << 20).length",
        io="console.log('out'); console.log('two\\nlines'); console.error('err')",
        write="fs.writeFileSync('note.txt', 'kept')",
        write_and_fail="fs.writeFileSync('note.txt', 'lost'); "
        "fs.writeFileSync('other.txt', 'lost'); throw new Error('x')",
        read_given="fs.readFileSync('given.txt', 'utf8')",
        given_text="'from owner'",
    ),
    "python": Snippets(
        value="1+1",
        value_text="2",
        loop="while True: pass",
        flood="print('x' * 40000)",
        big_result="'x' * 70000",
        x_text="'x' * {count}",
        longest_x_text=65_521,  # [{"text":"'x…'"}]
        define="answer = 41",
        use="answer + 1",
        use_text="42",
        read_env="import os; os.environ['GREETING']",
        env_text="'hola'",
        allocate="len(bytearray(200 << 20))",
        io="import sys; print('out'); print('two\\nlines'); print('err', file=sys.stderr)",
        write="open('note.txt', 'w').write('kept')",
        write_and_fail="for name in ('note.txt', 'other.txt'):\n    open(name, 'w').write('lost')\n"
        "raise ValueError('x')",
        read_given="open('given.txt').read()",
        given_text="'from owner'",
    ),
    "perl": Snippets(
        value="1+1",
        value_text="2",
        loop="1 while 1",
        flood='print "x" x 40000',
        big_result='"x" x 70000',
        x_text='"x" x {count}',
        longest_x_text=65_523,  # [{"text":"x…"}]
        define="our $answer = 41",
        use="$answer + 1",
        use_text="42",
        read_env="$ENV{GREETING}",
        env_text="hola",
        allocate='length("x" x (200 << 20))',
        io='print "out\\ntwo\\nlines\\n"; print STDERR "err\\n"',
        write='open(my $f, ">", "note.txt") or die $!; print $f "kept"; close $f; 1',
        write_and_fail='for my $n ("note.txt", "other.txt") '
        '{ open(my $f, ">", $n) or die $!; print $f "lost"; close $f } die "x\\n"',
        read_given='open(my $f, "<", "given.txt") or die $!; scalar <$f>',
        given_text="from owner",
    ),
    "ruby": Snippets(
        value="1+1",
        value_text="2",
        loop="loop {}",
        flood='print "x" * 40000',
        big_result='"x" * 70000',
        x_text='"x" * {count}',
        longest_x_text=65_494,  # {"results":[{"text":"\"x…\""}],"error":null}: its whole answer
        define="answer = 41",
        use="answer + 1",
        use_text="42",
        read_env='ENV["GREETING"]',
        env_text='"hola"',
        allocate='("x" * (200 << 20)).size',
        io='puts "out"; puts "two\\nlines"; $stderr.puts "err"',
        write='File.write("note.txt", "kept")',
        write_and_fail='File.write("note.txt", "lost"); File.write("other.txt", "lost"); raise "x"',
        read_given='File.read("given.txt")',
        given_text='"from owner"',
    ),
}

OUTPUT_LIMIT = {"javascript": "Console output limit exceeded"}


@pytest.fixture(params=LANGUAGES)
def language(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require_engine(name)
    return name


@pytest.fixture
def workspace() -> VirtualFS:
    return VirtualFS()


@pytest.fixture
def session(language: str, workspace: VirtualFS) -> Iterator[Session]:
    with Session(language, workspace=workspace) as live:
        yield live


def test_value_usage_and_engine_string(language: str) -> None:
    snippets = SNIPPETS[language]
    result = run(language, snippets.value)
    assert result.error is None
    assert [entry.text for entry in result.results] == [snippets.value_text]
    assert result.language == language
    assert result.engine == language_engine(language).engine
    assert result.usage is not None
    assert 0 < result.usage.fuel_consumed < result.usage.fuel_limit
    assert result.usage.fuel_limit == language_engine(language).fuel


def test_logs_are_split_into_lines_per_stream(language: str) -> None:
    result = run(language, SNIPPETS[language].io)
    assert result.error is None
    # Spec 3.4: WASI output is split on newlines; JavaScript has one entry per console call.
    lines = ["out", "two\nlines"] if language == "javascript" else ["out", "two", "lines"]
    assert result.stdout == lines
    assert result.stderr == ["err"]


def test_environment_is_exactly_what_is_given(language: str) -> None:
    snippets = SNIPPETS[language]
    result = run(language, snippets.read_env, {"GREETING": "hola"})
    assert [entry.text for entry in result.results] == [snippets.env_text]


POSIX_STUBS = {
    "python": "import os\n[os.getpid()]",
    "perl": '[$$, getppid(), $<, $>, "$(", "$)"]',
    "ruby": "[$$, Process.pid, Process.ppid, Process.uid, Process.gid, Process.euid, Process.egid]",
}
"""Spec 9.3's fixed POSIX stubs, read the ways each language offers (Python on WASI has
only `getpid`)."""

POSIX_STUB_VALUES = {
    "python": [1],
    "perl": [1, 0, 1000, 1000, "1000", "1000"],
    "ruby": [1, 1, 0, 1000, 1000, 1000, 1000],
}


@pytest.mark.parametrize("language", sorted(POSIX_STUBS))
def test_process_ids_are_the_fixed_stubs(language: str) -> None:
    require_engine(language)
    stateless = run(language, POSIX_STUBS[language])
    assert stateless.error is None
    assert stateless.results[0].json == POSIX_STUB_VALUES[language]
    with Session(language, workspace=VirtualFS()) as live:
        in_session = live.execute(POSIX_STUBS[language]).result
    assert in_session.error is None
    assert in_session.results[0].json == POSIX_STUB_VALUES[language]


DEV_NULL = {
    "python": "import os\nwith open(os.devnull, 'w') as sink: sink.write('gone')\n"
    "with open(os.devnull) as source: read = source.read()\n[read, *os.listdir('/dev')]",
    "perl": 'open(my $sink, ">", "/dev/null") or die $!; print $sink "gone"; close $sink; '
    'open(my $source, "<", "/dev/null") or die $!; my $read = join "", <$source>; '
    'opendir(my $dev, "/dev") or die $!; [$read, sort grep { !/^\\./ } readdir $dev]',
    "ruby": 'File.write(File::NULL, "gone"); [File.read(File::NULL), *Dir.children("/dev")]',
}
"""Spec 9.3: `/dev/null` is there, read-only directory, writes vanish, reads are empty."""


@pytest.mark.parametrize("language", sorted(DEV_NULL))
def test_dev_null_takes_writes_and_reads_empty(language: str) -> None:
    require_engine(language)
    stateless = run(language, DEV_NULL[language])
    assert stateless.error is None
    assert stateless.results[0].json == ["", "null"]
    with Session(language, workspace=VirtualFS()) as live:
        in_session = live.execute(DEV_NULL[language]).result
    assert in_session.error is None
    assert in_session.results[0].json == ["", "null"]


def test_state_persists_in_a_session(session: Session, language: str) -> None:
    snippets = SNIPPETS[language]
    assert session.execute(snippets.define).result.error is None
    report = session.execute(snippets.use)
    assert [entry.text for entry in report.result.results] == [snippets.use_text]
    assert report.boot is Boot.RESIDENT


def test_a_run_returns_its_changes_and_an_error_takes_them_back(
    session: Session, language: str, workspace: VirtualFS
) -> None:
    """Spec 6.6: the report carries what the run changed in the workspace; a run that
    ends with an error leaves the workspace as it was and reports no change."""
    snippets = SNIPPETS[language]
    kept = session.execute(snippets.write)
    assert kept.result.error is None
    assert [(state.path, state.kind, state.data) for state in kept.changes] == [
        ("note.txt", "file", b"kept")
    ]
    failed = session.execute(snippets.write_and_fail)
    assert failed.result.error is not None
    assert failed.changes == []
    assert workspace.files() == {"note.txt": b"kept"}
    update = TreeUpdate((PathState("given.txt", "file", b"from owner"),))
    read = session.execute(snippets.read_given, update=update)
    assert _texts(read) == [snippets.given_text]
    assert read.changes == []
    assert workspace.files() == {"note.txt": b"kept", "given.txt": b"from owner"}


def test_a_trapped_run_takes_its_changes_back(language: str, workspace: VirtualFS) -> None:
    """A run that ends in a trap (fuel) changes nothing in the workspace either."""
    snippets = SNIPPETS[language]
    with Session(language, workspace=workspace, limits=Limits(fuel=5_000_000)) as live:
        assert live.execute(snippets.write).result.error is None
        put_files(workspace, {"note.txt": "before"})
        report = live.execute(f"{snippets.write};\n{snippets.loop}")
        assert report.invalidated and report.result.error is not None
        assert report.changes == []
        assert workspace.files() == {"note.txt": b"before"}


def test_fuel_exhaustion_is_a_limit_and_the_session_recovers(
    session: Session, language: str
) -> None:
    snippets = SNIPPETS[language]
    session.execute(snippets.define)
    started = time.monotonic()
    report = session.execute(snippets.loop)
    elapsed = time.monotonic() - started
    error = report.result.error
    assert error is not None
    assert (error.name, error.message) == ("ExecutionLimitError", "Execution fuel exhausted")
    assert report.result.usage is not None
    assert report.result.usage.fuel_consumed >= report.result.usage.fuel_limit
    assert report.invalidated
    assert elapsed < 10
    after = session.execute(snippets.value)
    assert after.result.error is None
    assert after.boot is Boot.FRESH
    assert [entry.text for entry in after.result.results] == [snippets.value_text]


def test_a_zero_limit_is_that_limit_not_the_default(language: str) -> None:
    """`Limits` means None by "the language's default": a budget of 0 fuel runs nothing,
    and a memory cap of 0 bytes fits no instance (both used to mean the default)."""
    with Session(language, limits=Limits(fuel=0)) as live:
        report = live.execute("1")
        assert report.result.error is not None
        assert report.result.error.message == "Execution fuel exhausted"
        assert report.result.usage is not None and report.result.usage.fuel_limit == 0
    with Session(language, limits=Limits(memory_bytes=0)) as live:
        report = live.execute("1")
        assert report.result.error is not None
        assert report.result.error.name == "EngineError"
        assert "exceeds memory limits" in report.result.error.message


def test_stateless_limit_has_no_logs_and_no_usage(language: str) -> None:
    snippets = SNIPPETS[language]
    result = run(language, snippets.loop, limits=Limits(fuel=5_000_000))
    assert result.error is not None
    assert result.error.message == "Execution fuel exhausted"
    assert result.usage is None
    assert result.stdout == [] and result.stderr == []


def test_wall_clock_timeout(session: Session, language: str) -> None:
    snippets = SNIPPETS[language]
    session.limits = Limits(fuel=10**15, timeout_seconds=0.5)
    started = time.monotonic()
    report = session.execute(snippets.loop)
    assert report.result.error is not None
    assert report.result.error.message == "Execution timed out after 0.5 s"
    assert time.monotonic() - started < 5


def test_cancel_from_another_thread(session: Session, language: str) -> None:
    snippets = SNIPPETS[language]
    session.limits = Limits(fuel=10**15, timeout_seconds=60)
    session.execute(snippets.value)
    timer = threading.Timer(0.3, session.cancel)
    timer.start()
    started = time.monotonic()
    report = session.execute(snippets.loop)
    timer.join()
    assert report.result.error is not None
    assert report.result.error.message == "Execution cancelled"
    assert time.monotonic() - started < 5
    assert session.execute(snippets.value).result.error is None


def test_output_limit(session: Session, language: str) -> None:
    snippets = SNIPPETS[language]
    report = session.execute(snippets.flood)
    error = report.result.error
    assert error is not None
    assert error.name == "ExecutionLimitError"
    assert error.message == OUTPUT_LIMIT.get(language, "Output limit exceeded")
    # A WASI language's limit ends its interpreter, and the run says so (as fuel does).
    ended = language != "javascript"
    assert report.invalidated is ended
    assert [note.startswith(RESET_NOTE) for note in report.notes] == ([True] if ended else [])
    assert session.execute(snippets.value).result.error is None


def test_result_limit(session: Session, language: str) -> None:
    snippets = SNIPPETS[language]
    report = session.execute(snippets.big_result)
    assert report.result.error is not None
    assert report.result.error.message == "Result limit exceeded"
    assert report.result.results == []
    ended = language != "javascript"
    assert [note.startswith(RESET_NOTE) for note in report.notes] == ([True] if ended else [])
    # The limit is on the results' compact JSON, as the reference encodes it: one x more
    # than fits is over it (a space after the colon would put the longest over too).
    longest = snippets.longest_x_text
    fits = session.execute(snippets.x_text.format(count=longest)).result
    assert fits.error is None and "x" * longest in fits.results[0].text
    over = session.execute(snippets.x_text.format(count=longest + 1)).result
    assert over.error is not None and over.error.message == "Result limit exceeded"


def test_memory_cap_is_an_error_not_a_crash(session: Session, language: str) -> None:
    snippets = SNIPPETS[language]
    report = session.execute(snippets.allocate)
    assert report.result.error is not None, "allocating 200 MiB must fail under the cap"
    assert session.execute(snippets.value).result.error is None


def test_snapshot_restores_state_into_a_new_session(language: str, workspace: VirtualFS) -> None:
    snippets = SNIPPETS[language]
    if not language_engine(language).snapshots:
        with Session(language, workspace=workspace) as live:
            live.execute(snippets.define)
            assert live.take_snapshot() is None
        return
    with Session(language, workspace=workspace) as first:
        first.execute(snippets.define)
        snapshot = first.take_snapshot()
    assert snapshot is not None
    with Session(language, workspace=workspace, restore_point=snapshot) as second:
        report = second.execute(snippets.use)
        assert report.boot is Boot.RESTORED
        assert [entry.text for entry in report.result.results] == [snippets.use_text]


def test_python_random_is_reseeded_after_a_restore(workspace: VirtualFS) -> None:
    """Spec 7.7: instances restored from one snapshot do not repeat one `random` sequence."""
    require_engine("python")
    with Session("python", workspace=workspace) as first:
        first.execute("import random\nkept = 41")
        snapshot = first.take_snapshot()
    assert snapshot is not None
    draws = []
    for _ in range(2):
        with Session("python", workspace=workspace, restore_point=snapshot) as restored:
            report = restored.execute("random.random()")
            assert report.boot is Boot.RESTORED
            draws.append(report.result.results[0].text)
            assert restored.execute("kept").result.results[0].text == "41"
    assert draws[0] != draws[1]


def test_after_a_trap_state_comes_from_the_last_snapshot_or_starts_fresh(
    language: str, workspace: VirtualFS
) -> None:
    """Snapshot engines (all four) restore the last snapshot; others start fresh."""
    snippets = SNIPPETS[language]
    with Session(language, workspace=workspace, limits=Limits(fuel=5_000_000)) as live:
        live.execute(snippets.define)
        live.take_snapshot()
        assert live.execute(snippets.loop).invalidated
        report = live.execute(snippets.use)
        if language_engine(language).snapshots:
            assert report.boot is Boot.RESTORED
            assert [entry.text for entry in report.result.results] == [snippets.use_text]
        else:
            assert report.boot is Boot.FRESH
            assert report.result.error is not None  # the definition is gone


def test_a_snapshot_keeping_only_written_blocks_restores_the_same_memory(
    language: str, workspace: VirtualFS
) -> None:
    """Issue 23: a snapshot keeps only the blocks the instance wrote (the rest being its
    image's), from the first one on, and restores memory and globals byte for byte, after
    a trap, and the next snapshot into it sends only what changed."""
    snippets = SNIPPETS[language]
    with Session(language, workspace=workspace, limits=Limits(fuel=5_000_000)) as live:
        live.execute(snippets.define)
        snapshot = live.take_snapshot()
        assert snapshot is not None and snapshot.written is not None
        assert isinstance(snapshot.memory, BlockMemory)
        assert snapshot.sparse and 0 < sum(snapshot.written) < len(snapshot.written) / 2
        whole, globals_ = whole_memory(live), dict(snapshot.globals)
        assert live.execute(snippets.loop).invalidated
        assert live._boot() is Boot.RESTORED
        assert live._store is not None and live._instance is not None
        again = live.language_engine.take_snapshot(live._store, live._instance)
        assert whole_memory(live) == whole and again.globals == globals_
        snapshot.changed_blocks.clear()
        report = live.execute(snippets.use)
        assert [entry.text for entry in report.result.results] == [snippets.use_text]
        assert live.take_snapshot() is snapshot and snapshot.sparse
        assert 0 < len(snapshot.changed_blocks) < sum(snapshot.written)


needs_memory_files = pytest.mark.skipif(
    not hasattr(os, "memfd_create"), reason="memory files are Linux's"
)


def _kept_snapshot(language: str, workspace: VirtualFS, code: str) -> MemorySnapshot:
    """The snapshot of a session that ran `code`, keeping only its written blocks, as an
    engine process keeps it."""
    with Session(language, workspace=workspace) as first:
        first.execute(code)
        snapshot = first.take_snapshot()
    assert snapshot is not None
    snapshot.keep_written_only()
    return snapshot


REASSIGN = {
    "javascript": "answer = 99",
    "python": "answer = 99",
    "perl": "$answer = 99",
    "ruby": "answer = 99",
}
"""Gives the variable `define` made another value, 99."""


def _guest_mappings_of_snapshots() -> int:
    """Private (copy-on-write) mappings of snapshot memory files in this process: a
    snapshot's own view of its file is shared, a guest's restore is private."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    return sum(1 for line in maps if "memfd:sandbox-snapshot" in line and " rw-p " in line)


@needs_memory_files
def test_a_restore_maps_its_blocks_and_the_guest_writes_its_own_copies(
    language: str, workspace: VirtualFS
) -> None:
    """Issue 23: a restore maps the kept blocks copy-on-write from the snapshot's memory
    file. What the restored guest writes stays its own until a snapshot is taken; one taken
    into the mapped restore point restores the new state; closing unmaps everything."""
    snippets = SNIPPETS[language]
    before = _guest_mappings_of_snapshots()
    snapshot = _kept_snapshot(language, workspace, snippets.define)
    assert isinstance(snapshot.memory, BlockMemory)
    kept = bytes(snapshot.memory)
    with Session(language, workspace=workspace, restore_point=snapshot) as second:
        assert second.execute(REASSIGN[language]).result.error is None
        assert _guest_mappings_of_snapshots() > before
        assert bytes(snapshot.memory) == kept
        assert _texts(second.execute(snippets.use)) == ["100"]
        assert second.take_snapshot() is snapshot
        assert bytes(snapshot.memory) != kept
        assert _texts(second.execute(snippets.use)) == ["100"]
    assert _guest_mappings_of_snapshots() == before
    with Session(language, workspace=workspace, restore_point=snapshot) as third:
        report = third.execute(snippets.use)
        assert report.boot is Boot.RESTORED and _texts(report) == ["100"]


GROW = {
    "javascript": "globalThis.big = new Uint8Array(16 << 20); 1",
    "python": "big = bytearray(16 << 20)",
    "perl": "our $big = 'x' x (16 << 20); 1",
    "ruby": "$big = 'x' * (16 << 20); 1",
}
"""Grows the guest's memory by 16 MiB."""


@needs_memory_files
def test_memory_a_restored_guest_maps_outlives_the_snapshot_memory_it_replaced(
    language: str, workspace: VirtualFS
) -> None:
    """A snapshot taken after the restored guest grew its memory moves to a larger
    window, and the guest's untouched restored pages are mapped from that one: the old
    window can go (freeing it while the guest still mapped it would turn those pages to
    zeros)."""
    snippets = SNIPPETS[language]
    snapshot = _kept_snapshot(language, workspace, snippets.define)
    with Session(
        language, workspace=workspace, limits=Limits(fuel=10**10), restore_point=snapshot
    ) as second:
        assert _texts(second.execute(snippets.use)) == ["42"]
        length = len(snapshot.memory)
        assert second.execute(GROW[language]).result.error is None
        old_window = weakref.ref(snapshot.memory)
        assert second.take_snapshot() is snapshot and len(snapshot.memory) > length
        assert snapshot.mapped is not None and snapshot.mapped.memory is snapshot.memory
        gc.collect()
        assert old_window() is None
        assert second._store is not None and second._instance is not None
        whole = second.language_engine.take_snapshot(second._store, second._instance).memory
        assert snapshot.written is not None
        for block in (index for index, kept in enumerate(snapshot.written) if kept):
            span = slice(block * 4096, (block + 1) * 4096)
            assert whole[span] == snapshot.memory[span], f"block {block} changed"
        assert _texts(second.execute(snippets.use)) == ["42"]
    with Session(language, workspace=workspace, restore_point=snapshot) as third:
        assert _texts(third.execute(snippets.use)) == ["42"]
        assert snapshot.mapped is not None and snapshot.mapped.memory is snapshot.memory


@dataclass(frozen=True)
class Buffer:
    """8 MiB of sevens in guest memory: made, sampled (three bytes summed: 21), and
    zeroed in place."""

    fill: str
    sample: str
    zero: str


BUFFERS = {
    "javascript": Buffer(
        "globalThis.buf = new Uint8Array(8 << 20).fill(7); 1",
        "buf[0] + buf[4 << 20] + buf[(8 << 20) - 1]",
        "buf.fill(0); 1",
    ),
    "python": Buffer(
        "buf = bytearray(b'\\x07') * (8 << 20)",
        "buf[0] + buf[4 << 20] + buf[-1]",
        "for at in range(0, len(buf), 1 << 16):\n    buf[at : at + (1 << 16)] = bytes(1 << 16)",
    ),
    "perl": Buffer(
        'our $buf = "\\x07" x (8 << 20); 1',
        "ord(substr($buf, 0, 1)) + ord(substr($buf, 4 << 20, 1)) + ord(substr($buf, -1))",
        "$buf =~ tr/\\x07/\\0/; 1",
    ),
    "ruby": Buffer(
        '$buf = "\\x07" * (8 << 20); 1',
        "$buf.getbyte(0) + $buf.getbyte(4 << 20) + $buf.getbyte(-1)",
        '$buf.tr!("\\x07", "\\0"); 1',
    ),
}


@needs_memory_files
def test_blocks_unchanged_through_snapshots_are_armed_and_what_the_guest_writes_is_kept(
    language: str, workspace: VirtualFS
) -> None:
    """Blocks a guest leaves alone through `ARM_AFTER` snapshots are mapped from the
    snapshot's memory, so the kernel stops counting them as written and later snapshots
    compare only what the guest wrote since. A write to them is still caught, zeros
    included: a block of zeros that reads a snapshot's memory must not be given back to
    the system (it would read that memory's old bytes again), also where the memory grew
    after its first snapshot (the buffer lies there, outside the engine's image)."""
    buffer = BUFFERS[language]
    with Session(language, workspace=workspace, limits=Limits(fuel=10**11)) as live:
        assert live.execute("1").result.error is None
        assert live.take_snapshot() is not None
        assert live.execute(buffer.fill).result.error is None
        for _ in range(ARM_AFTER + 2):
            assert live.execute("1").result.error is None
            snapshot = live.take_snapshot()
        assert snapshot is not None and snapshot.written is not None
        kept = sum(snapshot.written)
        assert kept > 2048  # the buffer's blocks among them
        assert blocks_counted_as_written(live) < kept // 2
        assert _texts(live.execute(buffer.sample)) == ["21"]
        assert live.execute(buffer.zero).result.error is None
        assert live.take_snapshot() is snapshot
        assert _texts(live.execute(buffer.sample)) == ["0"]
    with Session(language, workspace=workspace, restore_point=snapshot) as restored:
        assert _texts(restored.execute(buffer.sample)) == ["0"]


@needs_memory_files
def test_a_snapshot_into_another_snapshot_leaves_none_behind(
    component_language: str, workspace: VirtualFS
) -> None:
    """A store whose blocks read one snapshot's memory snapshots into another: the zero
    blocks that capture gives back may be held non-zero in the first, which must then
    compare them again rather than trust what it maps."""
    buffer = BUFFERS[component_language]
    with Session(component_language, workspace=workspace, limits=Limits(fuel=10**11)) as live:
        assert live.execute("1").result.error is None
        assert live.take_snapshot() is not None
        assert live.execute(buffer.fill).result.error is None
        assert live.take_snapshot() is not None
        assert live._store is not None and live._instance is not None
        engine, store, instance = live.language_engine, live._store, live._instance
        other = engine.take_snapshot(store, instance)  # the one the store's blocks read now
        assert live.execute(buffer.zero).result.error is None
        assert live.take_snapshot() is not other
        assert engine.take_snapshot(store, instance, other) is other
    with Session(component_language, workspace=workspace, restore_point=other) as restored:
        assert _texts(restored.execute(buffer.sample)) == ["0"]


@needs_memory_files
def test_armed_blocks_move_with_a_snapshot_that_grows(workspace: VirtualFS) -> None:
    """A snapshot of a memory that grew moves to a larger window; the blocks armed from
    the old one are mapped from the new one, and the old one goes."""
    require_engine("javascript")
    buffer = BUFFERS["javascript"]
    with Session("javascript", workspace=workspace, limits=Limits(fuel=10**11)) as live:
        assert live.execute(buffer.fill).result.error is None
        for _ in range(ARM_AFTER + 2):
            snapshot = live.take_snapshot()
        assert snapshot is not None
        old_window = weakref.ref(snapshot.memory)
        length = len(snapshot.memory)
        assert live.execute(GROW["javascript"]).result.error is None
        assert live.take_snapshot() is snapshot and len(snapshot.memory) > length
        gc.collect()
        assert old_window() is None
        assert _texts(live.execute(buffer.sample)) == ["21"]
    with Session("javascript", workspace=workspace, restore_point=snapshot) as restored:
        assert _texts(restored.execute(buffer.sample)) == ["21"]


@needs_memory_files
def test_a_growth_that_would_split_the_mappings_too_far_keeps_the_old_windows(
    workspace: VirtualFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a snapshot outgrows its window, the blocks the guest maps and has not written
    are mapped from the new window, but not past `MAPPED_RUNS_MAX` runs (a guest that
    wrote every other page of a large memory would take all the mappings a process may
    have): then the old windows stay, and the state is whole all the same."""
    require_engine("python")
    monkeypatch.setattr(snapshots, "MAPPED_RUNS_MAX", 600)
    with Session("python", workspace=workspace, limits=Limits(fuel=10**11)) as live:
        assert live.execute("1").result.error is None
        assert live.take_snapshot() is not None
        assert live.execute("buf = bytearray(b'\\x07') * (8 << 20)").result.error is None
        for _ in range(ARM_AFTER + 2):
            snapshot = live.take_snapshot()
        code = "for at in range(0, len(buf), 8192):\n    buf[at] = 8"
        assert live.execute(code).result.error is None
        assert live.execute(GROW["python"]).result.error is None
        assert live.take_snapshot() is snapshot
        assert _guest_mappings_of_snapshots() < 512  # not one per page written
        gc.collect()
        assert _texts(live.execute("buf[0] + buf[4096] + buf[8192] + buf[-1]")) == ["30"]
    with Session("python", workspace=workspace, restore_point=snapshot) as restored:
        report = restored.execute("buf[0] + buf[4096] + buf[8192] + buf[-1]")
        assert _texts(report) == ["30"]


def _snapshot_memory_files() -> int:
    """Descriptors of snapshot memory files this process holds (each window holds one)."""
    links = (os.readlink(entry) for entry in Path("/proc/self/fd").iterdir() if entry.exists())
    return sum(1 for link in links if "memfd:sandbox-snapshot" in link)


@needs_memory_files
def test_growing_again_and_again_keeps_two_windows_at_most(workspace: VirtualFS) -> None:
    """Each growth moves the snapshot to a new window; only the current one and the one
    the guest maps are kept (keeping every window made memory grow with the square)."""
    require_engine("python")
    snapshot = _kept_snapshot("python", workspace, "chunks = []")
    gc.collect()
    before = _snapshot_memory_files()
    with Session("python", workspace=workspace, restore_point=snapshot) as second:
        for _ in range(6):
            length = len(snapshot.memory)
            assert second.execute("chunks.append(bytearray(4 << 20))").result.error is None
            assert second.take_snapshot() is snapshot and len(snapshot.memory) > length
        gc.collect()
        assert _snapshot_memory_files() <= before + 1
        assert _texts(second.execute("len(chunks)")) == ["6"]


@needs_memory_files
def test_after_a_mapped_restore_the_restored_blocks_count_as_written(
    workspace: VirtualFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel sees restored blocks the guest left alone as the memory file's, not as
    written: a snapshot that had to start over from the page flags (one read of them
    failed) still keeps them, so the next restore has the whole state."""
    require_engine("python")
    snapshot = _kept_snapshot("python", workspace, "answer = 41")
    assert snapshot.written is not None
    restored = snapshot.written
    with Session("python", workspace=workspace, restore_point=snapshot) as live:
        assert _texts(live.execute("answer + 1")) == ["42"]
        with monkeypatch.context() as patch:
            patch.setattr(snapshots, "written_blocks", lambda address, length: None)
            assert live.take_snapshot() is snapshot and not snapshot.sparse
        live.execute("other = 1")
        assert live.take_snapshot() is snapshot
        snapshot.keep_written_only()  # as an engine process does after each snapshot
        kept = snapshot.written
        assert kept is not None
        assert [block for block, flag in enumerate(restored) if flag and not kept[block]] == []
    with Session("python", workspace=workspace, restore_point=snapshot) as again:
        report = again.execute("answer + other")
        assert report.boot is Boot.RESTORED and _texts(report) == ["42"]


ZERO_BUFFERS = {
    "perl": (
        'our $zeros = "\\0" x 8e6; our $text = "a" x 4e6; 1',
        "length($zeros) . ' ' . ($zeros =~ tr/\\0//) . ' ' . length($text)",
    ),
    "python": (
        "zeros = bytearray(8_000_000); text = b'a' * 4_000_000",
        "f'{len(zeros)} {zeros.count(0)} {len(text)}'",
    ),
}
"""Per language: code that fills 8 MB with zeros and 4 MB with text, and an expression
that measures both."""


@pytest.mark.parametrize("language", sorted(ZERO_BUFFERS))
def test_zeros_written_where_a_fresh_instance_has_zeros_are_not_kept(
    language: str, workspace: VirtualFS
) -> None:
    """A snapshot does not keep blocks that hold only zeros outside the engine's image
    (a fresh instance has zeros there too), and restores the same state without them;
    blocks of text are kept. Their pages go back to the system: the live guest still
    reads its zeros, and the kernel no longer counts them as written (so the next
    snapshot does not compare them again)."""
    require_engine(language)
    fill, measure = ZERO_BUFFERS[language]
    text_blocks = 4_000_000 // BLOCK_BYTES
    with Session(language, workspace=workspace) as live:
        assert live.execute("1").result.error is None
        before = live.take_snapshot()
        assert before is not None and before.written is not None
        blocks_before = sum(before.written)
        counted_before = blocks_counted_as_written(live)
        assert live.execute(fill).result.error is None
        expected = _texts(live.execute(measure))
        snapshot = live.take_snapshot()
        counted = blocks_counted_as_written(live) - counted_before
        assert text_blocks <= counted < text_blocks + 500  # not the 1,953 blocks of zeros
        assert _texts(live.execute(measure)) == expected
    assert snapshot is not None and snapshot.written is not None
    assert text_blocks <= sum(snapshot.written) - blocks_before < text_blocks + 500
    with Session(language, workspace=workspace, restore_point=_stored(snapshot)) as again:
        report = again.execute(measure)
        assert report.boot is Boot.RESTORED and _texts(report) == expected
    assert expected and str(expected[0]).strip("'\"").split() == ["8000000", "8000000", "4000000"]


@needs_memory_files
def test_a_snapshot_another_session_maps_does_not_change_under_it(workspace: VirtualFS) -> None:
    """Two live sessions from one snapshot: the one that maps its memory keeps its state
    while the other takes its next snapshots into that snapshot (they move to new memory
    first; written in place, they would show through wherever the mapping guest had not
    written)."""
    require_engine("python")
    with Session("python", workspace=workspace) as first:
        assert first.execute("x = bytearray(b'a' * 300_000)").result.error is None
        snapshot = first.take_snapshot()
        assert snapshot is not None and isinstance(snapshot.memory, BlockMemory)
        with Session("python", workspace=workspace, restore_point=snapshot) as second:
            assert second.execute("1").result.error is None  # restored, by mapping
            assert snapshot.mapped is not None and snapshot.mapped.live()
            assert first.execute("x[:] = b'b' * 300_000").result.error is None
            assert first.take_snapshot() is snapshot
            moved = snapshot.memory
            assert first.execute("x[:3] = b'ccc'").result.error is None
            assert first.take_snapshot() is snapshot and snapshot.memory is moved  # once
            assert _texts(second.execute("bytes(x[:6])")) == ["b'aaaaaa'"]
            assert _texts(first.execute("bytes(x[:6])")) == ["b'cccbbb'"]


def test_a_memory_of_no_pages_snapshots_and_restores() -> None:
    engine = make_engine()
    module = wasmtime.Module(engine, '(module (memory (export "memory") 0))')
    stores = [new_store(engine, memory_bytes=1 << 20) for _ in range(2)]
    taken = snapshots.take(stores[0], wasmtime.Instance(stores[0], module, []))
    assert len(taken.memory) == 0
    snapshots.restore(stores[1], wasmtime.Instance(stores[1], module, []), taken)


@needs_memory_files
def test_image_blocks_are_where_a_file_is_mapped(tmp_path: Path) -> None:
    """The image is told by the file mapped into the memory (as wasmtime maps it); an
    anonymous memory has none, so nothing can be told of it."""
    memory = mmap.mmap(-1, 16 * BLOCK_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof((ctypes.c_char * len(memory)).from_buffer(memory))
    assert snapshots.image_blocks(address, len(memory)) is None
    image = tmp_path / "image"
    image.write_bytes(b"\x07" * (4 * BLOCK_BYTES))
    with image.open("rb") as file:
        mapped = snapshots._mmap(
            address + 5 * BLOCK_BYTES,
            4 * BLOCK_BYTES,
            mmap.PROT_READ,
            mmap.MAP_PRIVATE | snapshots._MAP_FIXED,
            file.fileno(),
            0,
        )
    assert mapped == address + 5 * BLOCK_BYTES
    assert snapshots.image_blocks(address, len(memory)) == bytes(5) + b"\x01" * 4 + bytes(7)
    del address
    memory.close()


@needs_memory_files
def test_a_refused_mapping_is_copied_instead(
    workspace: VirtualFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore whose mapping the kernel refuses copies the blocks: the state is whole
    (a refusal used to drop the snapshot). The anonymous memory put in the run's place
    may cover the image, so that session's snapshots leave no zeros out."""
    require_engine("python")
    snapshot = _kept_snapshot("python", workspace, "answer = 41")
    real_mmap = snapshots._mmap
    refused: list[int] = []

    def refuse_files(*arguments: int) -> int:
        if arguments[4] != -1:
            refused.append(arguments[4])
            return -1
        return int(real_mmap(*arguments))

    monkeypatch.setattr(snapshots, "_mmap", refuse_files)
    with Session("python", workspace=workspace, restore_point=snapshot) as restored:
        report = restored.execute("answer + 1")
        assert report.boot is Boot.RESTORED and _texts(report) == ["42"]
        assert restored._store is not None
        assert snapshots._FRESH_IMAGES[restored._store][1] is None
        assert restored.execute("zeros = bytearray(4_000_000)").result.error is None
        kept_before = sum(snapshot.written or b"")
        assert restored.take_snapshot() is snapshot and snapshot.written is not None
        assert sum(snapshot.written) - kept_before > 900  # the zeros are kept
    assert refused


@needs_memory_files
def test_a_second_live_restore_of_one_snapshot_copies(workspace: VirtualFS) -> None:
    """A snapshot is mapped into one live instance at a time: another restored from it
    while the first lives gets a copy, so a snapshot the first takes into it (writing the
    memory file) changes nothing in the second."""
    require_engine("python")
    snapshot = _kept_snapshot("python", workspace, "answer = 41")
    with (
        Session("python", workspace=workspace, restore_point=snapshot) as one,
        Session("python", workspace=workspace) as two,
    ):
        assert _texts(one.execute("answer + 1")) == ["42"]
        two.restore_point = snapshot
        assert two._boot() is Boot.RESTORED  # restored, and has run nothing
        assert two._store is not None and two._instance is not None
        engine = two.language_engine
        before = bytes(engine.take_snapshot(two._store, two._instance).memory)
        assert one.execute("answer = 99").result.error is None
        assert one.take_snapshot() is snapshot
        assert bytes(engine.take_snapshot(two._store, two._instance).memory) == before
        assert _texts(two.execute("answer + 1")) == ["42"]


@needs_memory_files
def test_a_freed_snapshot_memory_gives_its_pages_back() -> None:
    size = 8 << 20
    memory = block_memory(size)
    assert isinstance(memory, BlockMemory)
    memory[:] = b"\x01" * size
    file = memory.fd
    held = os.fstat(file).st_blocks * 512
    del memory
    gc.collect()
    assert os.fstat(file).st_blocks * 512 <= held - size


@needs_memory_files
def test_a_snapshots_memory_file_counts_as_its_process_s_own_memory() -> None:
    """The memory budget counts an engine process's kept blocks, which live in a memory
    file (the kernel counts those as shared, like the engine files processes do share)."""
    size, chunk = 16 << 20, b"\x01" * (1 << 20)
    before = private_bytes(os.getpid())
    memory = block_memory(size)
    try:
        for offset in range(0, size, len(chunk)):
            memory[offset : offset + len(chunk)] = chunk
        assert private_bytes(os.getpid()) - before >= size - (1 << 20)
    finally:
        memory.close()


# --- Python and JavaScript: snapshots of decomposed components ------------------------------


@dataclass(frozen=True)
class ContextScript:
    """Runs that build up a context's state (a value, a function, an import or a class,
    the cwd, a file), and checks of that state as (code, expected result text)."""

    build: tuple[str, ...]
    checks: tuple[tuple[str, str], ...]


CONTEXT_SCRIPTS = {
    "python": ContextScript(
        build=(
            "answer = 41",
            "def twice(value):\n    return 2 * value",
            "import json\nfrom collections import Counter",
            "import os\nos.mkdir('sub')\nos.chdir('sub')",
            "open('note.txt', 'w').write('kept')",
        ),
        checks=(
            ("answer + 1", "42"),
            ("twice(21)", "42"),
            ("json.dumps(Counter('aab'))", '\'{"a": 2, "b": 1}\''),
            ("import os\nos.getcwd()", "'/workspace/sub'"),
            ("open('note.txt').read()", "'kept'"),
        ),
    ),
    "javascript": ContextScript(
        build=(
            "let answer = 41",
            "function twice(value) { return 2 * value }",
            "class Base { static value = 40 }\nconst cache = new Map([['base', Base]])",
            "let counter = (() => { let n = 0; return () => ++n })(); counter()",
            "fs.mkdirSync('sub'); process.chdir('sub')",
            "fs.writeFileSync('note.txt', 'kept')",
        ),
        checks=(
            ("answer + 1", "42"),
            ("twice(21)", "42"),
            ("cache.get('base').value + 2", "42"),
            ("counter()", "2"),
            ("process.cwd()", "'/workspace/sub'"),
            ("fs.readFileSync('note.txt', 'utf8')", "'kept'"),
        ),
    ),
}


@pytest.fixture(params=sorted(CONTEXT_SCRIPTS))
def component_language(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require_engine(name)
    return name


def _stored(snapshot: MemorySnapshot) -> MemorySnapshot:
    """The snapshot as storage gives it back: its kept blocks, and its globals and host
    state via JSON."""
    assert snapshot.written is not None
    view = memoryview(snapshot.memory)
    blocks = {
        index: view[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES]
        for index, kept in enumerate(snapshot.written)
        if kept
    }
    delta = SnapshotDelta(
        len(snapshot.memory),
        blocks,
        json.loads(json.dumps(snapshot.globals)),
        json.loads(json.dumps(snapshot.extra)),
        from_image=True,
    )
    return sparse_snapshot(delta)


def _texts(report: ExecutionReport) -> list[str | None]:
    return [entry.text for entry in report.result.results]


def test_a_component_context_survives_in_a_new_session(
    component_language: str, workspace: VirtualFS
) -> None:
    script = CONTEXT_SCRIPTS[component_language]
    cwd = "/workspace"
    with Session(component_language, workspace=workspace) as first:
        for code in script.build:
            report = first.execute(code, cwd=cwd)
            assert report.result.error is None, (code, report.result.error)
            cwd = report.cwd
        snapshot = first.take_snapshot()
    assert snapshot is not None and cwd == "/workspace/sub"
    assert snapshot.extra["host"]["table"]["entries"], "the host's handles travel along"
    with Session(component_language, workspace=workspace, restore_point=_stored(snapshot)) as again:
        for code, expected in script.checks:
            report = again.execute(code, cwd=cwd)
            assert report.boot in (Boot.RESTORED, Boot.RESIDENT)
            assert _texts(report) == [expected], (code, report.result.error)
        assert again.execute(SNIPPETS[component_language].value).result.error is None


def test_a_component_context_comes_back_from_its_last_snapshot_after_a_trap(
    component_language: str, workspace: VirtualFS
) -> None:
    snippets = SNIPPETS[component_language]
    with Session(component_language, workspace=workspace) as live:
        live.execute(snippets.define)
        first = live.take_snapshot()
        assert first is not None
        first.changed_blocks.clear()  # as after sending it
        live.execute(snippets.value)
        second = live.take_snapshot()
        assert second is first and second.changed_blocks, "later snapshots are incremental"
        trapped = live.execute(snippets.loop)
        assert trapped.invalidated and trapped.result.error is not None
        assert "the next run restores the last snapshot" in " ".join(trapped.notes)
        report = live.execute(snippets.use)
        assert report.boot is Boot.RESTORED
        assert _texts(report) == [snippets.use_text]
        assert report.result.usage is not None and report.result.usage.memory_bytes > 0


def test_python_open_files_survive_a_snapshot(workspace: VirtualFS) -> None:
    """Host resources (an open file being written, one being read) are part of the state."""
    require_engine("python")
    put_files(workspace, {"input.txt": "abcdef"})
    with Session("python", workspace=workspace) as first:
        code = "out = open('log.txt', 'w')\nout.write('a')\nout.flush()\nsource = open('input.txt')"
        assert first.execute(code).result.error is None
        assert first.execute("source.read(2)").result.results[0].text == "'ab'"
        snapshot = first.take_snapshot()
    assert snapshot is not None
    with Session("python", workspace=workspace, restore_point=_stored(snapshot)) as again:
        report = again.execute("out.write('b')\nout.close()\nsource.read()")
        assert report.boot is Boot.RESTORED
        assert _texts(report) == ["'cdef'"]
    assert workspace.files() == {"input.txt": b"abcdef", "log.txt": b"ab"}


def test_a_snapshot_of_another_build_starts_fresh_with_a_note(
    component_language: str, workspace: VirtualFS
) -> None:
    snippets = SNIPPETS[component_language]
    with Session(component_language, workspace=workspace) as first:
        first.execute(snippets.define)
        snapshot = first.take_snapshot()
    assert snapshot is not None
    foreign = _stored(snapshot)
    foreign.extra["plan"] = "0" * 64
    with Session(component_language, workspace=workspace, restore_point=foreign) as again:
        report = again.execute(snippets.value)
        assert report.boot is Boot.FRESH
        assert report.restore_point_dropped
        assert "could not be restored" in " ".join(report.notes)
        assert _texts(report) == [snippets.value_text]


@pytest.mark.usefixtures("perl_engine")
def test_a_guest_error_that_says_interrupt_is_not_a_timeout() -> None:
    """Only the epoch's own trap is an interruption: a guest writes its messages."""
    tied = (
        'package X; sub TIESCALAR { bless {} } sub STORE { die "operation interrupted\\n" }'
        ' sub FETCH { "" } package main; tie $SBW::response, "X"; 1'
    )
    result = run("perl", tied)
    assert result.error is not None
    assert result.error.name == "EngineError" and "operation interrupted" in result.error.message


@pytest.mark.usefixtures("ruby_engine")
def test_a_json_result_python_cannot_parse_is_its_text() -> None:
    """Python's parser refuses an integer of over 4,300 digits: the result is the guest's
    JSON as text, not an error of the host's (which would reset a context)."""
    result = run("ruby", "[10**5000]")
    assert result.error is None
    assert [entry.text for entry in result.results] == ["[1" + "0" * 5000 + "]"]


PREPARED_VALUES = {
    "python": ("answer = 41", "answer + 1"),
    "javascript": ("var answer = 41", "answer + 1"),
    "perl": ("our $answer = 41", "$answer + 1"),
}


@pytest.mark.parametrize("language", sorted(PREPARED_VALUES))
def test_an_instance_prepared_ahead_takes_the_restore_point_or_boots_fresh(
    language: str, workspace: VirtualFS
) -> None:
    """`prepare` makes the instance the next run boots before the restore point is there
    (an engine process does so while it streams in): that very instance takes the restore
    point, or boots fresh without one. A core module's fresh instance runs initialisers
    that a restore must not, so there is nothing to make ahead for it."""
    require_engine(language)
    define, use = PREPARED_VALUES[language]
    components = language_engine(language).restores_into_fresh_instance
    with Session(language, workspace=workspace) as live:
        assert live.execute(define).result.error is None
        snapshot = live.take_snapshot()
    assert snapshot is not None
    with Session(language, workspace=workspace, restore_point=_stored(snapshot)) as again:
        again.prepare()
        prepared = again._prepared
        assert (prepared is not None) == components
        report = again.execute(use)
        assert report.boot is Boot.RESTORED and _texts(report) == ["42"]
        assert prepared is None or again._store is prepared[0]
    with Session(language, workspace=workspace) as fresh:
        fresh.prepare()
        prepared = fresh._prepared
        report = fresh.execute("1 + 1")
        assert report.boot is Boot.FRESH and _texts(report) == ["2"]
        assert prepared is None or fresh._store is prepared[0]
    unused = Session(language, workspace=workspace)
    unused.prepare()
    unused.close()
    assert unused._prepared is None


def test_a_restore_that_fails_lets_go_of_the_files_its_snapshot_held_open(
    workspace: VirtualFS,
) -> None:
    """A restore that fails after it took back the snapshot's open files (here: memory
    cannot grow to the snapshot's size) closes them again: once the guest that starts
    fresh instead deletes such a file, it stops counting against the workspace."""
    require_engine("python")
    hold = "held = open('big.txt', 'w'); held.write('x' * 100_000); held.flush()"
    with Session("python", workspace=workspace) as live:
        report = live.execute(f"{hold}\ngrown = bytearray(8 << 20)")
        assert report.result.error is None
        snapshot = live.take_snapshot()
    assert snapshot is not None
    with Session("python", workspace=workspace) as fresh:
        assert fresh.execute("1").result.error is None
        fresh_bytes = len(whole_memory(fresh))
    with Session(
        "python",
        workspace=workspace,
        restore_point=_stored(snapshot),
        limits=Limits(memory_bytes=fresh_bytes + (1 << 20)),
    ) as again:
        report = again.execute(
            "import os\nos.remove('big.txt')\nopen('big.txt', 'w').write('y' * 100_000)"
        )
        assert report.boot is Boot.FRESH and report.result.error is None
        assert any("could not be restored" in note for note in report.notes)
    assert workspace.total_bytes == 100_000


def test_a_full_javascript_heap_is_said_plainly_and_the_session_recovers() -> None:
    """SpiderMonkey cannot make its heap full a catchable error here (spec 9.2 asks for an
    InternalError; README says so): the engine crashes. The error says why, without
    wasmtime's backtrace of unnamed wasm functions, and the next run starts afresh."""
    require_engine("javascript")
    with Session("javascript", workspace=VirtualFS()) as live:
        crashed = live.execute('const b = []; for (;;) b.push("x".repeat(1e6))').result
        assert crashed.error is not None and crashed.error.name == "EngineError"
        assert crashed.error.message == (
            "wasm trap: wasm `unreachable` instruction executed (SpiderMonkey crashed: "
            "[unhandlable oom] Failed to allocate new chunk during GC)"
        )
        assert [entry.text for entry in live.execute("1 + 1").result.results] == ["2"]


def test_ruby_s_result_limit_covers_its_whole_answer() -> None:
    """Spec 3.2: for Ruby the driver's whole answer is at most 64 KiB, so an error whose
    message or traceback is larger (deep recursion) is the result limit."""
    require_engine("ruby")
    for code in ("raise 'y' * 70000", "def f(n) = f(n + 1)\nf(0)"):
        over = run("ruby", code)
        assert over.error is not None and over.error.message == "Result limit exceeded", code
        assert (over.stdout, over.stderr, over.usage) == ([], [], None)  # stateless: host-thrown
    fits = run("ruby", "raise 'y' * 60000")
    assert fits.error is not None and fits.error.name == "RuntimeError"
