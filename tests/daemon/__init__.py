"""Tests of the local daemon (issue 21)."""

from __future__ import annotations

import time
from pathlib import Path

from workbench.backends.daemon import probe, socket_path


def wait_for_a_run(env: dict[str, str], count: int = 1) -> None:
    """Until the daemon runs code, or with `count` has that many runs in flight, queued
    ones included (the client's earlier requests, such as creating its context, do not
    count: a daemon killed then is replaced before the run is sent)."""
    socket = socket_path(Path(env["SANDBOX_WORKBENCH_DATA_DIR"]))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = probe(socket)
        if info is not None and info.executions_in_flight >= count:
            return
        time.sleep(0.02)
    raise AssertionError("the daemon never got the run")
