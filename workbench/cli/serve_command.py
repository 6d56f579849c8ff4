"""`sandbox-workbench serve`: serve the gateway protocol from the local backend."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

import click

from workbench.cli.common import (
    EXIT_USAGE,
    SERVE_TIMEOUT_HELP,
    data_dir_option,
    note,
    timeout_option_with,
)
from workbench.cli.errors import CommandError
from workbench.cli.terminal import echo_untrusted
from workbench.config import is_loopback_host, is_visible_ascii
from workbench.protocol.errors import SandboxError

TOKEN_ENV = "SANDBOX_WORKBENCH_TOKEN"
MIN_TOKEN_LENGTH = 16
"""Shorter given tokens are refused: a guessable token hands out code execution."""


def token_problem(token: str) -> str | None:
    """Why a given token cannot be used, or None.

    Visible ASCII only: clients send it verbatim in a header, where whitespace would be
    trimmed and other characters mangled, so such a token could never match.
    """
    if not token:
        return "is empty"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"is shorter than {MIN_TOKEN_LENGTH} characters"
    if not is_visible_ascii(token):
        return "may only contain visible ASCII characters (no spaces)"
    return None


@click.command(
    "serve",
    epilog="""\b
Examples:
  sandbox-workbench serve                          # token generated and printed
  SANDBOX_WORKBENCH_TOKEN=… sandbox-workbench serve --port 9000
  sandbox-workbench serve --port 0 --timeout 60    # any free port, 60 s per run""",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=8787,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port (0: any free).",
)
@click.option(
    "--token",
    help=f"Bearer token: at least {MIN_TOKEN_LENGTH} visible ASCII characters "
    f"(default: ${TOKEN_ENV} if set, even to empty; else generated and printed).",
)
@data_dir_option
@timeout_option_with(SERVE_TIMEOUT_HELP)
@click.option(
    "--allow-non-loopback",
    is_flag=True,
    help="Allow binding an address other than loopback (anyone who can reach it and has "
    "the token can run code).",
)
def serve_command(
    host: str,
    port: int,
    token: str | None,
    data_dir: Path | None,
    timeout: float | None,
    allow_non_loopback: bool,
) -> None:
    """Serve the gateway protocol (docs/gateway-protocol.md) from the local backend.

    `serve` is the data dir's local daemon, listening on TCP too; when a daemon runs
    already, `serve` is a TCP front of it. Either way there is one owner of the live
    contexts, which the TUI, `run` and `watch` share. --timeout is the wall-clock limit
    of an execution whose request names none (`timeoutMs`, which the local backend's
    clients send; a remote profile's `run --timeout` is only how long it waits),
    whatever the clients wait; it is the daemon's own when `serve` is the daemon.
    """
    if not is_loopback_host(host) and not allow_non_loopback:
        raise click.UsageError(
            f"refusing to bind {host}: not a loopback address (pass --allow-non-loopback)"
        )
    source = "--token" if token is not None else f"${TOKEN_ENV}"
    if token is None:
        token = os.environ.get(TOKEN_ENV)  # set but empty counts as given (and is refused)
    generated = token is None
    if token is None:
        token = secrets.token_urlsafe(32)
    elif (problem := token_problem(token)) is not None:
        raise CommandError(f"the token from {source} {problem}", EXIT_USAGE)
    listener = _bind(host, port)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(listener, token, generated, data_dir, timeout))


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a busy port is one clear error, and
    listening before the address is printed."""
    from workbench.daemon.server import TCP_BACKLOG

    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        )[0]
    except socket.gaierror as error:
        raise CommandError(f"cannot resolve --host {host}: {error.strerror}", EXIT_USAGE) from None
    listener = socket.socket(family, kind, protocol)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            raise CommandError(
                f"port {port} on {host} is already in use (another `serve`?): stop that "
                "server or choose another --port (0 picks a free one)"
            ) from None
        raise CommandError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    listener.listen(TCP_BACKLOG)  # clients queue from here on, before the server accepts
    listener.set_inheritable(False)
    return listener


async def _serve(
    listener: socket.socket,
    token: str,
    generated: bool,
    data_dir: Path | None,
    timeout: float | None,
) -> None:
    """Be the data dir's daemon, listening on TCP too; or, when a daemon runs already,
    a TCP front of it: one owner of the live state either way."""
    from workbench.backends.daemon import probe, socket_path
    from workbench.paths import private_data_dir
    from workbench.profiles import opening_local_store

    with opening_local_store(data_dir):
        directory = private_data_dir(data_dir)
        running = probe(socket_path(directory))
    bound = listener.getsockname()
    shown_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    token_note = f" (token: {token})" if generated else f" (token from --token or ${TOKEN_ENV})"
    where = f"http://{shown_host}:{bound[1]}"
    if running is not None:
        echo_untrusted(
            f"sandbox-workbench serve: listening on {where}{token_note}, in front of the "
            f"local daemon (pid {running.pid})"
        )
        if timeout is not None:
            note(
                "note: --timeout does not apply in front of a running daemon: requests "
                "without timeoutMs get the daemon's own limit (stop it first, and `serve` "
                "is the daemon, with this limit)"
            )
        await _serve_in_front(listener, token, Path(running.socket), directory)
        return
    await _serve_as_daemon(listener, token, directory, timeout, f"{where}{token_note}")


async def _serve_as_daemon(
    listener: socket.socket, token: str, directory: Path, timeout: float | None, shown: str
) -> None:
    from workbench.daemon.server import Daemon
    from workbench.profiles import configured_timeout, local_limits, opening_local_store

    limits = local_limits(configured_timeout() if timeout is None else timeout)
    daemon = Daemon(
        directory,
        idle_seconds=0,
        tcp=(listener, token),
        gateway_options={"limits": limits, "prepare_progress": _print_preparation()},
    )

    def listening() -> None:
        echo_untrusted(f"sandbox-workbench serve: listening on {shown}")
        asyncio.get_running_loop().run_in_executor(None, _note_unprepared_engines)

    with opening_local_store(directory):
        await daemon.run(listening)
    if daemon.stop_reason is not None:  # a signal, or `daemon stop`, which ended it unsaid
        echo_untrusted(f"sandbox-workbench serve: stopped ({daemon.stop_reason})", err=True)


async def _serve_in_front(
    listener: socket.socket, token: str, daemon_socket: Path, directory: Path
) -> None:
    """Pass every authorized request on to the running daemon."""
    from workbench.backends.daemon.transport import SocketTransport
    from workbench.backends.local.routes import allowing
    from workbench.daemon.server import (
        limit_log_rate,
        quiet_server,
        socket_route,
        tcp_server_config,
    )
    from workbench.protocol.http import Request, Response, error_json, not_found
    from workbench.server.app import GatewayApp

    transport = SocketTransport(daemon_socket, "local daemon", directory)

    async def forward(request: Request) -> Response:
        if socket_route(request.path) is not None:  # the daemon's own: not for TCP clients
            return error_json(not_found())
        try:  # the transport relays status and body: a 405's `Allow` is made again here
            return allowing(await transport.forward(request), request.path)
        except SandboxError as error:
            return error_json(error)

    config = tcp_server_config(GatewayApp(forward, token))
    limit_log_rate()
    pinger = asyncio.create_task(transport.keep_alive())  # no idle exit while this is up
    try:
        await quiet_server(config, own_signals=True).serve(sockets=[listener])
    finally:
        pinger.cancel()


def _note_unprepared_engines() -> None:
    """Say which engines the first run in their language will prepare (minutes)."""
    from engines.status import EngineState, all_statuses

    waiting = [item.language for item in all_statuses() if item.state is not EngineState.READY]
    if len(waiting) == 1:
        what = f"the {waiting[0]} engine is not prepared: the first run in it prepares it"
    elif waiting:
        languages = f"{', '.join(waiting[:-1])} and {waiting[-1]}"
        what = f"the {languages} engines are not prepared: the first run of each prepares it"
    else:
        return
    note(f"note: {what} (minutes); `sandbox-workbench engines install` does it now, with progress")


def _print_preparation() -> Callable[[str, str, float], None]:
    """One line per step of an engine prepared on first use (`serve` is a log, not a
    terminal UI): a first request in a new language can take minutes."""
    shown: set[tuple[str, str]] = set()

    def show(language: str, step: str, fraction: float) -> None:
        if (language, step) in shown:
            return
        shown.add((language, step))
        echo_untrusted(
            f"sandbox-workbench serve: preparing the {language} engine: {step} ({fraction:.0%})",
            err=True,
        )

    return show
