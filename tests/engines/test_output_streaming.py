"""Guest output streams out of the engine process while the guest runs: a line printed
before a wait arrives before the run ends (Python, Ruby, JavaScript; zeroperl's `sleep` does
not wait), and the result still holds every line."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from engines.process import EngineProcessPool, ProcessSession

PRINT_THEN_SLEEP = {
    "python": "import time\nprint('first')\ntime.sleep(1)\nprint('second')",
    "ruby": "puts 'first'\nsleep 1\nputs 'second'",
    # No timers in the JavaScript engine: a cell waits by working.
    "javascript": (
        "console.log('first'); const t0 = Date.now(); while (Date.now() - t0 < 1000) {}"
        "; console.log('second')"
    ),
}


@pytest.fixture
def pool(all_engines: None) -> Iterator[EngineProcessPool]:
    pool = EngineProcessPool(spares=0)
    yield pool
    pool.close()


@pytest.mark.parametrize("language", sorted(PRINT_THEN_SLEEP))
def test_a_line_printed_before_a_sleep_arrives_before_the_run_ends(
    pool: EngineProcessPool, language: str
) -> None:
    arrivals: list[tuple[str, bytes, float]] = []
    with ProcessSession(language, pool=pool) as session:
        session.execute("1")  # the engine process is up and the guest booted
        outcome = session.execute(
            PRINT_THEN_SLEEP[language],
            on_output=lambda stream, data: arrivals.append((stream, data, time.monotonic())),
        )
        ended = time.monotonic()
    assert outcome.result.error is None
    assert outcome.result.stdout == ["first", "second"]
    assert b"".join(data for _, data, _ in arrivals) == b"first\nsecond\n"
    first = next(at for _, data, at in arrivals if data.startswith(b"first"))
    assert ended - first > 0.6, "the first line waited for the end of the run"
    assert {stream for stream, _, _ in arrivals} == {"stdout"}


def test_python_hands_lines_over_as_it_goes_in_few_writes(pool: EngineProcessPool) -> None:
    """A loop that prints while it computes streams without a sleep, yet not a write per
    line (spec 9.2 counts writes)."""
    arrivals: list[float] = []
    code = (
        "import time\n"
        "end = time.monotonic() + 1.2\n"
        "last = 0\n"
        "while (now := time.monotonic()) < end:\n"
        "    if now - last >= 0.005: print('tick'); last = now\n"
    )
    with ProcessSession("python", pool=pool) as session:
        outcome = session.execute(
            code, on_output=lambda stream, data: arrivals.append(time.monotonic())
        )
        ended = time.monotonic()
    assert outcome.result.error is None, outcome.result.error
    assert len(outcome.result.stdout) > 100
    assert 3 <= len(arrivals) <= 10
    assert ended - arrivals[0] > 0.5


def test_streamed_output_stops_at_the_output_limit(pool: EngineProcessPool) -> None:
    told: list[bytes] = []
    with ProcessSession("python", pool=pool) as session:
        outcome = session.execute(
            "for i in range(20000): print('x' * 60)",
            on_output=lambda stream, data: told.append(data),
        )
        limit = session.limits.output_bytes
    assert outcome.result.error is not None
    assert outcome.result.error.message == "Output limit exceeded"
    assert sum(len(data) for data in told) == limit


def test_without_a_listener_nothing_is_streamed_and_the_next_answer_is_intact(
    pool: EngineProcessPool,
) -> None:
    with ProcessSession("python", pool=pool) as session:
        first = session.execute("print('a'); 1")
        second = session.execute("print('b'); 2")
    assert first.result.stdout == ["a"] and second.result.stdout == ["b"]


def test_javascript_console_entries_stream_and_the_answer_keeps_them_as_entries(
    pool: EngineProcessPool,
) -> None:
    """An entry is rendered once (no `%s` substitution) and the answer's console stays
    the record: one entry per call, even one that holds a newline."""
    told: list[tuple[str, bytes]] = []
    with ProcessSession("javascript", pool=pool) as session:
        outcome = session.execute(
            'console.log("a %s b", 1); console.error("oops"); console.log("x\\ny")',
            on_output=lambda stream, data: told.append((stream, data)),
        )
    assert outcome.result.stdout == ["a %s b 1", "x\ny"]
    assert outcome.result.stderr == ["oops"]
    streamed = {
        name: b"".join(data for stream, data in told if stream == name)
        for name in ("stdout", "stderr")
    }
    assert streamed == {"stdout": b"a %s b 1\nx\ny\n", "stderr": b"oops\n"}
