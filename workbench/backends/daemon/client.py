"""Reaching a data dir's daemon: find it, start it when there is none, replace it when it
is of another version, and hand out a `Backend` over its socket.

Clients that start at once start one daemon: each takes the spawn lock before it starts
one, and asks again once it holds it. The daemon takes the data dir's owner lock before
it listens, so even a daemon started by hand next to ours gives up at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engines.locations import CACHE_ENV
from workbench import __version__
from workbench.api.client import Backend
from workbench.api.display import counted, warn_untrusted
from workbench.api.engines import EngineInfo, Progress
from workbench.backends.daemon.location import (
    RUNTIME_DIR_ENV,
    STATE_DIR_ENV,
    UnsafeLocationError,
    check_socket,
    log_path,
    peer_is_this_user,
    socket_path,
    spawn_lock_path,
)
from workbench.backends.daemon.transport import (
    BRIEF_HEADER,
    STOP_REASON_HEADER,
    DaemonIdentity,
    SocketTransport,
    printable_reason,
    unreachable,
)
from workbench.backends.owner import StoreOwnedError, current_owner
from workbench.config import (
    FILE_API_ENV,
    RUBY_CONTEXTS_ENV,
    AskedLocalSettings,
    ConfigError,
    LocalSettings,
    asked_local_settings,
    check_local_environment,
)
from workbench.paths import CONFIG_DIR_ENV, DATA_DIR_ENV, private_data_dir
from workbench.protocol.http import parse_json, parse_json_response

START_SECONDS = 60.0
"""How long a new daemon may take to answer (it imports wasmtime and opens the store)."""
PROBE_SECONDS = 2.0
STOP_SECONDS = 60.0
"""How long a daemon of another version may take to write its snapshots and exit."""


FATAL = "fatal: "
"""Begins the daemon's last log line when it cannot start: what its client says."""
OWNED_ELSEWHERE = 75
"""The exit status of a daemon whose store another process owns (EX_TEMPFAIL): one that
lost a race to start, which its client waits out."""


class DaemonStartError(Exception):
    """The daemon could not be started; the message says why (from its log), and
    `log_tail` holds its last lines (shown under `--debug`)."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class DaemonInfo:
    """`GET /v1/daemon`: what the daemon says about itself."""

    pid: int
    version: str
    data_dir: str
    socket: str
    started_at: int
    live_sessions: int
    requests_in_flight: int
    executions_in_flight: int
    """Of those requests, the runs of code (`POST …/execute`)."""
    memory_bytes: int | None
    """PSS of the daemon's process tree; None unless asked for (`probe(memory=True)`):
    reading it takes the daemon milliseconds per engine process."""
    log_file: str
    idle_seconds: float
    tcp: str | None
    settings: LocalSettings | None
    """How its sandboxes differ from a default deployment (None: it did not say)."""
    started_by: int | None = None
    """The pid of the client that started it (None: `serve`, or started by hand)."""

    @property
    def identity(self) -> DaemonIdentity:
        return DaemonIdentity(
            self.pid, self.started_at, self.version, self.settings, self.started_by
        )

    @classmethod
    def from_json(cls, data: Any) -> DaemonInfo:
        if not isinstance(data, dict):
            raise ValueError("not a daemon's answer")
        return cls(
            int(data["pid"]),
            str(data["version"]),
            str(data["dataDir"]),
            str(data["socket"]),
            int(data["startedAt"]),
            int(data["liveSessions"]),
            int(data.get("requestsInFlight", 0)),
            int(data.get("executionsInFlight", 0)),
            None if data.get("memoryBytes") is None else int(data["memoryBytes"]),
            str(data["logFile"]),
            float(data["idleSeconds"]),
            None if data.get("tcp") is None else str(data["tcp"]),
            LocalSettings.from_json(data.get("settings")),
            data["startedBy"] if isinstance(data.get("startedBy"), int) else None,
        )


def probe(path: Path, *, memory: bool = False) -> DaemonInfo | None:
    """The daemon answering on `path`, or None when none does (a stale or missing socket);
    with its `memory_bytes` only if `memory`. A socket that is not ours raises
    `UnsafeLocationError`."""
    try:
        check_socket(path)
    except FileNotFoundError:
        return None
    try:
        status, body = _blocking_request(path, "GET", "/v1/daemon", brief=not memory)
    except OSError:
        return None
    if status != 200:
        return None
    try:
        info = DaemonInfo.from_json(parse_json(body))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return dataclasses.replace(info, socket=str(path))  # the path checked, not the one told


def stop(path: Path, data_dir: Path, reason: str | None = None) -> int | None:
    """Ask the daemon to write its snapshots and exit, and wait until it has released the
    store; its pid (None: no daemon was running). `reason` is what it logs (else
    `daemon stop`). A daemon that holds the store but no longer answers on `path` (its
    socket was removed) gets SIGTERM, which does the same."""
    info = stop_at(path, reason)
    if info is not None:
        pid = info.pid
    else:
        holder = current_owner(data_dir)
        if holder is None or holder.kind != "daemon" or holder.pid <= 0:
            return None
        pid = holder.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    # Until that daemon released the store (one started since by another client may hold
    # it then: that one is not waited for).
    while (holder := current_owner(data_dir)) is not None and holder.pid in (pid, 0):
        if time.monotonic() > deadline:
            raise DaemonStartError(f"the local daemon (pid {pid}) did not stop in time")
        time.sleep(0.02)
    return pid


def stop_at(path: Path, reason: str | None = None) -> DaemonInfo | None:
    """Ask the daemon on `path` to stop (saying why: `reason`) and wait until its process
    has gone (None: none answered there)."""
    info = probe(path)
    if info is None:
        return None
    checked = None if reason is None else printable_reason(reason)
    extra = {} if checked is None else {STOP_REASON_HEADER: checked}
    with contextlib.suppress(OSError):
        _blocking_request(path, "POST", "/v1/daemon/stop", extra=extra)
    deadline = time.monotonic() + STOP_SECONDS
    while _alive(info.pid):
        if time.monotonic() > deadline:
            raise DaemonStartError(f"the local daemon (pid {info.pid}) did not stop in time")
        time.sleep(0.02)
    return info


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie does not: it has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def ensure_daemon(
    data_dir: Path | None = None,
    settings: AskedLocalSettings | None = None,
    *,
    given_up: threading.Event | None = None,
    note: Callable[[str], None] = warn_untrusted,
    adopt: bool = False,
) -> DaemonInfo:
    """The daemon of `data_dir` (default: the user's), started if none runs, and replaced
    if it is of another version or does not hold what `settings` ask (default:
    `asked_local_settings()`; the replacement keeps what they do not ask, a daemon
    started anew has the defaults there): one data dir is one deployment, and every
    answered run is stored, so a replacement loses no state. A daemon that `serve`
    started (it listens on TCP too) is not replaced: that would end the gateway of every
    remote client (`ConfigError`); nor one running code for other clients: that would
    cancel their runs. Once `given_up` is set (the caller stopped waiting), the waits for
    another client's start and for the daemon's answer end (`DaemonStartError`). `note`
    tells of a replacement (on stderr by default). With `adopt` (a client reconnecting to
    a daemon that went away, or the workbench opening the local profile again), a daemon
    of this version is taken whatever its settings: `settings` apply only to one started
    here, and two clients of different settings do not replace each other's daemon in
    turn."""
    check_local_environment()  # the values a daemon started here would read
    for name in (CACHE_ENV, STATE_DIR_ENV):  # directories it makes when missing
        named = os.environ.get(name)
        if named and Path(named).expanduser().exists() and not Path(named).expanduser().is_dir():
            raise ConfigError(f"{name} must name a directory, not the file {named}")
    asked = asked_local_settings() if settings is None else settings
    directory = private_data_dir(data_dir).absolute()  # the daemon runs elsewhere
    path = socket_path(directory)

    def suits(info: DaemonInfo) -> bool:
        return info.version == __version__ and (adopt or asked.held_by(info.settings))

    info = probe(path)
    if info is not None and suits(info):
        return info
    with _spawn_lock(directory, given_up):
        info = probe(path)
        if info is not None and suits(info):
            return info
        # A daemon started here holds what is asked, and the rest as the one it replaces.
        wanted = asked.over(info.settings if info and info.settings else LocalSettings())
        if info is not None and info.tcp is not None:
            # Replacing it would end `serve` and every remote client's gateway with it.
            raise ConfigError(
                f"the local daemon (pid {info.pid}, sandbox-workbench {info.version}) serves "
                f"remote clients at {info.tcp} (sandbox-workbench serve) with "
                f"{describe_settings(info.settings)}; this command asks for "
                f"{describe_asked(asked)} with version {__version__}: give it the "
                "same settings, or stop serve first"
            )
        if info is not None and info.version != __version__:
            _refuse_while_busy(
                info, f"is of sandbox-workbench {info.version}", f"version {__version__}"
            )
            stop(path, directory, f"replaced by a client of sandbox-workbench {__version__}")
            note(
                f"note: replaced the local daemon of sandbox-workbench {info.version} "
                f"(pid {info.pid}) with one of this version ({__version__})"
            )
            info = None
        elif info is not None and not asked.held_by(info.settings):
            _refuse_while_busy(
                info,
                f"holds {describe_settings(info.settings)}",
                describe_asked(asked),
                "use the same settings, ",
            )
            stop(path, directory, f"restarted by a client asking for {describe_asked(asked)}")
            note(
                f"note: restarted the local daemon (pid {info.pid}) with "
                f"{describe_settings(wanted)} (it had {describe_settings(info.settings)})"
            )
            info = None
        if info is None:
            info = _start(directory, path, wanted, given_up)
    return info


def _refuse_while_busy(info: DaemonInfo, holds: str, wanted: str, other_way: str = "") -> None:
    """Replacing a daemon that runs code for other clients would cancel their runs, with
    no word of why: a `ConfigError` instead, saying what the daemon `holds` and what this
    command asks for."""
    if info.executions_in_flight:
        raise ConfigError(
            f"the local daemon (pid {info.pid}) {holds} and is running "
            f"{counted(info.executions_in_flight, 'execution')} for other clients; this "
            f"command asks for {wanted}: try again when they end, {other_way}or stop it with "
            "`sandbox-workbench daemon stop`"
        )


def describe_settings(settings: LocalSettings | None) -> str:
    """`Ruby contexts on, File API off`: the settings as a note names them."""
    if settings is None:
        return "unknown settings"
    return describe_asked(AskedLocalSettings(settings.ruby_contexts, settings.file_api))


def describe_asked(asked: AskedLocalSettings) -> str:
    """`File API off`: what a client asks for, as a note names it."""
    named = [
        f"{label} {'on' if value else 'off'}"
        for label, value in (("Ruby contexts", asked.ruby_contexts), ("File API", asked.file_api))
        if value is not None
    ]
    return ", ".join(named) or "no particular settings"


def open_daemon_backend(
    data_dir: Path | None = None,
    *,
    execution_timeout: float | None = None,
    note: Callable[[str], None] = warn_untrusted,
    adopt: bool = False,
) -> Backend:
    """The local backend through its daemon (started on demand); `execution_timeout` is
    every execution's wall-clock limit unless a call gives its own; `note` and `adopt` as
    in `ensure_daemon`."""
    info = ensure_daemon(data_dir, note=note, adopt=adopt)
    transport = SocketTransport(Path(info.socket), f"local ({info.data_dir})", Path(info.data_dir))
    transport.daemon = info.identity
    return DaemonBackend(transport, execution_timeout=execution_timeout)


class DaemonBackend(Backend):
    """The local backend through its daemon. `served_by` names the daemon that answered
    last, and `health()` adds its identity (`daemon`: `DaemonIdentity.to_json`): another
    client may have replaced it since this one opened (other settings, another version),
    or it exited when idle and was started again."""

    def __init__(self, transport: SocketTransport, *, execution_timeout: float | None) -> None:
        self.socket_transport = transport
        super().__init__(
            transport,
            name="local",
            engines=DaemonEngineManager(transport),
            execution_timeout=execution_timeout,
        )

    @property
    def served_by(self) -> str:
        daemon = self.socket_transport.daemon
        return "" if daemon is None else f"daemon pid {daemon.pid}"

    @served_by.setter
    def served_by(self, value: str) -> None:
        """Ignored (`Backend.__init__` sets it): the daemon's answers say who serves."""

    async def health(self) -> dict[str, Any]:
        data = await super().health()
        daemon = self.socket_transport.daemon  # the one that just answered
        if daemon is not None:
            data["daemon"] = daemon.to_json()
        return data


class DaemonEngineManager:
    """The engines as the daemon sees them; preparing one happens here, in the client,
    with its progress shown (the engine cache is shared, and locked while it changes)."""

    def __init__(self, transport: SocketTransport) -> None:
        self._transport = transport

    async def statuses(self) -> list[EngineInfo]:
        data = parse_json_response(await self._transport.request("GET", "/v1/engines"))
        if not isinstance(data, dict) or not isinstance(data.get("engines"), list):
            raise unreachable(
                "the local daemon sent an invalid engine list", self._transport.socket
            )
        return [
            EngineInfo(
                str(item["language"]),
                str(item["engine"]),
                str(item["version"]),
                str(item["state"]),
                str(item.get("detail", "")),
            )
            for item in data["engines"]
        ]

    async def prepare(self, language: str, progress: Progress) -> None:
        from workbench.backends.local.runtimes import LocalEngineManager

        await LocalEngineManager().prepare(language, progress)


def _start(
    directory: Path, path: Path, settings: LocalSettings, given_up: threading.Event | None
) -> DaemonInfo:
    """Start the daemon once the store has no owner (one stopping is waited for; one
    starting elsewhere is used) and wait for its answer."""
    process: StartedProcess | None = None
    deadline = time.monotonic() + START_SECONDS
    while True:
        info = probe(path)
        if info is not None:
            return info
        if process is not None and process.poll() not in (None, OWNED_ELSEWHERE):
            raise _start_failure(directory, process.returncode)
        holder = current_owner(directory)
        if holder is None:
            if process is None or process.poll() is not None:
                process = _spawn(directory, settings)
        elif holder.kind == "unknown":
            pass  # taken a moment ago, its holder not written yet (a busy machine): wait
        elif holder.kind != "daemon":
            raise StoreOwnedError(directory, holder)
        elif holder.socket is not None and Path(holder.socket) != path:
            raise DaemonStartError(
                f"the local daemon of {directory} (pid {holder.pid}) listens on "
                f"{holder.socket}, not {path}: it was started with another runtime dir "
                f"(${RUNTIME_DIR_ENV} or $XDG_RUNTIME_DIR); use the same one, or stop it "
                f"with `kill {holder.pid}`"
            )
        if time.monotonic() > deadline:
            if holder is not None and holder.kind == "daemon":
                raise DaemonStartError(
                    f"the local daemon (pid {holder.pid}) holds {directory} but does not "
                    f"answer on {path}; stop it with `sandbox-workbench daemon stop`"
                )
            raise DaemonStartError(
                f"the local daemon did not answer within {START_SECONDS:g} s; its log: "
                f"{log_path(directory)}"
            )
        _poll_pause(given_up)


PATH_VARIABLES = (DATA_DIR_ENV, CONFIG_DIR_ENV, CACHE_ENV, RUNTIME_DIR_ENV, STATE_DIR_ENV)
"""Directories the daemon reads from its environment: absolute for it, which runs in `/`."""


class StartedProcess(Protocol):
    """What `_start` uses of the daemon's process (`subprocess.Popen` has it)."""

    returncode: int | None

    def poll(self) -> int | None: ...


def _spawn(directory: Path, settings: LocalSettings) -> StartedProcess:
    environment = dict(os.environ)
    for name in PATH_VARIABLES:
        if environment.get(name):
            environment[name] = os.path.abspath(os.path.expanduser(environment[name]))
    # The settings the client resolved, whatever the config file says by the time it reads.
    environment[RUBY_CONTEXTS_ENV] = "1" if settings.ruby_contexts else "0"
    environment[FILE_API_ENV] = "enabled" if settings.file_api else "disabled"
    arguments = ["--data-dir", str(directory.absolute()), "--client-pid", str(os.getpid())]
    return _launch(arguments, environment)


def _launch(arguments: list[str], environment: dict[str, str]) -> StartedProcess:
    """`python -m workbench.daemon ARGUMENTS`, detached from this process. (The tests
    fork it instead from a process that has imported it: `tests/cli_fork_server.py`.)"""
    process = subprocess.Popen(
        [sys.executable, "-m", "workbench.daemon", *arguments],
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        cwd="/",  # holds no directory of the client's busy
        start_new_session=True,  # the terminal's Ctrl+C is the client's, not the daemon's
    )
    threading.Thread(target=process.wait, daemon=True).start()  # reap it when it exits
    return process


def _start_failure(directory: Path, status: int | None) -> DaemonStartError:
    """What the daemon's log says about why it exited at start (its lines since it
    started, not older ones)."""
    log = log_path(directory)
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    starts = [index for index, line in enumerate(lines) if " INFO starting (pid " in line]
    recent = lines[starts[-1] :] if starts else []
    fatal = [line.split(FATAL, 1)[1] for line in recent if FATAL in line]
    tail = "\n".join(recent or lines[-40:])
    if fatal:
        return DaemonStartError(fatal[-1], tail)
    return DaemonStartError(
        f"the local daemon exited at start (status {status}); its log: {log}", tail
    )


@contextlib.contextmanager
def _spawn_lock(directory: Path, given_up: threading.Event | None = None) -> Iterator[None]:
    fd = os.open(spawn_lock_path(directory), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DaemonStartError(
                        "another client has been starting the local daemon for too long"
                    ) from None
                _poll_pause(given_up)
        yield
    finally:
        os.close(fd)


def _poll_pause(given_up: threading.Event | None) -> None:
    """The pause between two polls of a daemon start; a caller that gave up ends it."""
    if given_up is None:
        time.sleep(0.02)
    elif given_up.wait(0.02):
        raise DaemonStartError("the wait for the local daemon was given up")


def _blocking_request(
    path: Path,
    method: str,
    target: str,
    *,
    brief: bool = False,
    extra: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """One small request without an event loop (connecting is synchronous for clients);
    `brief`: with `BRIEF_HEADER`; `extra`: more headers (ASCII, no line ends)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(PROBE_SECONDS)
        connection.connect(str(path))
        if not peer_is_this_user(connection):
            raise UnsafeLocationError(
                f"the process answering on {path} is another user's: refusing it"
            )
        headers = {**({BRIEF_HEADER: "1"} if brief else {}), **(extra or {})}
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        connection.sendall(
            f"{method} {target} HTTP/1.1\r\nhost: local-daemon\r\ncontent-length: 0\r\n"
            f"{lines}connection: close\r\n\r\n".encode("ascii")
        )
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise OSError("not an HTTP answer")
    return int(parts[1]), body
