"""The write gate: a WASI host of our own asks before every file-system change, so the
workspace bound holds within one write however fast the guest writes (the write guard's
own thread may be late on a busy machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engines.isolated.write_guard import BYTES_MARGIN, WriteGuard
from engines.session import Session
from tests.conftest import require_engine

CHUNK = 64 << 10
WRITE_FILES = (
    f"data = b'x' * {CHUNK}\nfor i in range(300):\n    open(f'f{{i:03}}', 'wb').write(data)"
)


@pytest.fixture
def python_ready() -> None:
    require_engine("python")


def test_a_gate_that_says_no_stops_the_run_before_that_change(
    python_ready: None, tmp_path: Path
) -> None:
    answers: list[bool] = []

    def gate() -> bool:
        answers.append(len(answers) < 10)
        if not answers[-1]:
            session.interrupt("stopped by the gate")
        return answers[-1]

    with Session("python", workspace=tmp_path, write_gate=gate) as session:
        result = session.execute(WRITE_FILES).result
    assert result.error is not None
    assert result.error.name == "ExecutionLimitError"
    assert result.error.message == "stopped by the gate"
    written = sorted(path.name for path in tmp_path.iterdir())
    assert 0 < len(written) < 10  # each file asks at its open and at its write
    assert answers.count(False) == 1


def test_the_gate_alone_holds_the_bound_when_the_guards_thread_is_late(
    python_ready: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the guard's own thread kept from running, `may_write` still stops the run
    one write past the limit plus its margin."""
    monkeypatch.setattr(WriteGuard, "_run", lambda self: None)
    max_bytes = 1 << 20
    guard = WriteGuard(
        tmp_path,
        max_bytes=max_bytes,
        max_entries=10_000,
        on_exceeded=lambda message: session.interrupt(message),
    )
    session = Session("python", workspace=tmp_path, write_gate=guard.may_write)
    try:
        guard.arm()
        result = session.execute(WRITE_FILES).result
    finally:
        guard.disarm()
        guard.close()
        session.close()
    assert result.error is not None
    assert result.error.message.startswith("Workspace limit exceeded during the run")
    total = sum(os.path.getsize(path) for path in tmp_path.iterdir())
    assert max_bytes < total <= max_bytes + BYTES_MARGIN + CHUNK
