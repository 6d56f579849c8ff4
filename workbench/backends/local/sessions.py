"""Live engine sessions of code contexts, bounded with least-recently-used eviction.

A context's REPL state lives in its session, whose engine process holds the guest. The
sessions that stay resident are bounded by a memory budget for their engine processes
(counting what each holds of its own; the owner's process holds no guest memory, and an
embedded backend may live in a large one, as a test run) and by a count (the reference
keeps one per interpreter object; we bound them across all sandboxes). An evicted
context comes back from its memory snapshot where its engine supports snapshots,
otherwise fresh, and its next result says which.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from engines.process import GuestSession

SessionKey = tuple[str, str]
"""(sandbox id, context id)"""

DEFAULT_MAX_RESIDENT = 32
"""A cap on engine processes (each holds pipes and a pid); the memory budget binds first:
a Python context's engine process holds about 24 MiB of its own, Ruby's about 80."""
DEFAULT_MEMORY_BUDGET_MIB = 448


class SessionPool:
    def __init__(
        self,
        max_resident: int = DEFAULT_MAX_RESIDENT,
        memory_budget: int = DEFAULT_MEMORY_BUDGET_MIB << 20,
    ) -> None:
        """At most `max_resident` sessions stay resident, and idle ones are evicted
        while their engine processes hold more than `memory_budget` bytes (the session
        in use always stays)."""
        self.max_resident = max(1, max_resident)
        self.memory_budget = memory_budget
        self._sessions: OrderedDict[SessionKey, GuestSession] = OrderedDict()
        self._busy: set[SessionKey] = set()
        self._held: dict[SessionKey, int] = {}
        """What each session's engine process holds: an idle one as its session was last
        released (an idle guest runs nothing, so its memory does not grow), a busy one as
        read at the last acquire or release (its run may be growing it). Reading every
        resident process's memory on every release cost 0.05 ms a session."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Sessions resident now."""
        with self._lock:
            return len(self._sessions)

    def acquire(self, key: SessionKey, create: Callable[[], GuestSession]) -> GuestSession:
        """The context's session (created if absent), marked busy until `release`."""
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                self._sessions.move_to_end(key)
                self._busy.add(key)
                return session
        session = create()
        with self._lock:
            self._sessions[key] = session
            self._held[key] = 0
            self._busy.add(key)
        self._settle(key)
        return session

    def release(self, key: SessionKey) -> None:
        """The session is idle again: what it holds is measured, with every busy one's."""
        self._settle(key, released=True)

    def _settle(self, key: SessionKey, *, released: bool = False) -> None:
        """Measure the memory of `key`'s session and of every busy one (outside the lock:
        a read of /proc each), then evict what the count and the budget call for."""
        with self._lock:
            measured = [
                (other, self._sessions[other])
                for other in {key, *self._busy}
                if other in self._sessions
            ]
        held = [(other, session, session.private_bytes) for other, session in measured]
        with self._lock:
            for other, session, private_bytes in held:
                if self._sessions.get(other) is session:  # not discarded meanwhile
                    self._held[other] = private_bytes
            if released:
                self._busy.discard(key)
            evicted = self._evict_locked()
        self._close(evicted)

    def _evict_locked(self) -> list[tuple[SessionKey, GuestSession]]:
        evicted = []
        for key in list(self._sessions):
            if len(self._sessions) <= self.max_resident:
                break
            if key not in self._busy:
                evicted.append((key, self._pop_locked(key)))
        held = sum(self._held.values())
        for key in list(self._sessions):
            if held <= self.memory_budget:
                break
            if key not in self._busy:
                held -= self._held[key]
                evicted.append((key, self._pop_locked(key)))
        return evicted

    def _pop_locked(self, key: SessionKey) -> GuestSession:
        del self._held[key]
        return self._sessions.pop(key)

    def _close(self, sessions: list[tuple[SessionKey, GuestSession]]) -> None:
        for _, session in sessions:
            session.close()

    def get(self, key: SessionKey) -> GuestSession | None:
        with self._lock:
            return self._sessions.get(key)

    def is_resident(self, key: SessionKey) -> bool:
        with self._lock:
            session = self._sessions.get(key)
        return session is not None and session.alive

    def discard(self, key: SessionKey) -> None:
        """Close and forget one context's session (context deleted or reset)."""
        with self._lock:
            session = self._sessions.pop(key, None)
            self._held.pop(key, None)
            self._busy.discard(key)
        if session is not None:
            session.close()

    def discard_sandbox(self, sandbox_id: str) -> None:
        with self._lock:
            keys = [key for key in self._sessions if key[0] == sandbox_id]
        for key in keys:
            self.discard(key)

    def close(self) -> None:
        """Close every session (their state is stored: each run stored its snapshot)."""
        with self._lock:
            sessions = list(self._sessions.items())
            self._sessions.clear()
            self._held.clear()
            self._busy.clear()
        self._close(sessions)
