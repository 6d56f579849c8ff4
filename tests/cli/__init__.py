"""Command-line tests: the real CLI in processes of their own (forked from one that
imported it, or the console script itself where a test needs that process), with the
data and config dirs in tmp dirs and none of the user's workbench settings inherited.

Also a keyring backend for the tests (the OS keyring is an external boundary): select it
with `PYTHON_KEYRING_BACKEND=tests.cli.FileKeyring` (tokens in the JSON file named by
`$TEST_KEYRING_FILE`) or `tests.cli.BrokenKeyring` (every call fails, like a locked or
unreachable keyring service).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from keyring.backend import KeyringBackend

from tests.cli_fork_server import SCRIPT, run_cli_forked
from tests.serve_process import stop_process

ROOT = Path(__file__).resolve().parents[2]
CTRL_C_TAKEN = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]
"""Prefix of a command whose process takes SIGINT as a foreground job of a terminal does:
a test run started as a background job of a shell without job control has SIGINT ignored,
which its processes inherit, and a CLI command keeps an ignored SIGINT ignored (POSIX)."""

INHERITED_SETTINGS = (
    "SANDBOX_WORKBENCH_PROFILE",
    "SANDBOX_WORKBENCH_TIMEOUT_S",
    "SANDBOX_WORKBENCH_DEBUG",
    "SANDBOX_WORKBENCH_TOKEN",
    "NO_COLOR",
    "NPM_CONFIG_REGISTRY",
    "npm_config_registry",
    "PYTHON_KEYRING_BACKEND",
)


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI test: its own data and config dirs (the engine cache is
    shared: engines are prepared once per machine)."""
    env = {key: value for key, value in os.environ.items() if key not in INHERITED_SETTINGS}
    env["SANDBOX_WORKBENCH_DATA_DIR"] = str(tmp_path / "data")
    env["SANDBOX_WORKBENCH_CONFIG_DIR"] = str(tmp_path / "config")
    env["PYTHONPATH"] = str(ROOT)  # for the test keyring backends
    env.update(extra)
    return env


def run_cli(
    env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`sandbox-workbench ARGS…` in a process of its own, forked from one that imported
    the CLI (`tests.cli_fork_server`); stdin is empty unless given."""
    return run_cli_forked(env, *args, stdin=stdin, timeout=timeout, cwd=ROOT)


def one_error_line(completed: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line a failure prints (asserting there is no traceback)."""
    assert "Traceback" not in completed.stderr, completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, completed.stderr
    return lines[0]


class FileKeyring(KeyringBackend):
    """Tokens in a JSON file (`$TEST_KEYRING_FILE`)."""

    priority = 1.0

    def _load(self) -> dict[str, str]:
        path = Path(os.environ["TEST_KEYRING_FILE"])
        return json.loads(path.read_text()) if path.exists() else {}

    def _save(self, entries: dict[str, str]) -> None:
        Path(os.environ["TEST_KEYRING_FILE"]).write_text(json.dumps(entries))

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        self._save({**self._load(), f"{service}/{username}": password})

    def delete_password(self, service: str, username: str) -> None:
        from keyring.errors import PasswordDeleteError

        entries = self._load()
        if entries.pop(f"{service}/{username}", None) is None:
            raise PasswordDeleteError("no such password")
        self._save(entries)


class BrokenKeyring(KeyringBackend):
    """A keyring service that fails every call."""

    priority = 1.0

    def get_password(self, service: str, username: str) -> str | None:
        raise RuntimeError("the keyring daemon is not answering")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise RuntimeError("the keyring daemon is not answering")

    def delete_password(self, service: str, username: str) -> None:
        raise RuntimeError("the keyring daemon is not answering")


@contextmanager
def serving(env: dict[str, str], *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`sandbox-workbench serve --port 0 ARGS…`; yields the process and its URL."""
    process = subprocess.Popen(
        [str(SCRIPT), "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        seen = []
        for line in process.stdout:
            seen.append(line)
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                yield process, match.group(1)
                return
        raise AssertionError("serve did not start:\n" + "".join(seen))
    finally:
        stop_process(process)
