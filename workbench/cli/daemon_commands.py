"""`sandbox-workbench daemon`: the local daemon that owns a data dir's live state."""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import asdict
from pathlib import Path

import click

from workbench.cli.common import data_dir_option, note, resolve_data_dir
from workbench.cli.terminal import echo_untrusted

DAEMON_EPILOG = """\b
Examples:
  sandbox-workbench daemon status
  sandbox-workbench daemon stop

\b
The TUI, every command, `watch`, the pytest plugin and the Python API reach the local
backend through one daemon per data dir, started on first use; it exits after a quiet
spell without clients ($SANDBOX_WORKBENCH_DAEMON_IDLE_S, default 900; 0 never).
`--no-daemon` opens the store in the command's own process instead."""


@click.group("daemon", epilog=DAEMON_EPILOG)
def daemon_group() -> None:
    """The local daemon: one process per data dir owns the store and every live context."""


def _data_dir(data_dir: Path | None) -> Path:
    from workbench.paths import data_dir as default_data_dir

    return default_data_dir(resolve_data_dir(data_dir))


@daemon_group.command(
    "status",
    epilog="""\b
Examples:
  sandbox-workbench daemon status
  sandbox-workbench --data-dir ./scratch daemon status --json""",
)
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(data_dir: Path | None, as_json: bool) -> None:
    """Whether a daemon runs for the data dir, and what it holds."""
    from workbench.backends.daemon import probe, socket_location, socket_path
    from workbench.backends.owner import current_owner

    directory = _data_dir(data_dir)
    info = probe(socket_path(directory), memory=True) if directory.exists() else None
    if as_json:
        echo_untrusted(json.dumps({"running": info is not None, **(asdict(info) if info else {})}))
        return
    if info is None:
        holder = current_owner(directory) if directory.exists() else None
        if holder is not None and holder.kind == "daemon" and holder.socket is not None:
            if Path(holder.socket) != socket_location(directory):
                # Its socket is in the runtime dir of the environment that started it.
                echo_untrusted(
                    f"the local daemon of {directory} (pid {holder.pid}) runs, listening on "
                    f"{holder.socket}: another runtime dir than this shell's "
                    "($XDG_RUNTIME_DIR or $SANDBOX_WORKBENCH_RUNTIME_DIR); use the same one "
                    "to reach it"
                )
            else:
                echo_untrusted(
                    f"the local daemon of {directory} (pid {holder.pid}) holds it but does "
                    f"not answer on {holder.socket}"
                )
            return
        owned = f"; the store is in use by {holder.describe()}" if holder is not None else ""
        echo_untrusted(f"no local daemon runs for {directory}{owned}")
        return
    uptime = max(0, int(time.time() - info.started_at / 1000))
    idle = "never" if info.idle_seconds <= 0 else f"after {info.idle_seconds:g} s without a client"
    rows = [
        ("pid", str(info.pid)),
        ("uptime", _duration(uptime)),
        ("version", f"sandbox-workbench {info.version}"),
        ("data dir", info.data_dir),
        ("socket", info.socket),
        ("tcp", info.tcp or "none (`serve` adds one)"),
        ("sessions", f"{info.live_sessions} live"),
        (
            "requests",
            f"{info.requests_in_flight} being answered ({info.executions_in_flight} runs of code)",
        ),
        (
            "memory",
            "not reported"
            if info.memory_bytes is None
            else f"{info.memory_bytes / (1 << 20):.0f} MiB (PSS of the daemon and its engine "
            "processes: a page they share counts once)",
        ),
        ("idle exit", idle),
        ("log", info.log_file),
    ]
    echo_untrusted("local daemon: running")
    for label, value in rows:
        echo_untrusted(f"  {label:<10} {value}")


@daemon_group.command(
    "start",
    epilog="""\b
Examples:
  sandbox-workbench daemon start
  SANDBOX_WORKBENCH_DAEMON_IDLE_S=0 sandbox-workbench daemon start   # never exits idle""",
)
@data_dir_option
def start_command(data_dir: Path | None) -> None:
    """Start the daemon now (commands start it on demand anyway)."""
    from workbench.backends.daemon import ensure_daemon

    info = ensure_daemon(resolve_data_dir(data_dir))
    note(f"local daemon running (pid {info.pid}, {info.data_dir})")


@daemon_group.command(
    "stop",
    epilog="""\b
Examples:
  sandbox-workbench daemon stop
  sandbox-workbench --data-dir ./scratch daemon stop""",
)
@data_dir_option
def stop_command(data_dir: Path | None) -> None:
    """Write every live context's snapshot and stop the daemon."""
    from workbench.backends.daemon import probe, socket_path, stop

    directory = _data_dir(data_dir)
    path = socket_path(directory)
    running = probe(path) if directory.exists() else None
    pid = stop(path, directory) if directory.exists() else None
    if pid is None:
        echo_untrusted(f"no local daemon runs for {directory}")
        return
    echo_untrusted(f"stopped the local daemon (pid {pid})")
    if running is not None and running.pid == pid and running.tcp is not None:
        note(f"the daemon was `serve` on {running.tcp}: its remote clients lost it too")


@daemon_group.command(
    "logs",
    epilog="""\b
Examples:
  sandbox-workbench daemon logs
  sandbox-workbench daemon logs -n 200""",
)
@data_dir_option
@click.option(
    "--lines",
    "-n",
    default=50,
    show_default=True,
    type=click.IntRange(1, 1_000_000),  # more than a rotated log (1 MiB) holds
    help="How many.",
)
def logs_command(data_dir: Path | None, lines: int) -> None:
    """The last lines of the daemon's log."""
    from workbench.backends.daemon import log_path

    path = log_path(_data_dir(data_dir))
    try:
        with path.open(errors="replace") as log:
            tail = deque(log, maxlen=lines)
    except FileNotFoundError:
        echo_untrusted(f"no daemon log yet ({path})")
        return
    for line in tail:
        echo_untrusted(line.rstrip("\n"))


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
