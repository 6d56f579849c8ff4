"""One background thread that interrupts executions whose wall-clock deadline passed.

Each execution runs with an epoch deadline of one tick on its own wasmtime engine, so a
single `engine.increment_epoch()` interrupts exactly that execution: the watchdog calls
the session's stop function (which does that and wakes a guest waiting in its host)
when the deadline passes, and `cancel()` does it immediately from any thread.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Watchdog:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._sleeping_until = float("inf")
        """The deadline the thread waits for; arming a later one needs no wake-up."""

    def arm(self, stop: Callable[[], None], seconds: float) -> int:
        """Call `stop` after `seconds` unless disarmed first; returns a token."""
        token = next(self._tokens)
        deadline = time.monotonic() + seconds
        with self._condition:
            self._armed[token] = stop
            if len(self._heap) > 4 * len(self._armed) + 64:
                # Disarmed entries are dropped lazily; prune them once they pile up.
                self._heap = [entry for entry in self._heap if entry[1] in self._armed]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="engine-watchdog", daemon=True
                )
                self._thread.start()
            if deadline < self._sleeping_until:
                self._condition.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._condition:
            self._armed.pop(token, None)

    def _run(self) -> None:
        with self._condition:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._sleeping_until = float("inf")
                    self._condition.wait()
                    continue
                deadline, token = self._heap[0]
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self._sleeping_until = deadline
                    self._condition.wait(remaining)
                    continue
                heapq.heappop(self._heap)
                stop = self._armed.pop(token, None)
                if stop is not None:
                    stop()


WATCHDOG = Watchdog()
