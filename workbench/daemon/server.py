"""The daemon: the one owner of a data dir's store and live engine sessions.

It takes the data dir's owner lock first (a second daemon gives up at once), then serves
the gateway protocol on a Unix socket in the private runtime directory (0600; every
peer's uid checked with `SO_PEERCRED` where the platform has it), and, for `serve`, on a
TCP listener behind the bearer token. Besides the gateway's routes the socket answers:

- `GET /v1/daemon`: pid, version, data dir, socket, start time, live sessions, memory
  (null when asked with `BRIEF_HEADER`, as a connecting client does);
- `POST /v1/daemon/stop`: write pending snapshots and exit;
- `GET /v1/engines`: the state of each language's engine.

Every answer on the socket names the daemon (`DAEMON_HEADER`: pid, start, version,
settings, the client that started it), so that clients see when it was replaced.

It exits on its own once no client has been connected and no request has come for the
idle period (`SANDBOX_WORKBENCH_DAEMON_IDLE_S`, default 15 minutes; 0 never), on
SIGTERM, SIGINT or SIGHUP, and on `stop`; its live sessions' snapshots are written first.

TCP clients (`serve`) are held to what a client with the token needs, so that clients
without it cannot starve it (`ConnectionGuard`): a bounded number of connections, below
the process's file limit; headers within a few seconds and 16 KiB; the oldest connection
still waiting for headers closed for a new one at the limit. Messages clients can
provoke (failed accepts, bad requests) are logged a few times a second at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from workbench import __version__
from workbench.backends.daemon.location import log_path, peer_is_this_user, socket_path
from workbench.backends.daemon.transport import (
    BRIEF_HEADER,
    DAEMON_HEADER,
    STOP_REASON_HEADER,
    DaemonIdentity,
    printable_reason,
)
from workbench.backends.local import LocalGateway, open_local_gateway
from workbench.config import DAEMON_IDLE_ENV, ConfigError, env_seconds
from workbench.paths import private_data_dir, private_directory
from workbench.protocol.errors import error_response
from workbench.protocol.http import Request, Response, error_json, method_not_allowed
from workbench.server.app import GatewayApp, Message, Receive, Scope, Send

IDLE_ENV = DAEMON_IDLE_ENV
DEFAULT_IDLE_SECONDS = 900.0
STOP_GRACE_SECONDS = 10
"""How long answers in progress may take once a stop cancelled their executions."""
LOG_BYTES = 1 << 20
"""A log larger than this at start is moved to `<log>.1` (one old log kept)."""
LOG = logging.getLogger("sandbox-workbench.daemon")
SOCKET_BACKLOG = 128
"""The Unix socket's queue (uvicorn would otherwise widen it, and asyncio's accepts in
one go, to 2,048)."""
TCP_BACKLOG = 64
"""The TCP listener's queue. asyncio also accepts up to this many connections in one go,
and under a flood takes the next batch before the last one is handled (or its evicted
connections closed): twice as many file descriptors are kept free for that."""
FD_HEADROOM = 96
"""File descriptors kept for all but TCP clients: engine processes (3 each), the store,
the log, the socket's clients."""
MIN_TCP_CONNECTIONS = 16
"""Even under a very low file limit (where accepts may then fail, and are retried)."""
HEADER_TIMEOUT_S = 5.0
"""How long a TCP client may take to send a request's headers, from its connection or
from the first byte after its previous answer (every client sends them at once)."""
IDLE_TIMEOUT_S = 30
"""How long a connection may stay idle after an answer. Longer than clients keep idle
connections in their pools (httpx: 5 s), so that a client never sends a request on a
connection the server is closing at that moment: the request would be lost (workerd
reports it as "Network connection lost"). At the connection limit the longest idle one
is closed first anyway."""
MAX_HEADER_BYTES = 16_384
"""A TCP request's headers at most (h11's default; httptools has no limit of its own)."""
LOG_REPEATS_PER_SECOND = 5
RATE_LIMITED_LOGGERS = ("asyncio", "uvicorn.error", LOG.name)
"""The loggers clients can make speak: asyncio's failed accepts, uvicorn's bad requests,
the daemon's refusals."""


def idle_seconds_from_env() -> float:
    """`$SANDBOX_WORKBENCH_DAEMON_IDLE_S` (the client that started this daemon checked it)."""
    try:
        return env_seconds(IDLE_ENV, DEFAULT_IDLE_SECONDS)
    except ConfigError as error:
        LOG.warning("%s: using %g", error, DEFAULT_IDLE_SECONDS)
        return DEFAULT_IDLE_SECONDS


class Activity:
    """Open connections, requests being answered (executions among them) and the last
    request: for the idle exit and `daemon status`."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.executions = 0
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()


def _uvicorn_protocol(implementation: str) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class for `implementation` (see `http_implementation`)."""
    import importlib

    module, name = {
        "httptools": ("uvicorn.protocols.http.httptools_impl", "HttpToolsProtocol"),
        "h11": ("uvicorn.protocols.http.h11_impl", "H11Protocol"),
    }[implementation]
    protocol: type[asyncio.Protocol] = getattr(importlib.import_module(module), name)
    return protocol


def _protocol_class(implementation: str, activity: Activity) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, refusing peers of another user and counting connections."""
    base = _uvicorn_protocol(implementation)

    class PeerChecked(base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            activity.connections += 1
            activity.touch()
            if not peer_is_this_user(transport.get_extra_info("socket")):
                LOG.warning("refused a connection from another user")
                transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            activity.connections -= 1
            activity.touch()
            super().connection_lost(exc)

    return PeerChecked


def max_tcp_connections() -> int:
    """How many TCP connections to keep open at once: what the file limit leaves after
    `FD_HEADROOM` and two batches of accepts, so that accepting does not fail for want
    of a descriptor (uvicorn's `limit_concurrency` would not do: it counts idle
    connections too, and answers 503 only once the descriptor is taken)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(soft - FD_HEADROOM - 2 * TCP_BACKLOG, MIN_TCP_CONNECTIONS)


class ConnectionGuard:
    """The TCP connections of one listener: at most `limit` at once, each waiting for a
    request's headers at most `header_timeout` seconds and `max_header_bytes` bytes.

    At the limit a new connection closes the one that has waited longest for headers
    (slow, or idle between requests), so however many connections clients without the
    token keep open, a client that sends its request at once is answered. A request
    under way is never cut; when every connection has one, the new one is refused.
    """

    def __init__(
        self,
        limit: int,
        *,
        header_timeout: float = HEADER_TIMEOUT_S,
        max_header_bytes: int = MAX_HEADER_BYTES,
    ) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.max_header_bytes = max_header_bytes
        self._open: set[asyncio.BaseTransport] = set()
        self._waiting: OrderedDict[asyncio.BaseTransport, None] = OrderedDict()
        """Connections waiting for headers, the longest-waiting first."""

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection in, closing the longest-waiting one at the limit;
        False (not counted) when every open connection has a request under way."""
        if len(self._open) >= self.limit:
            if not self._waiting:
                return False
            oldest, _ = self._waiting.popitem(last=False)
            self._open.discard(oldest)
            oldest.close()
        self._open.add(transport)
        return True

    def awaiting_headers(self, transport: asyncio.BaseTransport) -> None:
        """`transport` waits for a request's headers from now on."""
        self._waiting.pop(transport, None)
        self._waiting[transport] = None

    def request_began(self, transport: asyncio.BaseTransport) -> None:
        """`transport` has a request under way: it is not closed for a new connection."""
        self._waiting.pop(transport, None)

    def forget(self, transport: asyncio.BaseTransport) -> None:
        self._open.discard(transport)
        self._waiting.pop(transport, None)


def _guarded_protocol_class(implementation: str, guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol for TCP clients, held to `guard`."""
    base = _uvicorn_protocol(implementation)
    refusal = Response.json(
        503,
        error_response("UNAVAILABLE", "Every connection has a request under way", http_status=503),
    )
    refused = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(refusal.body), refusal.body)
    )

    class Guarded(base):  # type: ignore[valid-type,misc]
        """Tells `guard` when the connection waits for headers and when a request is
        under way, and closes it when the headers take too long or grow too large."""

        _header_deadline: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _idle = False
        """No byte came since the last answer."""

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if not guard.admit(transport):
                LOG.warning(
                    "refused a TCP connection: all %d have a request under way", guard.limit
                )
                transport.write(refused)
                transport.close()
                return
            self._wait_for_headers()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.transport.is_closing():
                return
            if self._request_under_way():
                self._stop_waiting()
                guard.request_began(self.transport)
                return
            if self._idle:  # the next request began: its headers have the header timeout
                self._wait_for_headers()
            self._header_bytes += len(data)
            if self._header_bytes > guard.max_header_bytes:
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self._request_under_way():
                self._wait_for_headers(idle=True)

        def connection_lost(self, exc: Exception | None) -> None:
            guard.forget(self.transport)
            self._stop_waiting()
            super().connection_lost(exc)

        def _request_under_way(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _wait_for_headers(self, *, idle: bool = False) -> None:
            self._stop_waiting()
            self._idle = idle
            self._header_bytes = 0
            timeout = IDLE_TIMEOUT_S if idle else guard.header_timeout
            self._header_deadline = self.loop.call_later(timeout, self.transport.close)
            guard.awaiting_headers(self.transport)

        def _stop_waiting(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

    return Guarded


class RepeatLimit(logging.Filter):
    """Lets a message (by its first line) through at most `per_second` times a second:
    a client that provokes the same error in a loop cannot flood the log."""

    def __init__(
        self,
        per_second: int = LOG_REPEATS_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.per_second = per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._second_ends = 0.0
        self._counts: dict[tuple[int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, str(record.msg).partition("\n")[0][:200])
        with self._lock:
            now = self._clock()
            if now >= self._second_ends:
                self._second_ends = now + 1.0
                self._counts.clear()
            count = self._counts[key] = self._counts.get(key, 0) + 1
        if count == self.per_second:  # the last one this second says so
            record.msg = (
                f"{record.msg} [{count} times within a second: repeats dropped until the next]"
            )
        return count <= self.per_second


def limit_log_rate() -> None:
    """Put a `RepeatLimit` on each of `RATE_LIMITED_LOGGERS` (once)."""
    for name in RATE_LIMITED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RepeatLimit) for existing in logger.filters):
            logger.addFilter(RepeatLimit())


def server_config(app: Any, http: Any, **options: Any) -> Any:
    """A uvicorn configuration for the daemon's apps: no lifespan, no access log, no
    websockets, warnings and worse logged."""
    import uvicorn

    return uvicorn.Config(
        app,
        http=http,
        ws="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_keep_alive=IDLE_TIMEOUT_S,
        **options,
    )


def tcp_server_config(app: GatewayApp, **options: Any) -> Any:
    """`server_config` for a TCP listener (`serve`), its connections held to a
    `ConnectionGuard` sized by the file limit."""
    guard = ConnectionGuard(max_tcp_connections())
    return server_config(
        app,
        _guarded_protocol_class(http_implementation(), guard),
        backlog=TCP_BACKLOG,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **options,
    )


def http_implementation() -> str:
    """httptools (the `serve` extra) hands header values over unstripped, so the token
    check sees exactly what was sent; without it uvicorn's h11 trims surrounding
    whitespace first (the token itself must still match exactly)."""
    import importlib.util

    return "httptools" if importlib.util.find_spec("httptools") else "h11"


class Daemon:
    """One data dir's daemon, from `start` to `stopped`."""

    def __init__(
        self,
        data_dir: Path | None,
        *,
        idle_seconds: float,
        tcp: tuple[socket.socket, str] | None = None,
        gateway_options: dict[str, Any] | None = None,
        started_by: int | None = None,
    ) -> None:
        """`tcp`: a bound listener and its bearer token (`serve`); `started_by`: the pid of
        the client that started it."""
        self.data_dir = private_data_dir(data_dir)
        self.socket = socket_path(self.data_dir)
        self.idle_seconds = idle_seconds
        self.tcp = tcp
        self.started_at = int(time.time() * 1000)
        self.started_by = started_by
        self.activity = Activity()
        self._gateway_options = gateway_options or {}
        self._gateway: LocalGateway | None = None
        self._servers: list[Any] = []
        self._stopping = asyncio.Event()
        self.stop_reason: str | None = None
        """Why it stopped (a signal's name, a client's reason, idle), once it does."""

    # -- life -------------------------------------------------------------------------------
    async def run(self, on_listening: Callable[[], None] = lambda: None) -> None:
        """Own the store, listen, serve until told to stop or idle, then close it all.
        Raises `StoreOwnedError` when another process owns the store."""
        gateway = open_local_gateway(
            self.data_dir, owner_kind="daemon", socket=str(self.socket), **self._gateway_options
        )
        self._gateway = gateway
        listener = self._listen_on_socket()
        try:
            protocol = _protocol_class(http_implementation(), self.activity)
            grace = STOP_GRACE_SECONDS
            socket_config = server_config(
                self._app(), protocol, backlog=SOCKET_BACKLOG, timeout_graceful_shutdown=grace
            )
            configs = [(socket_config, listener)]
            if self.tcp is not None:
                tcp_listener, token = self.tcp
                app = GatewayApp(gateway.handle, token)
                configs.append(
                    (tcp_server_config(app, timeout_graceful_shutdown=grace), tcp_listener)
                )
            limit_log_rate()
            tasks = []
            for config, sock in configs:
                server = quiet_server(config)
                self._servers.append(server)
                tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.add_signal_handler(number, self.stop, number.name)
            while not all(server.started for server in self._servers):
                if any(task.done() for task in tasks):
                    break
                await asyncio.sleep(0.01)
            LOG.info(
                "sandbox-workbench %s daemon (pid %d) serving %s on %s",
                __version__,
                os.getpid(),
                self.data_dir,
                self.socket,
            )
            on_listening()
            watcher = asyncio.create_task(self._exit_when_idle())
            await self._stopping.wait()
            watcher.cancel()
            for server in self._servers:
                server.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()
            listener.close()
            await asyncio.to_thread(gateway.close)  # pending snapshots, sessions, the store
            # Every engine process ends now, whatever its state: the interpreter's exit
            # waits for the engine threads before its atexit hooks run, and a thread
            # blocked writing to a process that stopped reading (a wedged engine) kept
            # the daemon from ever exiting. Killed, its pipe fails the write.
            gateway.resources.engine_process_pool.close()
            LOG.info("daemon (pid %d) stopped", os.getpid())

    def stop(self, reason: str = "asked to stop") -> None:
        """Stop serving: new clients find no socket (and wait for the store's lock, not for
        this daemon), executions in progress are cancelled, their answers go out, then
        the snapshots are written. Asked again (a second Ctrl+C), stop without waiting."""
        if self._stopping.is_set():
            LOG.info("stopping now: %s", reason)
            for server in self._servers:
                server.force_exit = True
            return
        LOG.info("stopping: %s", reason)
        self.stop_reason = reason
        self._stopping.set()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        if self._gateway is not None:
            self._gateway.cancel_all(f"the local daemon stopped ({reason})")

    def _listen_on_socket(self) -> socket.socket:
        """The socket, replacing a stale one (the owner lock says no daemon uses it)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(str(self.socket))
        finally:
            os.umask(old_umask)
        os.chmod(self.socket, 0o600)
        listener.listen(SOCKET_BACKLOG)
        listener.set_inheritable(False)
        return listener

    async def _exit_when_idle(self) -> None:
        if self.idle_seconds <= 0:
            return
        while True:
            await asyncio.sleep(min(5.0, self.idle_seconds / 4))
            quiet = time.monotonic() - self.activity.last
            if self.activity.connections == 0 and quiet >= self.idle_seconds:
                self.stop(f"no client for {quiet:.0f} s")
                return

    # -- the socket's own routes ------------------------------------------------------------
    def _app(self) -> Callable[[Scope, Receive, Send], Any]:
        gateway_app = GatewayApp(self._handle, None)
        identity = (DAEMON_HEADER.encode(), json.dumps(self.identity().to_json()).encode())

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await gateway_app(scope, receive, send)
                return
            executes = scope["method"] == "POST" and str(scope["path"]).endswith("/execute")
            self.activity.touch()
            self.activity.requests += 1
            self.activity.executions += executes

            async def send_naming_the_daemon(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), identity]}
                await send(message)

            try:
                await gateway_app(scope, receive, send_naming_the_daemon)
            finally:
                self.activity.requests -= 1
                self.activity.executions -= executes
                self.activity.touch()

        return app

    async def _handle(self, request: Request) -> Response:
        gateway = self._gateway
        assert gateway is not None
        path = socket_route(request.path)
        allowed = None if path is None else SOCKET_ROUTES[path]
        if allowed is not None and request.method != allowed:
            return replace(error_json(method_not_allowed()), headers=(("allow", allowed),))
        if path == "/v1/daemon" and request.method == "GET":
            memory = BRIEF_HEADER not in request.headers
            return _json(200, await asyncio.to_thread(self.info, memory=memory))
        if path == "/v1/daemon/stop" and request.method == "POST":
            reason = stop_reason(request.headers)
            asyncio.get_running_loop().call_later(0.05, self.stop, reason)
            return _json(200, {"stopping": True, "pid": os.getpid()})
        if path == "/v1/engines" and request.method == "GET":
            return _json(200, {"engines": await asyncio.to_thread(_engine_statuses)})
        return await gateway.handle(request)

    def _engine_pids(self) -> list[int]:
        gateway = self._gateway
        if gateway is None:
            return []
        return [
            engine_process.process.pid
            for engine_process in gateway.resources.engine_process_pool.processes()
        ]

    def identity(self) -> DaemonIdentity:
        gateway = self._gateway
        settings = None if gateway is None else gateway.resources.local
        return DaemonIdentity(os.getpid(), self.started_at, __version__, settings, self.started_by)

    def info(self, *, memory: bool = True) -> dict[str, Any]:
        """What `GET /v1/daemon` answers; `memoryBytes` is null unless `memory` (reading
        it takes milliseconds per engine process, and a client connecting only needs the
        rest)."""
        gateway = self._gateway
        tcp = None
        if self.tcp is not None:
            host, port = self.tcp[0].getsockname()[:2]
            tcp = f"{host}:{port}"
        return {
            "pid": os.getpid(),
            "version": __version__,
            "dataDir": str(self.data_dir),
            "socket": str(self.socket),
            "startedAt": self.started_at,
            "liveSessions": 0 if gateway is None else len(gateway.sessions),
            "requestsInFlight": self.activity.requests - 1,  # not counting this one
            "executionsInFlight": self.activity.executions,
            "memoryBytes": (
                process_tree_memory(os.getpid(), self._engine_pids()) if memory else None
            ),
            "logFile": str(log_path(self.data_dir)),
            "idleSeconds": self.idle_seconds,
            "tcp": tcp,
            "settings": None if gateway is None else gateway.resources.local.to_json(),
            "startedBy": self.started_by,
        }


def stop_reason(headers: Mapping[str, str]) -> str:
    """Why a client stops the daemon (`STOP_REASON_HEADER`, if `printable_reason`), else
    `daemon stop` (it goes into the log and into cancelled runs' errors)."""
    return printable_reason(headers.get(STOP_REASON_HEADER, "")) or "`daemon stop`"


SOCKET_ROUTES: Final = {"/v1/daemon": "GET", "/v1/daemon/stop": "POST", "/v1/engines": "GET"}
"""The daemon's own routes and their methods: on its socket only, never passed on from
TCP."""


def socket_route(target: str) -> str | None:
    """The daemon route a request target names, or None (a gateway route)."""
    path = target.split("?", 1)[0]
    return path if path in SOCKET_ROUTES else None


def quiet_server(config: Any, *, own_signals: bool = False) -> Any:
    """A uvicorn server that ticks once a second instead of ten times, so that an idle one
    sleeps; `stop`, or a signal it takes, starts its (graceful) shutdown at once. It leaves
    signals to its caller (the daemon: two servers share one loop) unless `own_signals`
    (`serve` in front of a daemon). Its own attributes are prefixed, clear of uvicorn's."""
    import uvicorn

    class Server(uvicorn.Server):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self._quiet_exit = asyncio.Event()
            self._quiet_loop: asyncio.AbstractEventLoop | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if own_signals:
                with super().capture_signals():
                    yield
            else:
                yield

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if self._quiet_loop is not None:  # a signal handler: the loop may be anywhere
                self._quiet_loop.call_soon_threadsafe(self._quiet_exit.set)

        async def main_loop(self) -> None:
            self._quiet_loop = asyncio.get_running_loop()
            counter = 0
            while not await self.on_tick(counter):
                counter += 10  # a multiple of ten: each tick refreshes the Date header
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._quiet_exit.wait()

        def stop(self) -> None:
            self.should_exit = True
            self._quiet_exit.set()

    return Server(config)


def _json(status: int, data: Any) -> Response:
    return Response(status, json.dumps(data).encode())


def _engine_statuses() -> list[dict[str, str]]:
    from engines.status import all_statuses

    return [
        {
            "language": item.language,
            "engine": item.engine,
            "version": item.version,
            "state": item.state.value,
            "detail": item.detail,
        }
        for item in all_statuses()
    ]


def process_tree_memory(pid: int, children: list[int]) -> int:
    """The memory of `pid`, its `children` (the engine processes) and its other
    descendants (the engines' fork server) as their summed PSS: a page they share (the
    engines' images, copy-on-write after the fork) counts once in all, not once in each
    as summed RSS would. A process whose PSS cannot be read counts its RSS; on a system
    without `/proc`, the daemon's own peak."""
    if not Path("/proc").is_dir():
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    members = {pid, *children, *_descendants(pid)}
    return sum(_proc_kib(member, "smaps_rollup", "Pss:") for member in members) * 1024


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from `/proc/PID/task/*/children` (none where unreadable)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        for child in children:
            found += [child, *_descendants(child)]
    return found


def _proc_kib(pid: int, name: str, key: str) -> int:
    """The KiB of `key` in `/proc/PID/NAME` (VmRSS of `status` when that cannot be read)."""
    try:
        text = Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return 0 if name == "status" else _proc_kib(pid, "status", "VmRSS:")
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0 if name == "status" else _proc_kib(pid, "status", "VmRSS:")


def open_log(data_dir: Path) -> Path:
    """The daemon's log file, rotated once when large, receiving its stderr and logging."""
    path = log_path(data_dir)
    private_directory(path.parent.parent, tighten=False)
    private_directory(path.parent, tighten=True)
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > LOG_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.dup2(fd, 2)  # tracebacks and engine panics land here too
    os.close(fd)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    return path
