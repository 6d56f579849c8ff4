"""First use of a language: its engine is prepared visibly, and Perl and Ruby come straight
from the npm registry npm would use (no npm needed), checked twice: the tarball against
the registry's integrity, the Wasm inside against the committed sha256.

The registry is a loopback server chosen through $NPM_CONFIG_REGISTRY; its tarballs hold
a stand-in Wasm, so preparation ends at the sha256 check (the real bytes need the real
registry)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pty
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.cli import SCRIPT, cli_env, one_error_line, run_cli
from tests.loopback import loopback_server

PERL_MEMBER = "package/dist/esm/zeroperl.wasm"
PERL_METADATA = "/@6over3%2Fzeroperl-ts/1.0.10"
PERL_TARBALL = "/@6over3/zeroperl-ts/-/zeroperl-ts-1.0.10.tgz"


def tarball_with(member: str, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo(member)
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


@contextmanager
def npm_registry(
    tarball: bytes, *, integrity: str | None = None, tarball_delay: float = 0.0
) -> Iterator[tuple[str, list[str]]]:
    """A registry serving the Perl package's version document and tarball (after
    `tarball_delay` seconds); yields its URL and the paths requested."""
    requested: list[str] = []
    digest = base64.b64encode(hashlib.sha512(tarball).digest()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            if self.path == PERL_METADATA:
                dist = {
                    "tarball": base + PERL_TARBALL,
                    "integrity": integrity or f"sha512-{digest}",
                }
                body = json.dumps({"name": "@6over3/zeroperl-ts", "dist": dist}).encode()
            elif self.path == PERL_TARBALL:
                time.sleep(tarball_delay)
                body = tarball
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(Handler) as url:
        yield f"{url}/", requested


def fresh_env(tmp_path: Path, registry: str) -> dict[str, str]:
    """An empty engine cache, the test registry, and no npm on PATH."""
    return cli_env(
        tmp_path,
        SANDBOX_WORKBENCH_CACHE_DIR=str(tmp_path / "cache"),
        NPM_CONFIG_REGISTRY=registry,
        PATH=str(Path(sys.executable).parent),
    )


def test_first_run_downloads_from_the_registry_showing_each_phase(tmp_path: Path) -> None:
    stand_in = tarball_with(PERL_MEMBER, b"\0asm\x01\0\0\0 not zeroperl")
    with npm_registry(stand_in) as (registry, requested):
        env = fresh_env(tmp_path, registry)
        first = run_cli(env, "run", "-l", "perl", "-c", "1")
        assert requested == [PERL_METADATA, PERL_TARBALL]
        assert first.returncode == 1
        lines = first.stderr.splitlines()
        assert lines[:4] == [
            "preparing the perl engine (its first use; this takes a while)",
            "perl engine: downloading @6over3/zeroperl-ts@1.0.10 from the npm registry",
            "perl engine: extracting zeroperl.wasm",
            "perl engine: verifying sha256",
        ]
        error = one_error_line(first)
        assert error.startswith("error: the engine could not be prepared: perl: sha256 mismatch")

        quiet = run_cli(env, "--quiet", "run", "-l", "perl", "-c", "1")
        assert quiet.returncode == 1
        assert quiet.stderr.splitlines() == [one_error_line(quiet)]


def test_a_tarball_that_fails_the_registry_integrity_is_refused(tmp_path: Path) -> None:
    stand_in = tarball_with(PERL_MEMBER, b"\0asm\x01\0\0\0")
    wrong = "sha512-" + base64.b64encode(hashlib.sha512(b"other").digest()).decode()
    with npm_registry(stand_in, integrity=wrong) as (registry, _):
        refused = run_cli(fresh_env(tmp_path, registry), "engines", "install", "perl")
    assert refused.returncode == 1
    assert "does not match the registry's integrity" in refused.stderr
    assert not list((tmp_path / "cache").rglob("*.tgz"))


def test_progress_on_a_terminal_is_a_live_display(tmp_path: Path) -> None:
    stand_in = tarball_with(PERL_MEMBER, b"\0asm\x01\0\0\0 not zeroperl")
    # A slow download: the live display draws at least once while it lasts.
    with npm_registry(stand_in, tarball_delay=0.5) as (registry, _):
        controller, terminal = pty.openpty()
        process = subprocess.Popen(
            [str(SCRIPT), "run", "-l", "perl", "-c", "1"],
            stdout=subprocess.PIPE,
            stderr=terminal,
            env={**fresh_env(tmp_path, registry), "TERM": "xterm-256color", "COLUMNS": "120"},
        )
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            shown += chunk
        os.close(controller)
        assert process.wait(timeout=60) == 1
    text = shown.decode(errors="replace")
    assert "perl" in text and "downloading @6over3/zeroperl-ts" in text
    assert "\x1b[" in text  # drawn with Rich, not one line per phase
    assert "preparing the perl engine" not in text


def test_engines_list_says_only_javascript_needs_npm(tmp_path: Path) -> None:
    env = fresh_env(tmp_path, "http://127.0.0.1:9/")
    rows = {
        row["language"]: row for row in json.loads(run_cli(env, "engines", "list", "--json").stdout)
    }
    assert rows["perl"]["state"] == rows["ruby"]["state"] == "not prepared"
    assert rows["python"]["state"] == "not prepared"
    assert rows["javascript"]["state"] == "cannot prepare"
    assert "needed to build the javascript engine" in rows["javascript"]["detail"]
