"""A folder sync's state file held by another process, as a `watch` there would hold it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HOLD = """\
import sys
from pathlib import Path
from workbench.sync.manifest import hold_state_file
lock = hold_state_file(Path(sys.argv[1]), {})
print("held", flush=True)
sys.stdin.read()
"""
"""Holds the state file named by its argument until its stdin closes, or it is killed."""


@contextmanager
def held_by_another_process(state_file: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that holds `state_file`'s lock; yields it once it does, kills it after."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(state_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "held\n", "the holder could not take the lock"
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
