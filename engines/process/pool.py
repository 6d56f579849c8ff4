"""Engine processes kept ready: a spare is started in the background so that opening a
session or a stateless run does not wait for one, and a process whose session closed
cleanly is reused. Where the platform allows, processes are forks of the pool's fork
server (see `ForkServer`), which loads each compiled entry a session opens, so that the
processes forked after it start with it loaded (`preload`)."""

from __future__ import annotations

import atexit
import threading
import weakref
from pathlib import Path

from engines.process.handle import FORK_SERVER, EngineProcess, EngineProcessDied, ForkServer

DEFAULT_SPARES = 1
DEFAULT_MAX_IDLE = 2


class EngineProcessPool:
    """Engine processes, `spares` of them started ahead and up to `max_idle` kept."""

    def __init__(self, *, spares: int = DEFAULT_SPARES, max_idle: int = DEFAULT_MAX_IDLE) -> None:
        self.spares = spares
        self.max_idle = max(max_idle, spares)
        self._idle: list[EngineProcess] = []
        self._all: weakref.WeakSet[EngineProcess] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._spawning = 0
        self._closed = False
        self._fork_server: ForkServer | None = None
        self._fork_server_lock = threading.Lock()

    def _live_fork_server(self) -> ForkServer | None:
        """The fork server, started on first use and again if it ended."""
        if not FORK_SERVER:
            return None
        with self._fork_server_lock:
            if self._closed:
                raise EngineProcessDied("the engine pool is closed")
            if self._fork_server is None or self._fork_server.closed:
                self._fork_server = ForkServer()
            return self._fork_server

    def preload(self, language: str, compiled: Path) -> None:
        """Have the engine processes forked from now on start with `language`'s compiled
        entry loaded (asked of the fork server once; nothing where there is none)."""
        server = self._live_fork_server()
        if server is not None:
            server.preload(language, compiled)

    def _spawn(self) -> EngineProcess:
        try:
            engine_process = EngineProcess(self._live_fork_server())
        except EngineProcessDied:
            # The fork server ended since its last fork (killed, crashed) and the fork
            # found out: once more, with a new one.
            engine_process = EngineProcess(self._live_fork_server())
        with self._lock:
            self._all.add(engine_process)
        return engine_process

    def prewarm(self) -> None:
        """Start spares in the background until `spares` are idle or starting."""
        with self._lock:
            wanted = self.spares - len(self._idle) - self._spawning
            if self._closed or wanted <= 0:
                return
            self._spawning += wanted
        for _ in range(wanted):
            threading.Thread(target=self._spawn_spare, name="engine-spare", daemon=True).start()

    def _spawn_spare(self) -> None:
        try:
            engine_process = self._spawn()
            engine_process.wait_ready()
        except (OSError, EngineProcessDied):
            with self._lock:
                self._spawning -= 1
            return
        with self._lock:
            self._spawning -= 1
            if not self._closed:
                self._idle.append(engine_process)
                return
        engine_process.stop()

    def acquire(self) -> EngineProcess:
        """A ready engine process for exclusive use (give it back with `release`)."""
        with self._lock:
            if self._closed:
                raise EngineProcessDied("the engine pool is closed")
            engine_process = None
            while self._idle and engine_process is None:
                engine_process = self._idle.pop()
                # a spare that died while idle, or one killed that has not yet exited
                if engine_process.dead or engine_process.process.poll() is not None:
                    engine_process.kill()  # reaps it
                    engine_process = None
        if engine_process is None:
            engine_process = self._spawn()
        self.prewarm()
        engine_process.wait_ready()
        return engine_process

    def release(self, engine_process: EngineProcess) -> None:
        """Keep a healthy process for reuse (up to `max_idle`), stop anything else. One
        forked before its fork server loaded an entry is not kept: a new fork has them all."""
        with self._lock:
            keep = (
                not engine_process.dead
                and engine_process.has_every_preload()
                and not self._closed
                and len(self._idle) < self.max_idle
            )
            if keep:
                self._idle.append(engine_process)
        if not keep:
            engine_process.stop()

    def processes(self) -> list[EngineProcess]:
        """Every live process of this pool, in use or idle."""
        with self._lock:
            return [engine_process for engine_process in self._all if not engine_process.dead]

    def close(self) -> None:
        """Stop every process of this pool, in use or idle."""
        with self._lock:
            self._closed = True
            engine_processes = list(self._all)
            self._idle.clear()
        for engine_process in engine_processes:
            engine_process.kill()
        with self._fork_server_lock:
            fork_server, self._fork_server = self._fork_server, None
        if fork_server is not None:
            fork_server.close()


_POOL: EngineProcessPool | None = None
_POOL_LOCK = threading.Lock()


def engine_process_pool() -> EngineProcessPool:
    """The process-wide pool."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._closed:
            _POOL = EngineProcessPool()
        return _POOL


@atexit.register
def _close_pool() -> None:
    """No engine process outlives the host, whatever state it is in."""
    with _POOL_LOCK:
        pool = _POOL
    if pool is not None:
        pool.close()
