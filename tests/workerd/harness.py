"""Run the Workers `gateway init` renders in a real Workers runtime (workerd) for tests.

The gateway and the runtime Workers are rendered by `workbench.deploy.templates.render`,
exactly as `sandbox-workbench gateway init` writes them (versions pinned, the version check
as each Worker's build), and `wrangler dev` (the version the gateway's lockfile pins, run on
Node from PATH) serves them unmodified, in local mode on a loopback port, one `-c` config
each. Only the npm packages that are not published are replaced, by test-only stand-ins
installed under their names and versions above the rendered Workers
(`tests/workerd/standins/`, see `Standin`):

- `@sandbox-workers/core`: a `Sandbox` Durable Object that keeps no state (a
  `sandbox-workbench serve` process on loopback holds it) but does the caller side of the
  runtime contract: the `GET /interpreter` protocol check and the `executeInContext` RPC;
- `@sandbox-workers/<language>`: runtime Workers serving `GET /interpreter`,
  `POST /execute` and the `executeInContext` RPC from serve.

The gateway's npm dependencies are installed with `npm ci` from its committed lockfile
once, into `<cache dir>/workerd-gateway/<lockfile hash>/`, and reused by later runs (also
for `wrangler deploy --dry-run` of the rendered Workers).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.locations import cache_root
from tests.serve_process import ServeProcess, serve_process
from workbench.api import Backend
from workbench.backends.remote import open_remote_backend, tls_context
from workbench.config import RUBY_CONTEXTS_ENV
from workbench.deploy.templates import render
from workbench.deploy.versions import CORE_PACKAGE, SCOPE, load_versions

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "worker_templates"
TEMPLATE = TEMPLATES / "gateway"
STANDINS = Path(__file__).resolve().parent / "standins"
GATEWAY_TOKEN = "workerd-gateway-token-0123456789abcdef"
"""The gateway Worker's own bearer token (WORKBENCH_TOKEN); serve has another."""
TTL_MS = 86_400_000
BINDINGS = ("JAVASCRIPT", "PYTHON", "PERL", "RUBY")
NPM_CI_TIMEOUT = 600.0
START_TIMEOUT = 120.0
TEST_CONFIG = "wrangler.test.jsonc"


MIN_NODE_MAJOR = 20
"""wrangler 4.40 (the template's pin) runs on Node.js >= 20 (template package.json)."""


@functools.cache
def missing_node_tools() -> str | None:
    """Why the workerd suite cannot run here (node/npm missing or too old), or None."""
    for program in ("node", "npm"):
        if shutil.which(program) is None:
            return f"the workerd gateway tests need {program} (Node.js >= 20 with npm) on PATH"
    version = subprocess.run(
        ["node", "--version"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        return f"the workerd gateway tests need Node.js >= {MIN_NODE_MAJOR}, found {version!r}"
    return None


def _jsonc(text: str) -> dict[str, object]:
    """The template's JSONC: whole-line `//` comments only, no trailing commas."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    data = json.loads("\n".join(lines))
    assert isinstance(data, dict)
    return data


def lockfile_key() -> str:
    digest = hashlib.sha256((TEMPLATE / "package-lock.json").read_bytes())
    digest.update((TEMPLATE / "package.json").read_bytes())
    return digest.hexdigest()[:16]


def installed_dependencies() -> Path:
    """`npm ci` of the template's lockfile, once per lockfile: the cached install's root
    (it holds `node_modules/`). Concurrent test runs wait for one another."""
    base = cache_root() / "workerd-gateway"
    base.mkdir(parents=True, exist_ok=True)
    target = base / lockfile_key()
    marker = target / ".npm-ci-complete"
    if marker.is_file():
        return target
    with (base / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return target
        staging = base / f"staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copy2(TEMPLATE / name, staging / name)
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(
                f"npm ci of the gateway template failed ({result.returncode}):\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        (staging / ".npm-ci-complete").write_text("ok\n")
        staging.rename(target)
    return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Standin:
    """A stand-in installed as `package` (`@sandbox-workers/core` or a runtime package) at
    `version`; a runtime stand-in speaks interpreter `protocol`."""

    package: str
    version: str
    protocol: int = 1


def pinned_standins() -> list[Standin]:
    """A stand-in for every package of worker_templates/versions.json, at its version."""
    versions = load_versions(TEMPLATES)
    return [Standin(package, version) for package, version in versions.packages.items()]


def install_standins(root: Path, standins: Iterable[Standin]) -> None:
    """Install the stand-ins into `root/node_modules`, where Node.js resolution and
    `check-versions.mjs` find them from Workers rendered below `root`."""
    for standin in standins:
        directory = root / "node_modules" / standin.package
        directory.mkdir(parents=True)
        manifest = {
            "name": standin.package,
            "version": standin.version,
            "private": True,
            "type": "module",
            "exports": {".": "./index.js"},
        }
        (directory / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if standin.package == CORE_PACKAGE:
            shutil.copy2(STANDINS / "core.js", directory / "index.js")
            continue
        shutil.copy2(STANDINS / "runtime.js", directory / "index.js")
        language = standin.package.removeprefix(SCOPE)
        described = {"language": language, "protocol": standin.protocol}
        (directory / "standin.json").write_text(json.dumps(described) + "\n")


def render_with_standins(
    scratch: Path,
    bindings: Sequence[str],
    standins: Iterable[Standin],
    installed: Path,
    **options: Any,
) -> Path:
    """`gateway init`'s Workers in `scratch/deploy` (`render` with `options`), the
    stand-ins installed in `scratch`, the gateway's dependencies linked from `installed`;
    returns the deploy directory."""
    deploy = scratch / "deploy"
    render(deploy, bindings, **options)
    install_standins(scratch, standins)
    modules = deploy / "gateway" / "node_modules"
    modules.symlink_to(installed / "node_modules", target_is_directory=True)
    return deploy


def write_test_configs(
    deploy: Path, serve: ServeProcess, token: str, *, unchecked: Collection[str] = ()
) -> list[Path]:
    """Each rendered Worker's `wrangler.jsonc` plus the test vars, as `wrangler.test.jsonc`
    next to it; gateway first (its name is the one `wrangler dev` serves). The runtimes of
    `unchecked` bindings lose their build (the version check): they stand for Workers
    deployed at another version."""
    serve_vars = {"SERVE_URL": serve.url.rstrip("/"), "SERVE_TOKEN": serve.token}
    gateway = _jsonc((deploy / "gateway" / "wrangler.jsonc").read_text())
    gateway.pop("$schema", None)
    template_vars = gateway.get("vars", {})
    assert isinstance(template_vars, dict)
    gateway["vars"] = {
        **template_vars,
        "SANDBOX_IDLE_TTL_MS": str(TTL_MS),
        # A secret in production; a var is enough for a local test session.
        "WORKBENCH_TOKEN": token,
        **serve_vars,
    }
    configs = [_write_config(deploy / "gateway", gateway)]
    services = gateway.get("services", [])
    assert isinstance(services, list)
    for service in services:
        directory = deploy / "runtime" / service["binding"].lower()
        config = _jsonc((directory / "wrangler.jsonc").read_text())
        config.pop("$schema", None)
        runtime_vars = config.get("vars", {})
        assert isinstance(runtime_vars, dict)
        config["vars"] = {**runtime_vars, **serve_vars}
        if service["binding"] in unchecked:
            config.pop("build")
        configs.append(_write_config(directory, config))
    return configs


def _write_config(directory: Path, config: dict[str, Any]) -> Path:
    if "build" in config:
        # wrangler runs a custom build in its own working directory, not the config's:
        # one `wrangler dev` of several Workers needs each build pointed at its Worker.
        config["build"] = {**config["build"], "cwd": str(directory)}
    path = directory / TEST_CONFIG
    path.write_text(
        "// Generated for the workerd tests: the rendered wrangler.jsonc plus test vars.\n"
        + json.dumps(config, indent=2)
        + "\n"
    )
    return path


@dataclass(frozen=True)
class WorkerdGateway:
    url: str
    token: str
    serve: ServeProcess
    scratch: Path
    log: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, size: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-size:]

    def client(self, *, authorized: bool = True, timeout: float = 120.0) -> httpx.Client:
        """An HTTP client of the gateway (with its token when `authorized`)."""
        headers = {"authorization": f"Bearer {self.token}"} if authorized else {}
        return httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            transport=DevProxyRetry(),
        )

    def backend(self, name: str, **options: Any) -> Backend:
        """The remote backend of the gateway, as `open_remote_backend` opens it."""
        return open_remote_backend(
            name, self.url, self.token, transport=AsyncDevProxyRetry(), **options
        )


DEV_PROXY_DROPPED = b"Your worker restarted mid-request."
"""How `wrangler dev`'s ProxyWorker answers (503) a request it lost on its own pooled
connection to the Worker: both ends of that hop close an idle keep-alive connection after
5 s, and a request written as they do is dropped before the Worker sees it
(cloudflare/workers-sdk#14641, #15252). A fault of the dev tool, not of the Workers."""
DEV_PROXY_ATTEMPTS = 3


def _dropped_by_dev_proxy(request: httpx.Request, response: httpx.Response) -> bool:
    """Whether `response` is that drop, for a request whose body can be sent again (a
    streamed body cannot: its test sees the 503)."""
    return (
        response.status_code == 503
        and response.content.startswith(DEV_PROXY_DROPPED)
        and isinstance(request.stream, httpx.ByteStream)
    )


class DevProxyRetry(httpx.HTTPTransport):
    """Sends a request `wrangler dev` dropped again (see `DEV_PROXY_DROPPED`)."""

    def __init__(self) -> None:
        super().__init__(verify=tls_context())  # one per process, as the backend's

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(DEV_PROXY_ATTEMPTS - 1):
            response = super().handle_request(request)
            if response.status_code != 503:
                return response
            response.read()
            if not _dropped_by_dev_proxy(request, response):
                return response
            response.close()
        return super().handle_request(request)


class AsyncDevProxyRetry(httpx.AsyncHTTPTransport):
    """`DevProxyRetry` for the async clients (the remote backend)."""

    def __init__(self) -> None:
        super().__init__(verify=tls_context())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(DEV_PROXY_ATTEMPTS - 1):
            response = await super().handle_async_request(request)
            if response.status_code != 503:
                return response
            await response.aread()
            if not _dropped_by_dev_proxy(request, response):
                return response
            await response.aclose()
        return await super().handle_async_request(request)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/health", timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the test process dies, so a killed
    pytest run does not leave `wrangler dev` (and its workerd) behind (Linux only)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop wrangler and the workerd it spawned: the process group it leads (started
    with start_new_session, so the group is exactly that session)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wrangler_command(installed: Path, *args: str) -> list[str]:
    """The cached wrangler, run on Node from PATH."""
    return ["node", str(installed / "node_modules" / "wrangler" / "bin" / "wrangler.js"), *args]


def wrangler_env(scratch: Path) -> dict[str, str]:
    """No metrics, logs and config under `scratch`, no update check, no colour."""
    return {
        **os.environ,
        "WRANGLER_SEND_METRICS": "false",
        "WRANGLER_LOG_PATH": str(scratch / "wrangler-logs"),
        "XDG_CONFIG_HOME": str(scratch / "xdg-config"),
        "NO_UPDATE_NOTIFIER": "1",
        "CI": "1",
        "FORCE_COLOR": "0",
    }


@contextlib.contextmanager
def workerd_gateway(
    scratch: Path,
    serve: ServeProcess,
    *,
    bindings: Sequence[str] = BINDINGS,
    standins: Iterable[Standin] | None = None,
    unchecked: Collection[str] = (),
) -> Iterator[WorkerdGateway]:
    """`wrangler dev` of the rendered Workers of `bindings` (with the `standins`, by
    default the pinned ones) on a loopback port."""
    installed = installed_dependencies()
    chosen = pinned_standins() if standins is None else standins
    deploy = render_with_standins(scratch, bindings, chosen, installed)
    configs = write_test_configs(deploy, serve, GATEWAY_TOKEN, unchecked=unchecked)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = wrangler_command(installed, "dev")
    for config in configs:
        command += ["-c", str(config)]
    command += [
        "--local",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--inspector-port",
        str(_free_port()),
        "--persist-to",
        str(scratch / ".wrangler" / "state"),
        "--show-interactive-dev-session=false",
        "--log-level",
        "warn",
    ]
    env = wrangler_env(scratch)
    log = scratch / "wrangler-dev.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=scratch,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    gateway = WorkerdGateway(url, GATEWAY_TOKEN, serve, scratch, log, process)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"wrangler dev did not start (exit {process.poll()}):\n{gateway.log_tail()}"
                )
            time.sleep(0.25)
        yield gateway
    finally:
        _stop(process)


_STASH_KEY = pytest.StashKey[WorkerdGateway | BaseException]()


def session_gateway(request: pytest.FixtureRequest) -> WorkerdGateway:
    """The test session's one workerd gateway (and the serve process behind it), started
    on first use by whichever fixture asks, stopped when the session ends. Skips when
    node/npm are missing; fails (every time asked) when it cannot start."""
    reason = missing_node_tools()
    if reason is not None:
        pytest.skip(reason)
    config = request.config
    existing = config.stash.get(_STASH_KEY, None)
    if isinstance(existing, BaseException):
        pytest.fail(f"the workerd gateway could not start: {existing}")
    if existing is not None:
        return existing
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    stack = contextlib.ExitStack()
    try:
        serve = stack.enter_context(
            serve_process(
                factory.mktemp("workerd-served"),
                # Ruby contexts on (a local extension), as the API suite's serve: the
                # runtime contract checks what the Ruby Worker does with one that exists.
                env={"SANDBOX_WORKBENCH_IDLE_TTL_MS": str(TTL_MS), RUBY_CONTEXTS_ENV: "1"},
            )
        )
        gateway = stack.enter_context(workerd_gateway(factory.mktemp("workerd-gateway"), serve))
    except Exception as error:
        stack.close()
        config.stash[_STASH_KEY] = error
        pytest.fail(f"the workerd gateway could not start: {error}")
    config.add_cleanup(stack.close)
    config.stash[_STASH_KEY] = gateway
    return gateway
