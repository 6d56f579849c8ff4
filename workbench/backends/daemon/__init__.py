"""The local backend through its daemon: the client side (the daemon is `workbench.daemon`)."""

from workbench.backends.daemon.client import (
    DaemonInfo,
    DaemonStartError,
    ensure_daemon,
    open_daemon_backend,
    probe,
    stop,
    stop_at,
)
from workbench.backends.daemon.location import (
    UnsafeLocationError,
    log_path,
    socket_location,
    socket_path,
)

__all__ = [
    "DaemonInfo",
    "DaemonStartError",
    "UnsafeLocationError",
    "ensure_daemon",
    "log_path",
    "open_daemon_backend",
    "probe",
    "socket_location",
    "socket_path",
    "stop",
    "stop_at",
]
