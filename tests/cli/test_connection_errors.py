"""A gateway that cannot be reached is one line naming the real cause (refused, DNS, TLS,
timeout) and exit 3. Every server here is on loopback; the unresolvable name is under
`.invalid`, which never resolves."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.cli import cli_env, one_error_line, run_cli
from tests.loopback import loopback_server

TOKEN = "t" * 20


def failure_for(tmp_path: Path, url: str, *args: str) -> str:
    env = cli_env(tmp_path, GW_TOKEN=TOKEN)
    added = run_cli(env, "profiles", "add", "gw", "--url", url, "--token-env", "GW_TOKEN")
    assert added.returncode == 0, added.stderr
    failed = run_cli(env, *(args or ("sandboxes", "list")), "-p", "gw")
    assert failed.returncode == 3, failed.stderr
    return one_error_line(failed)


def test_closed_port_is_connection_refused(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert failure_for(tmp_path, url) == (
        f"error: connection refused by {url}: is the gateway running and is the port right?"
    )


def test_unresolvable_host_is_a_dns_failure(tmp_path: Path) -> None:
    url = "https://no-such-gateway.invalid"
    line = failure_for(tmp_path, url)
    assert line.startswith(
        f"error: cannot resolve the gateway's host name 'no-such-gateway.invalid' ({url}): "
    )


@contextmanager
def silent_listener() -> Iterator[str]:
    """Accepts connections (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    with silent_listener() as url:
        started = time.monotonic()
        line = failure_for(tmp_path, url, "run", "-b", "PYTHON", "--timeout", "1", "-c", "1")
        assert time.monotonic() - started < 15
    assert line == f"error: the gateway at {url} did not answer in time (waited 1 s)"


@contextmanager
def plain_http_server() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(Handler) as url:
        yield int(url.rsplit(":", 1)[1])


def test_tls_to_a_plain_http_server_is_a_tls_failure(tmp_path: Path) -> None:
    with plain_http_server() as port:
        url = f"https://127.0.0.1:{port}"
        line = failure_for(tmp_path, url)
    assert line.startswith(f"error: TLS failure talking to {url} (")
    assert line.endswith("): does it speak https? (a local `serve` is plain http://)")
